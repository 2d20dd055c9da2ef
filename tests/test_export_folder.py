"""`export` writes only the model files, ready to upload as is; loads print no false "random init" lines."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

from train_fixtures import make_prepared, tiny_config

NO_WEIGHTS = ("no CLIP weights found", "initialized randomly", "No pretrained weights")


def _run(tmp_path: Path) -> Path:
    from caption_debias.train.loop import train

    data, images = make_prepared(tmp_path, n=8)
    return train(tiny_config(data, images, tmp_path / "run", max_steps=0, device="cpu"))


def test_export_holds_only_model_files_with_plain_modes_and_no_local_paths(tmp_path, capsys, caplog):
    from caption_debias.model.export import CONFIG_FILE, WEIGHTS_FILE, export

    run = _run(tmp_path)
    capsys.readouterr()
    caplog.clear()
    out = tmp_path / "published"
    with caplog.at_level(logging.WARNING):
        export(str(run), out)
    assert sorted(p.name for p in out.iterdir()) == [CONFIG_FILE, WEIGHTS_FILE]
    umask = os.umask(0)
    os.umask(umask)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o666 & ~umask, name
    text = (out / CONFIG_FILE).read_text()
    assert str(tmp_path) not in text and "/tmp" not in text
    assert json.loads(text)["caption_debias"]["run"] == "run"
    said = capsys.readouterr().err + caplog.text
    assert not any(w in said for w in NO_WEIGHTS), said


def test_loading_a_run_or_an_export_prints_no_random_init_warning(tmp_path, capsys, caplog):
    from caption_debias.model.export import export
    from caption_debias.model.load import load_model

    run = _run(tmp_path)
    export(str(run), tmp_path / "exp")
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_model(str(run))
        load_model(f"local-dir:{tmp_path / 'exp'}")
    said = capsys.readouterr().err + caplog.text
    assert not any(w in said for w in NO_WEIGHTS), said
    with caplog.at_level(logging.WARNING):
        load_model("tiny")  # a real random init still says so
    assert "initialized randomly" in caplog.text


def test_export_reads_overwrite_and_quiet_from_a_config_file(tmp_path):
    from typer.testing import CliRunner

    from caption_debias.cli.main import app
    from caption_debias.model.export import CONFIG_FILE

    out = tmp_path / "o"
    out.mkdir()
    (out / "old.txt").write_text("an earlier export")
    res = CliRunner().invoke(app, ["export", "tiny", "--out", str(out), "-q"])
    assert "pass --overwrite" in str(res.exception)  # the default, from ExportOptions
    (tmp_path / "c.toml").write_text("overwrite = true\nquiet = true\n")
    res = CliRunner().invoke(app, ["export", "tiny", "--out", str(out), "--config", str(tmp_path / "c.toml")])
    assert res.exit_code == 0 and res.output == "", res.output
    assert (out / CONFIG_FILE).is_file() and not (out / "old.txt").exists()
