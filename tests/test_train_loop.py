"""The loop end to end on the tiny model: exact resume, skipped images, --max-steps 0, CLI + config, export."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import torch
from train_fixtures import MISSING, checkpoint, crash_at_step, metric_lines, tiny_config, train_set

from caption_debias.errors import UserError


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return train_set(tmp_path_factory.mktemp("train"))


@pytest.mark.slow  # over 30 s on 2 shared cores
def test_resume_reproduces_uninterrupted_run_exactly(prepared, tmp_path, monkeypatch):
    from caption_debias.train import loop

    data, _, good = prepared
    straight = loop.train(tiny_config(data, good, tmp_path / "a", max_steps=4))
    crash_at_step(monkeypatch, loop, 2, lambda: loop.train(tiny_config(data, good, tmp_path / "b", max_steps=4)))
    assert [d["step"] for d in metric_lines(tmp_path / "b")] == [1, 2]
    with pytest.raises(UserError, match="--resume"):
        loop.train(tiny_config(data, good, tmp_path / "b", max_steps=4))
    with pytest.raises(UserError, match="changed options"):
        loop.train(tiny_config(data, good, tmp_path / "b", max_steps=4, resume="latest", lr=0.5))
    resumed = loop.train(tiny_config(data, good, tmp_path / "b", max_steps=4, resume="latest"))
    assert metric_lines(resumed) == metric_lines(straight)
    a, b = checkpoint(straight, 4), checkpoint(resumed, 4)
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert a["counters"] == b["counters"] and a["counters"]["fallback"] > 0
    # positions < 20 stayed frozen, the rest trained
    head = a["model"]["parametrizations.positional_embedding.0.head"]
    torch.manual_seed(0)
    from caption_debias.model.load import load_model
    from caption_debias.model.stretch import knowledge_preserved_stretch

    start = knowledge_preserved_stretch(load_model("tiny").model.positional_embedding.detach(), 20)
    assert torch.equal(head, start[:20])
    assert not torch.equal(a["model"]["parametrizations.positional_embedding.original"], start[20:])


def test_missing_image_skipped_and_counted_or_strict(prepared, tmp_path, capfd):
    from caption_debias.train.loop import train

    data, images, _ = prepared
    run = train(tiny_config(data, images, tmp_path / "s", recipe="short", max_steps=3, checkpoint_every=10))
    last = metric_lines(run)[-1]
    assert last["skipped_images"] == 1 and last["loss_short"] is None
    assert f"img{MISSING:04d}.png" in capfd.readouterr().err
    with pytest.raises(UserError, match=f"img{MISSING:04d}.png.*--strict"):
        train(tiny_config(data, images, tmp_path / "t", recipe="short", max_steps=3, strict=True))


def test_cli_config_max_steps_zero_and_export(prepared, tmp_path):
    import open_clip
    from typer.testing import CliRunner

    from caption_debias.cli.main import app
    from caption_debias.model.load import load_model
    from caption_debias.model.stretch import knowledge_preserved_stretch

    data, _, good = prepared
    conf = tmp_path / "c.toml"
    conf.write_text(
        f'model = "tiny"\nrecipe = "clip"\nimage-root = "{good}"\nbatch_size = 4\nmax_steps = 3\nprecision = "fp32"\n'
    )
    run = tmp_path / "run0"
    res = CliRunner().invoke(
        app,
        [
            "train",
            str(data),
            "--config",
            str(conf),
            "--recipe",
            "debias",
            "--max-steps",
            "0",
            "--out",
            str(run),
            "--quiet",
            "--no-tensorboard",
        ],
    )
    assert res.exit_code == 0, res.output
    cfg = json.loads((run / "config.json").read_text())["config"]
    assert cfg["recipe"] == "debias" and cfg["max_steps"] == 0 and cfg["batch_size"] == 4 and cfg["model"] == "tiny"
    loaded = load_model(str(run))
    torch.manual_seed(0)
    start = knowledge_preserved_stretch(load_model("tiny").model.positional_embedding.detach(), 20)
    assert loaded.context_length == 248 and torch.equal(loaded.model.positional_embedding.detach(), start)
    assert loaded.model.logit_scale.item() == pytest.approx(4.60517, abs=1e-4)

    out = tmp_path / "export"
    res = CliRunner().invoke(app, ["export", str(run), "--out", str(out)])
    assert res.exit_code == 0, res.output
    model, _, _ = open_clip.create_model_and_transforms(f"local-dir:{out}")
    tok = open_clip.get_tokenizer(f"local-dir:{out}")
    ids = tok(["a red circle. " * 30])
    assert ids.shape == (1, 248)
    with torch.no_grad():
        torch.testing.assert_close(model.encode_text(ids), loaded.model.encode_text(ids))
    res = CliRunner().invoke(app, ["export", str(run), "--out", str(out)])
    assert isinstance(res.exception, UserError)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # over 30 s on 2 shared cores
def test_ddp_two_processes_match_one(prepared, tmp_path):
    """Gathered features + averaged gradients: 2 ranks x 2 rows give the 1 x 4 losses."""
    from caption_debias.train.loop import train

    data, _, good = prepared
    kw = dict(recipe="clip", max_steps=2, checkpoint_every=10)
    single = train(tiny_config(data, good, tmp_path / "one", **kw))
    script = tmp_path / "worker.py"
    script.write_text(
        "import sys, json\n"
        "from caption_debias.train.config import TrainConfig\n"
        "from caption_debias.train.loop import train\n"
        "train(TrainConfig(**json.loads(sys.argv[1])))\n"
    )
    cfg = tiny_config(data, good, tmp_path / "two", **kw, batch_size=2).to_dict()
    cfg["quiet"] = False
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        str(script),
        json.dumps(cfg),
    ]
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = metric_lines(single), metric_lines(tmp_path / "two")
    assert [d["step"] for d in two] == [1, 2]
    for a, b in zip(one, two):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-5)
    assert json.loads((tmp_path / "two" / "config.json").read_text())["resolved"]["world_size"] == 2


def test_stored_ids_used_or_retokenized_once(prepared):
    from open_clip.tokenizer import SimpleTokenizer

    from caption_debias.dataset import PreparedDataset
    from caption_debias.train.data import load_rows

    data = prepared[0]
    sentences = PreparedDataset.open(data).read(["sentences"])["sentences"].to_pylist()
    plain = load_rows(data, SimpleTokenizer())
    assert not plain.retokenized
    assert [s.tolist() for s in plain.tokens.sentences(3)] == [SimpleTokenizer().encode(x) for x in sentences[3]]
    other = SimpleTokenizer(clean="canonicalize")  # drops punctuation: ids differ from the shards'
    redone = load_rows(data, other)
    assert redone.retokenized
    assert [s.tolist() for s in redone.tokens.sentences(3)] == [other.encode(x) for x in sentences[3]]
    assert redone.tokens.sentences(3)[0].tolist() != plain.tokens.sentences(3)[0].tolist()
