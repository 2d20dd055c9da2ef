"""The shipped start `demo-start` is a name every model flag takes (score, curate --score-model, eval,
probe, train, export); scoring or evaluating with random weights says so in one line; the score
command docs/curation.md shows runs as pasted."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from eval_fixtures import make_images, write_prepared

ROOT = Path(__file__).resolve().parents[1]
RANDOM_LINE = re.compile(r"caption-debias: warning: (\w+) with (\S+) without --pretrained: random weights")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("shipped")
    return root, write_prepared(root / "prepared", make_images(root, 10, seed=2), image_root=root)


def _cli(*args: str):
    from typer.testing import CliRunner

    from caption_debias.cli.main import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def test_demo_start_loads_the_shipped_folder_under_its_name():
    from caption_debias.errors import UserError
    from caption_debias.model.load import load_model
    from caption_debias.model.names import shipped_folder
    from caption_debias.score.encode import weights_sha256

    named = load_model("demo-start")
    folder = load_model(f"local-dir:{shipped_folder('demo-start')}")
    assert weights_sha256(named.model) == weights_sha256(folder.model)
    assert (named.name, named.spec, named.info["shipped"]) == ("demo-start", "demo-start", "demo-start")
    assert named.context_length == folder.context_length == 77
    with pytest.raises(UserError, match="shipped model with its own weights"):
        load_model("demo-start", "openai")


def test_random_weights_is_told_apart_without_loading(tmp_path):
    from caption_debias.model.names import random_weights

    (tmp_path / "ckpt.pt").write_bytes(b"")
    assert random_weights("tiny", None) and random_weights("ViT-B-16", None) and random_weights("demo-small", "")
    assert not random_weights("ViT-B-16", "openai") and not random_weights("demo-start", None)
    assert not random_weights("local-dir:x", None) and not random_weights("hf-hub:a/b", None)
    assert not random_weights(str(tmp_path), None) and not random_weights(str(tmp_path / "ckpt.pt"), None)


def test_an_unknown_model_name_is_one_line_before_any_loading_line():
    import open_clip

    from caption_debias.errors import UserError
    from caption_debias.model.describe import describe
    from caption_debias.model.load import register_shipped_configs
    from caption_debias.model.names import architecture_names

    register_shipped_configs()
    names = architecture_names()  # the names open_clip knows, read without importing it
    assert names <= set(open_clip.list_models()) and {"ViT-B-16", "RN50", "tiny", "demo-small"} <= names
    assert len(names) >= 100 and "summary_model" not in names  # a shipped JSON that is not a model config
    with pytest.raises(UserError, match="unknown model 'no-such-model'"):
        describe("no-such-model")
    assert describe("ViT-B-16") == "ViT-B-16 (random weights)" and describe("tiny", "x").startswith("tiny")


def test_score_and_eval_with_random_weights_say_so_in_one_line(world, tmp_path):
    root, prepared = world
    said = _cli("score", prepared, "--model", "tiny", "--out", tmp_path / "s", "--image-root", root).output
    assert [m.groups() for m in RANDOM_LINE.finditer(said)] == [("score", "tiny")]
    assert "initialized randomly" not in said and "No pretrained weights" not in said  # open_clip's is not repeated
    said = _cli("eval", "tiny", "--data", prepared, "--image-root", root, "--device", "cpu").output
    assert [m.groups() for m in RANDOM_LINE.finditer(said)] == [("eval", "tiny")]
    probe = ["probe", "tiny", "--data", prepared, "--image-root", root, "--device", "cpu", "--out", tmp_path / "p"]
    assert [m.groups() for m in RANDOM_LINE.finditer(_cli(*probe).output)] == [("probe", "tiny")]
    quiet = _cli("eval", "tiny", "--data", prepared, "--image-root", root, "--device", "cpu", "-q").output
    assert "random weights" not in quiet  # -q: nothing
    said = _cli("score", prepared, "--model", "demo-start", "--out", tmp_path / "d", "--image-root", root).output
    assert "random weights" not in said


@pytest.mark.slow
def test_every_model_flag_takes_demo_start(world, tmp_path):
    root, prepared = world
    _cli("score", prepared, "--model", "demo-start", "--out", tmp_path / "s", "--image-root", root, "-q")
    model = json.loads((tmp_path / "s" / "manifest.json").read_text())["scoring"]["model"]
    assert (model["name"], model["spec"], model["source"]) == ("demo-start", "demo-start", {"shipped": "demo-start"})
    _cli("curate", prepared, "--out", tmp_path / "c", "--image-root", root, "--score-model", "demo-start", "-q")
    curated = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert curated["scoring"]["model"]["weights_sha256"] == model["weights_sha256"]
    out = tmp_path / "e.json"
    _cli("eval", "demo-start", "--data", prepared, "--image-root", root, "--device", "cpu", "--out", out, "-q")
    assert json.loads(out.read_text())["keep"]["t2i"]["r10"] > 0
    _cli("probe", "demo-start", "--data", prepared, "--image-root", root, "--device", "cpu", "--out", tmp_path / "p")
    assert (tmp_path / "p" / "probe.json").is_file()
    _cli("export", "demo-start", "--out", tmp_path / "x", "-q")
    assert (tmp_path / "x" / "open_clip_config.json").is_file()
    run = tmp_path / "run"
    train = ["train", prepared, "--image-root", root, "--model", "demo-start", "--out", run, "-q"]
    _cli(*train, "--max-steps", "1", "--batch-size", "4", "--warmup-steps", "0", "--device", "cpu")
    assert json.loads((run / "config.json").read_text())["config"]["model"] == "demo-start"


@pytest.mark.slow
def test_the_score_commands_docs_curation_shows_run_as_pasted(tmp_path):
    text = (ROOT / "docs" / "curation.md").read_text("utf-8")
    block = text.split("<!-- try-score:begin -->", 1)[1].split("<!-- try-score:end -->", 1)[0]
    commands = [line for line in block.splitlines() if line.startswith("caption-debias ")]
    assert any(" score " in c and "--model demo-start" in c for c in commands)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command in commands:
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, (command, done.stderr)
        assert "random weights" not in done.stderr
    scored = json.loads((tmp_path / "scored" / "world" / "manifest.json").read_text())
    assert scored["counts"]["written"] == 40 and scored["scoring"]["model"]["spec"] == "demo-start"
    assert (tmp_path / "reports" / "world" / "report.html").is_file()
