"""Faults a multi-day training run meets (issue 13, train side): a resume spelled differently or
from a moved folder, dropout across a resume, a damaged newest checkpoint, a kill mid-save,
an incomplete prepared folder, a second `train` on the same run folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from train_fixtures import make_prepared, tiny_config

from caption_debias.errors import UserError
from caption_debias.train.config import TrainConfig


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    data, images = make_prepared(root, n=12)
    other, _ = make_prepared(root / "other", n=16)  # another data set, same image names
    return data, images, other


@pytest.fixture(scope="module")
def straight(world, tmp_path_factory) -> Path:
    """The uninterrupted run of the default config, made once: every resume of it here must match it."""
    from caption_debias.train.loop import train

    data, images, _ = world
    return train(_cfg(data, images, tmp_path_factory.mktemp("straight") / "a"))


def _cfg(data, images, out, **kw) -> TrainConfig:
    return tiny_config(data, images, out, **{"checkpoint_every": 1, "max_steps": 4, **kw})


def _lines(run: Path) -> list[dict]:
    out = []
    for line in (Path(run) / "metrics.jsonl").read_text().splitlines():
        d = json.loads(line)
        d.pop("images_per_s")
        out.append(d)
    return out


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["model"]


def _same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def _crash_at(monkeypatch, step: int):
    """Make the next train() stop (as a kill would) before optimizer step `step`."""
    from caption_debias.train import loop

    real = loop.lr_at

    def lr_at(s, *a):
        if s == step:
            raise KeyboardInterrupt
        return real(s, *a)

    monkeypatch.setattr(loop, "lr_at", lr_at)
    return lambda: monkeypatch.setattr(loop, "lr_at", real)


def _interrupted(monkeypatch, cfg: TrainConfig, step: int) -> None:
    from caption_debias.train.loop import train

    restore = _crash_at(monkeypatch, step)
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    restore()


def test_resume_is_judged_on_meaning_not_spelling(world, straight, tmp_path, monkeypatch):
    """Relative vs absolute data, a symlink, another working directory and a moved run folder all
    resume (bit-exact); another learning rate or other data are refused."""
    from caption_debias.train.loop import train

    data, images, other = world

    home = tmp_path / "home"
    home.mkdir()
    (home / "data").symlink_to(data)
    monkeypatch.chdir(home)
    _interrupted(monkeypatch, _cfg("data", os.path.relpath(images), "runs/a"), step=2)

    moved = tmp_path / "elsewhere" / "b"
    moved.parent.mkdir()
    shutil.move(str(home / "runs" / "a"), moved)
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(UserError, match=r"changed options \(lr\)"):
        train(_cfg(data, images, "b", resume="latest", lr=0.5))
    with pytest.raises(UserError, match=r"changed options \(data"):
        train(_cfg(other, images, "b", resume="latest"))
    resumed = train(_cfg(str(data.resolve()), str(images), "b", resume="latest"))
    assert _lines(resumed) == _lines(straight)
    _same_weights(straight / "checkpoints" / "step_00000004.pt", moved / "checkpoints" / "step_00000004.pt")


def _tiny_with_patch_dropout(tmp_path: Path) -> str:
    import open_clip

    from caption_debias.model.load import register_shipped_configs

    register_shipped_configs()
    cfg = json.loads(json.dumps(open_clip.get_model_config("tiny")))
    cfg["vision_cfg"]["patch_dropout"] = 0.5
    path = tmp_path / "tiny-patch-dropout.json"
    path.write_text(json.dumps(cfg))
    open_clip.add_model_config(path)
    return "tiny-patch-dropout"


@pytest.fixture(scope="module")
def dropped(world, tmp_path_factory) -> Path:
    """The uninterrupted patch-dropout run, made once (in-process loading): the same for any loader worker
    count, so each worker count's resume must match it."""
    from caption_debias.train.loop import train

    data, images, _ = world
    root = tmp_path_factory.mktemp("dropped")
    return train(_cfg(data, images, root / "a", model=_tiny_with_patch_dropout(root), workers=0))


@pytest.mark.parametrize("workers", [0, 1])
def test_resume_with_patch_dropout_is_bit_exact(world, straight, dropped, tmp_path, monkeypatch, workers):
    """A model that draws random numbers in training (patch dropout) continues exactly: the data
    loader no longer draws from the RNG the dropout uses, which is restored after it starts."""
    from caption_debias.train.loop import train

    data, images, _ = world
    model = _tiny_with_patch_dropout(tmp_path)
    kw = dict(model=model, workers=workers)
    nodrop = straight  # the same data and options without patch dropout
    assert [d["loss"] for d in _lines(dropped)] != [d["loss"] for d in _lines(nodrop)]  # dropout is on
    _interrupted(monkeypatch, _cfg(data, images, tmp_path / "b", **kw), step=2)
    resumed = train(_cfg(data, images, tmp_path / "b", resume="latest", **kw))
    assert _lines(resumed) == _lines(dropped)
    _same_weights(dropped / "checkpoints" / "step_00000004.pt", resumed / "checkpoints" / "step_00000004.pt")


@pytest.fixture(scope="module")
def cut_at_3(world, tmp_path_factory) -> Path:
    """A run killed before step 3, made once: each damage below is done to its own copy of it."""
    data, images, _ = world
    run = tmp_path_factory.mktemp("cut") / "b"
    with pytest.MonkeyPatch.context() as mp:
        _interrupted(mp, _cfg(data, images, run), step=3)
    return run


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
def test_damaged_latest_checkpoint_is_skipped_and_the_run_stays_exact(
    world, straight, cut_at_3, tmp_path, capfd, damage
):
    from caption_debias.model.load import load_model
    from caption_debias.train.loop import train

    data, images, _ = world
    shutil.copytree(cut_at_3, tmp_path / "b", symlinks=True)  # a moved run folder resumes (tested above)
    latest = tmp_path / "b" / "checkpoints" / "step_00000003.pt"
    blob = latest.read_bytes()
    latest.write_bytes({"truncated": blob[: len(blob) // 2], "empty": b"", "garbage": os.urandom(4096)}[damage])
    capfd.readouterr()

    # eval / export of the run folder: the newest readable checkpoint, the damaged one named
    loaded = load_model(str(tmp_path / "b"))
    assert loaded.info["step"] == 2
    assert "skipping damaged checkpoint" in capfd.readouterr().err
    from caption_debias.model.export import export

    exported = export(str(tmp_path / "b"), tmp_path / "export")
    assert json.loads((exported / "open_clip_config.json").read_text())["caption_debias"]["step"] == 2

    resumed = train(_cfg(data, images, tmp_path / "b", resume="latest", quiet=False))
    err = capfd.readouterr().err
    assert f"skipping damaged checkpoint {latest}: not a readable checkpoint" in err
    assert "moved to step_00000003.pt.damaged" in err and "from step 2" in err
    assert (latest.parent / "step_00000003.pt.damaged").is_file()
    assert _lines(resumed) == _lines(straight)
    _same_weights(straight / "checkpoints" / "step_00000004.pt", resumed / "checkpoints" / "step_00000004.pt")


def test_every_checkpoint_damaged_is_one_line(world, tmp_path, monkeypatch):
    from caption_debias.model.load import load_model
    from caption_debias.train.loop import train

    data, images, _ = world
    _interrupted(monkeypatch, _cfg(data, images, tmp_path / "b"), step=2)
    for ckpt in (tmp_path / "b" / "checkpoints").glob("step_*.pt"):
        ckpt.write_bytes(b"PK\x03\x04 not a checkpoint")
    with pytest.raises(UserError, match="step_00000002.pt: not a readable checkpoint"):  # the newest one's reason
        load_model(str(tmp_path / "b"))
    with pytest.raises(UserError, match="every checkpoint is damaged"):
        train(_cfg(data, images, tmp_path / "b", resume="latest"))


def test_checkpoint_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    from caption_debias.train import checkpoint

    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", str(src)))
        return real_replace(src, dst)

    monkeypatch.setattr(checkpoint.os, "fsync", fsync)
    monkeypatch.setattr(checkpoint.os, "replace", replace)
    path = checkpoint.save(tmp_path, 7, {"model": {"w": torch.ones(3)}})
    kinds = [k for k, _ in events]
    tmp = next(p for k, p in events if k == "replace")
    assert ("fsync", tmp) in events and kinds.index("fsync") < kinds.index("replace")
    assert events[-1] == ("fsync", str(path.parent))  # the rename itself made durable
    assert torch.load(path, weights_only=True)["step"] == 7


def test_temporaries_of_a_killed_save_are_removed_on_the_next_start(world, tmp_path):
    from caption_debias.train.loop import train

    data, images, _ = world
    ckpts = tmp_path / "run" / "checkpoints"
    ckpts.mkdir(parents=True)
    stale = ckpts / ".step_00000002.pt.tmp4242"
    stale.write_bytes(b"half a checkpoint")
    train(_cfg(data, images, tmp_path / "run", max_steps=1))
    assert not stale.exists()
    assert [p.name for p in ckpts.iterdir()] == ["step_00000001.pt"]


def test_allow_incomplete_trains_and_records_it(world, tmp_path):
    from caption_debias.train.loop import train

    data, images, _ = world
    cut = tmp_path / "cut"
    shutil.copytree(data, cut)
    manifest = json.loads((cut / "manifest.json").read_text())
    manifest["complete"] = False
    manifest["inputs"][0]["complete"] = False
    (cut / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="incomplete"):
        train(_cfg(cut, images, tmp_path / "refused", max_steps=1))
    run = train(_cfg(cut, images, tmp_path / "run", max_steps=1, allow_incomplete=True))
    saved = json.loads((run / "config.json").read_text())
    assert saved["config"]["allow_incomplete"] is True and saved["resolved"]["data_complete"] is False


HOLD = """
import sys, time
from caption_debias.locking import folder_lock
with folder_lock(sys.argv[1], "train"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_second_train_on_the_same_run_folder_exits_at_once(world, tmp_path):
    data, images, _ = world
    run = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        cli = Path(sys.executable).parent / "caption-debias"
        cmd = [str(cli), "train", str(data), "--image-root", str(images), "--model", "tiny", "--out", str(run)]
        proc = subprocess.run(
            cmd + ["--max-steps", "1", "--batch-size", "4"], capture_output=True, text=True, timeout=120
        )
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 4, proc.stderr
        assert len(lines) == 1 and f"pid {child.pid}" in lines[0] and str(run) in lines[0]
        assert not (run / "checkpoints").exists() and not (run / "config.json").exists()
    finally:
        child.kill()
        child.wait()
