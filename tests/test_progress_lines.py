"""Logs that work on a cluster: without a terminal (a pipe here, as in SLURM logs and CI), prepare,
stats and train print plain progress lines every --log-interval seconds; prepare --limit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from train_fixtures import make_prepared  # noqa: E402

CLI = str(Path(sys.executable).parent / "caption-debias")
ANSI = re.compile(r"\x1b\[")


def _run(args: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_TERMINAL", "TTY_COMPATIBLE")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not ANSI.search(proc.stderr), "terminal escapes in a pipe"
    return proc


def _table(path: Path, n: int) -> Path:
    rows = [
        {"key": f"k{i}", "image": f"img{i}.jpg", "caption": f"A photo of thing {i}. It is red. It sits on a table."}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_prepare_prints_bytes_read_of_the_input_size(tmp_path):
    src = _table(tmp_path / "t.jsonl", 3000)
    size = src.stat().st_size
    proc = _run(["prepare", str(src), "--format", "table", "--out", str(tmp_path / "out"), "--log-interval", "0.001"])
    lines = [line for line in proc.stderr.splitlines() if line.startswith("caption-debias prepare:")]
    assert len(lines) >= 2, proc.stderr
    pattern = re.compile(
        r"caption-debias prepare: [\d.]+ (B|KB|MB) / [\d.]+ KB \((\d+\.\d)%\), [\d.]+ (B|KB|MB)/s, "
        r"(ETA \d+[hms]\S*, )?[\d,]+ records read, [\d,]+ done, \d+ rejects, \d+ shards"
    )
    for line in lines:
        assert pattern.fullmatch(line), line
    assert f"/ {size / 1000:.0f} KB" in lines[-1] or f"/ {size / 1000:.1f} KB" in lines[-1]
    assert "(100.0%)" in lines[-1] and "3,000 records read" in lines[-1]
    assert any("ETA" in line for line in lines[:-1])


def test_stats_prints_rows_done_of_the_total(tmp_path):
    src = _table(tmp_path / "t.jsonl", 2000)
    _run(["prepare", str(src), "--format", "table", "--out", str(tmp_path / "out"), "--shard-rows", "200", "-q"])
    proc = _run(["stats", str(tmp_path / "out"), "--log-interval", "0.0001"])
    lines = [line for line in proc.stderr.splitlines() if line.startswith("caption-debias stats:")]
    pattern = re.compile(r"caption-debias stats: [\d,]+ / 2,000 rows \(\d+\.\d%\), [\d,.]+ rows/s(, ETA \S+)?")
    assert len(lines) >= 3 and all(pattern.fullmatch(line) for line in lines), proc.stderr
    assert "800 / 2,000 rows (40.0%)" in proc.stderr and lines[-1].startswith("caption-debias stats: 2,000 / 2,000")


def test_train_prints_steps_rate_eta_and_loss(tmp_path):
    data, images = make_prepared(tmp_path, n=12)
    proc = _run(
        [
            "train",
            str(data),
            "--image-root",
            str(images),
            "--model",
            "tiny",
            "--out",
            str(tmp_path / "run"),
            "--batch-size",
            "4",
            "--max-steps",
            "3",
            "--precision",
            "fp32",
            "--log-every",
            "1",
            "--log-interval",
            "0.0001",
        ]
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith("caption-debias train:")]
    pattern = re.compile(
        r"caption-debias train: (\d) / 3 steps \(\d+\.\d%\), [\d.]+ steps/s(, ETA \S+)?, loss \d+\.\d{4}"
    )
    assert [pattern.fullmatch(line).group(1) for line in lines] == ["1", "2", "3", "3"], proc.stderr
    assert "global batch 4 = 4 per process x 1 process(es) x accum-freq 1" in proc.stderr


def test_no_lines_with_quiet(tmp_path):
    src = _table(tmp_path / "t.jsonl", 50)
    proc = _run(
        ["prepare", str(src), "--format", "table", "--out", str(tmp_path / "out"), "-q", "--log-interval", "0.0001"]
    )
    assert "caption-debias prepare:" not in proc.stderr


def test_prepare_limit_reads_only_the_first_records(tmp_path):
    from caption_debias.dataset import PreparedDataset
    from caption_debias.errors import UserError
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    src = _table(tmp_path / "t.jsonl", 20)
    other = _table(tmp_path / "u.jsonl", 5)
    manifest = prepare(
        [src, other], tmp_path / "out", PrepareOptions(format="table", quiet=True, limit=7, shard_rows=3)
    )
    assert manifest["limit"] == 7 and manifest["options"]["limit"] == 7 and manifest["complete"] is True
    assert manifest["counts"]["read"] == 7 == manifest["counts"]["written"] + manifest["counts"]["rejected"]
    assert [i["read"] for i in manifest["inputs"]] == [7, 0]
    keys = PreparedDataset.open(tmp_path / "out").read(["key"])["key"].to_pylist()
    assert keys == [f"table/k{i}" for i in range(7)]
    # over two inputs: the limit counts across them
    manifest = prepare([src, other], tmp_path / "two", PrepareOptions(format="table", quiet=True, limit=22))
    assert [i["read"] for i in manifest["inputs"]] == [20, 2] and manifest["counts"]["read"] == 22
    # a run without the limit is another output: not mixed with the limited one
    with pytest.raises(UserError, match="same options"):
        prepare([src, other], tmp_path / "out", PrepareOptions(format="table", quiet=True, shard_rows=3))
    full = prepare([src], tmp_path / "full", PrepareOptions(format="table", quiet=True))
    assert "limit" not in full and full["counts"]["read"] == 20


def test_prepare_limit_on_the_command_line(tmp_path):
    src = _table(tmp_path / "t.jsonl", 30)
    proc = _run(
        [
            "prepare",
            str(src),
            "--format",
            "table",
            "--out",
            str(tmp_path / "out"),
            "--limit",
            "10",
            "--log-interval",
            "0.0001",
        ]
    )
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["limit"] == 10 and manifest["counts"]["read"] == 10
    last = [line for line in proc.stderr.splitlines() if line.startswith("caption-debias prepare:")][-1]
    assert last.startswith("caption-debias prepare: 10 / 10 records (100.0%)"), last


def test_demo_stages_print_plain_lines_and_a_heartbeat_off_a_terminal(capsys, monkeypatch):
    import time

    from caption_debias import demo

    monkeypatch.delenv("FORCE_TERMINAL", raising=False)
    with demo._Progress(quiet=False, interval=0.05) as progress:
        with progress.stage("synth", "scenes"):
            time.sleep(0.3)
        with progress.stage("prepare", "shards"):
            pass
    lines = capsys.readouterr().err.splitlines()
    n = len(demo.STAGES)
    assert not any(ANSI.search(line) for line in lines)
    assert lines[0] == f"caption-debias demo: 0 / {n} stages (0.0%), 0.00 stages/s, started synth: scenes"
    running = [line for line in lines if "running synth: scenes" in line]
    assert len(running) >= 2 and all(line.startswith(f"caption-debias demo: 0 / {n} stages") for line in running)
    done = [line for line in lines if "done " in line]
    assert [d.split(", ")[0] for d in done] == [
        f"caption-debias demo: 1 / {n} stages ({100 / n:.1f}%)",
        f"caption-debias demo: 2 / {n} stages ({200 / n:.1f}%)",
    ]
    assert "ETA" in done[0] and done[0].endswith("done synth (0.3 s)")
    with demo._Progress(quiet=True, interval=0.01) as progress:
        with progress.stage("synth", "scenes"):
            time.sleep(0.05)
    assert capsys.readouterr().err == ""


def _sharded(tmp_path: Path) -> tuple[Path, Path]:
    """A prepared folder of 16 rows in 4 shards, and its image root."""
    _, images = make_prepared(tmp_path, n=16)
    out = tmp_path / "sharded"
    _run(["prepare", str(tmp_path / "table.jsonl"), "--format", "table", "--out", str(out), "--shard-rows", "4", "-q"])
    return out, images


def test_curate_prints_both_passes_over_the_shards(tmp_path):
    prepared, images = _sharded(tmp_path)
    args = ["curate", str(prepared), "--out", str(tmp_path / "c"), "--image-root", str(images)]
    proc = _run([*args, "--log-interval", "0.0001"])
    lines = [line for line in proc.stderr.splitlines() if line.startswith("caption-debias curate")]
    pattern = re.compile(
        r"caption-debias curate (signals|write): \d+ / 16 rows \(\d+\.\d%\), [\d.,]+ rows/s(, ETA \S+)?, "
        r"(\d of 4 shards|\d shards)"
    )
    assert lines and all(pattern.fullmatch(line) for line in lines), proc.stderr
    signals = [line for line in lines if line.startswith("caption-debias curate signals:")]
    assert (
        signals and signals[-1].startswith("caption-debias curate signals: 16 / 16") and "4 of 4 shards" in signals[-1]
    )
    assert lines[-1].startswith("caption-debias curate write: 16 / 16 rows (100.0%)") and lines[-1].endswith("4 shards")
    quiet = _run([*args, "--overwrite", "-q", "--log-interval", "0.0001"])
    assert quiet.stderr == ""


def test_pack_prints_rows_and_tars(tmp_path):
    prepared, images = _sharded(tmp_path)
    args = ["pack", str(prepared), "--out", str(tmp_path / "t"), "--image-root", str(images), "--image-size", "32"]
    proc = _run([*args, "--samples-per-shard", "4", "--log-interval", "0.0001"])
    lines = [line for line in proc.stderr.splitlines() if line.startswith("caption-debias pack:")]
    pattern = re.compile(r"caption-debias pack: [\d,]+ / 16 rows \(\d+\.\d%\), [\d,.]+ rows/s(, ETA \S+)?, \d tars")
    assert len(lines) >= 4 and all(pattern.fullmatch(line) for line in lines), proc.stderr
    assert lines[-1].startswith("caption-debias pack: 16 / 16 rows (100.0%)") and lines[-1].endswith("4 tars")


@pytest.mark.slow
def test_eval_and_probe_print_encodings_done(tmp_path):
    data, images = make_prepared(tmp_path, n=16)
    common = ["tiny", "--data", str(data), "--image-root", str(images), "--device", "cpu", "--log-interval", "0.0001"]
    proc = _run(["eval", *common, "--variants", "keep,first", "--batch-size", "4"])
    lines = [line for line in proc.stderr.splitlines() if line.startswith("caption-debias eval:")]
    pattern = re.compile(
        r"caption-debias eval: [\d,]+ / [\d,]+ encodings \(\d+\.\d%\), [\d,.]+ encodings/s(, ETA \S+)?"
    )
    assert len(lines) >= 4 and all(pattern.fullmatch(line) for line in lines), proc.stderr
    done, total = re.match(r"caption-debias eval: ([\d,]+) / ([\d,]+)", lines[-1]).groups()
    assert done == total and int(total) > 16  # 16 images and the texts of two variants
    proc = _run(["probe", *common, "--out", str(tmp_path / "probe")])
    lines = [line for line in proc.stderr.splitlines() if line.startswith("caption-debias probe:")]
    assert len(lines) >= 4 and "(100.0%)" in lines[-1], proc.stderr


def test_urls_and_export_captions_print_rows_done(tmp_path):
    rows = [
        {"key": f"k{i}", "image": f"https://example.org/{i}.jpg", "caption": f"A photo of thing {i}. It is red."}
        for i in range(3000)
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepared = tmp_path / "p"
    _run(["prepare", str(tmp_path / "t.jsonl"), "--format", "table", "--out", str(prepared), "-q"])
    for command, out in (("urls", "u.parquet"), ("export-captions", "c.jsonl")):
        proc = _run([command, str(prepared), "--out", str(tmp_path / out), "--log-interval", "0.0001"])
        lines = [line for line in proc.stderr.splitlines() if line.startswith(f"caption-debias {command}:")]
        pattern = re.compile(rf"caption-debias {command}: [\d,]+ / 3,000 rows \(\d+\.\d%\), [\d,.]+ rows/s(, ETA \S+)?")
        assert lines and all(pattern.fullmatch(line) for line in lines), proc.stderr
        assert lines[-1].startswith(f"caption-debias {command}: 3,000 / 3,000 rows (100.0%)")


def test_zero_shot_images_count_in_the_active_progress(tmp_path, capsys, monkeypatch):
    from PIL import Image

    from caption_debias.evaluate.zeroshot import zeroshot
    from caption_debias.model.load import load_model
    from caption_debias.progress import Progress

    monkeypatch.delenv("FORCE_TERMINAL", raising=False)
    for c, colour in (("cat", (200, 10, 10)), ("dog", (10, 10, 200))):
        (tmp_path / c).mkdir()
        for i in range(3):
            Image.new("RGB", (32, 32), colour).save(tmp_path / c / f"{i}.png")
    loaded = load_model("tiny")
    capsys.readouterr()
    with Progress("eval", "encodings", interval=0.0) as progress:
        zeroshot(loaded, tmp_path, "simple", batch_size=2)
    assert progress.done == progress.total == 6
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("caption-debias eval: 6 / 6 encodings (100.0%)"), lines
