"""Logs that work on a cluster: without a terminal (a pipe, as in SLURM logs and CI) every long
command prints plain progress lines: one as soon as work moves, then one every --log-interval
seconds, and a last one; with -q nothing; prepare --limit.

The line's text, rate and ETA are unit tests of `caption_debias.progress.Progress` on an
injected clock (no sleeping). Each command's lines come from the command itself on tiny inputs:
prepare in a subprocess through real pipes, the others through the CLI in this process (stderr
is then not a terminal either, and torch is imported once for all of them);
tests/test_first_line.py runs every command in a subprocess for its first line.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pictures import picture, write
from train_fixtures import make_prepared

from caption_debias import progress as shared
from caption_debias.progress import Progress

CLI = str(Path(sys.executable).parent / "caption-debias")
ANSI = re.compile(r"\x1b\[")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _no_forced_terminal(monkeypatch):
    monkeypatch.delenv("FORCE_TERMINAL", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)


def _plain(label: str, unit: str = "rows", total=None, **kw) -> tuple[Progress, io.StringIO, Clock]:
    clock, out = Clock(), io.StringIO()
    return Progress(label, unit, total, terminal=False, stream=out, clock=clock, **kw), out, clock


def _lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


# -- the line, on an injected clock ---------------------------------------------------------


def test_a_line_at_the_first_move_then_every_interval_and_a_last_one():
    progress, out, clock = _plain("pack", total=16, interval=30)
    progress.update(0)  # no work yet: nothing
    clock.now += 2
    progress.update(4, extra="1 tars")  # the first sign of work prints at once
    clock.now += 10
    progress.update(8, extra="2 tars")  # inside the interval: nothing
    clock.now += 20
    progress.update(12, extra="3 tars")  # 30 s after the last line
    clock.now += 4
    progress.update(16, extra="4 tars")
    progress.close(finished=True)  # the last line, whatever the interval
    assert _lines(out) == [
        "caption-debias pack: 4 / 16 rows (25.0%), 2.00 rows/s, ETA 6s, 1 tars",
        "caption-debias pack: 12 / 16 rows (75.0%), 0.38 rows/s, ETA 11s, 3 tars",
        "caption-debias pack: 16 / 16 rows (100.0%), 0.44 rows/s, 4 tars",
    ]


def test_work_in_the_first_two_seconds_prints_no_line_until_then():
    """A quick command (or one failing at once) prints only its end; a slow one a line as soon as
    its work moves after its first two seconds, then one every interval."""
    progress, out, clock = _plain("urls", total=8, interval=30)
    clock.now += 0.5
    progress.update(4)  # work at once: no line yet
    clock.now += 1.0
    progress.update(6)
    assert out.getvalue() == ""
    clock.now += 0.5  # two seconds in: the next move prints
    progress.update(7)
    clock.now += 10
    progress.update(8)  # an interval has not passed since
    assert _lines(out) == ["caption-debias urls: 7 / 8 rows (87.5%), 3.50 rows/s, ETA 0s"]
    failed, out, clock = _plain("urls", total=8, interval=30)
    clock.now += 0.3
    failed.update(4)
    failed.close(finished=False)  # the error line is the command's only one
    assert out.getvalue() == ""


def test_bytes_unknown_totals_the_extra_callback_and_quiet():
    calls = []

    def extra() -> str:
        calls.append(1)
        return "301,220 records read"

    progress, out, clock = _plain("prepare", "bytes", 1_490_000_000, interval=30, extra=extra)
    clock.now += 50
    progress.update(412_300_000)
    clock.now += 1
    assert not progress.due()
    progress.update(420_000_000)  # not due: the callback is not called
    assert len(calls) == 1 and progress.due() is False
    assert _lines(out) == ["caption-debias prepare: 412 MB / 1.5 GB (27.7%), 8.2 MB/s, ETA 2m11s, 301,220 records read"]
    unknown, out, clock = _plain("stats", interval=0)
    clock.now += 4
    unknown.update(1200)
    assert _lines(out) == ["caption-debias stats: 1,200 rows, 300.00 rows/s"]
    quiet = Progress("toy", total=10, quiet=True, interval=0, stream=out)
    quiet.update(5)
    quiet.note("loading")
    quiet.close(finished=True)
    assert len(_lines(out)) == 1 and not quiet.due()


def test_work_below_counts_apart_and_notes_are_one_line():
    progress, out, clock = _plain("score", total=240, interval=30, below="encodings")
    with progress:
        progress.note("loading model tiny (random weights)")
        shared.add_work(1000)  # an encoder many calls below, through the active progress
        clock.now += 5
        shared.advance(250)
        clock.now += 30
        shared.advance(250)
        progress.update(120, extra="1 shards")
    assert _lines(out) == [
        "caption-debias: loading model tiny (random weights)",
        "caption-debias score: 0 / 240 rows (0.0%), 0.00 rows/s, 250 / 1,000 encodings (25.0%)",
        "caption-debias score: 0 / 240 rows (0.0%), 0.00 rows/s, 500 / 1,000 encodings (50.0%)",
        "caption-debias score: 120 / 240 rows (50.0%), 3.43 rows/s, ETA 35s, 1 shards, 500 / 1,000 encodings (50.0%)",
    ]
    # a quiet progress is never the active one: work below it reaches the progress outside, whose
    # line gives the rate and ETA of that work from its first unit done on
    outer, out, clock = _plain("demo", "stages", 10, interval=0, rate=False, below="steps")
    with outer, Progress("train", "steps", 4, quiet=True):
        shared.add_work(4)
        clock.now += 5
        shared.advance(1, extra="loss 2.5000")
        clock.now += 2
        shared.advance(1, extra="loss 2.4000")
    assert [line for line in _lines(out) if "loss" in line][:2] == [
        "caption-debias demo: 0 / 10 stages (0.0%), 1 / 4 steps (25.0%), loss 2.5000",
        "caption-debias demo: 0 / 10 stages (0.0%), 2 / 4 steps (50.0%), 0.50 steps/s, ETA 4s, loss 2.4000",
    ]


def test_a_task_worked_through_in_phases_moves_the_count_forward_only():
    """score's shard, eval's data set: the rows move as the work below is done, each phase named,
    never back when a later phase's work becomes known; an ETA once a rate is measured; the rate
    counts from the first work, not the load before it."""
    progress, out, clock = _plain("score", "rows", 300, interval=1, phases=True)
    with progress:
        clock.now += 40  # imports and the model load: no work yet
        shared.begin(100, ["encoding images", "encoding texts"])
        shared.phase("encoding images")
        shared.add_work(100)
        for _ in range(4):
            clock.now += 1
            shared.advance(25)
        shared.phase("encoding texts")
        clock.now += 1
        shared.add_work(400)  # the texts' work, known only now: the count does not fall
        for _ in range(4):
            clock.now += 1
            shared.advance(100)
        progress.update(100, extra="1 shards")  # the shard's rows, finished
        clock.now += 1
    lines = _lines(out)
    counts = [float(re.search(r"\((\d+\.\d)%\)", line).group(1)) for line in lines]
    assert counts == sorted(counts) and counts[-1] == 33.3, lines  # monotone, through the texts' late total
    assert lines[0] == "caption-debias score: 0 / 300 rows (0.0%), 0.00 rows/s, encoding images"
    # the rate from the first work (12.5 rows/s), not from the start 40 s before it
    assert lines[1] == "caption-debias score: 12 / 300 rows (4.2%), 12.50 rows/s, ETA 23s, encoding images"
    assert lines[5] == "caption-debias score: 50 / 300 rows (16.7%), 10.00 rows/s, ETA 25s, encoding texts"
    assert all(", ETA " in line for line in lines[1:]), lines
    assert lines[-2:] == [
        "caption-debias score: 100 / 300 rows (33.3%), 11.11 rows/s, ETA 18s, encoding texts",
        "caption-debias score: 100 / 300 rows (33.3%), 10.00 rows/s, ETA 20s, 1 shards",  # once: not again at the close
    ]


def test_the_last_line_is_printed_once():
    """A run whose last update printed its line (a short interval, a heartbeat) does not print it
    again at the close; one that moved since does."""
    progress, out, clock = _plain("train", "steps", 3, interval=0.001)
    with progress:
        for step in (1, 2, 3):
            clock.now += 3
            progress.update(step, extra="loss 1.0000")
    assert [line.split(" ")[2] for line in _lines(out)] == ["1", "2", "3"], _lines(out)
    progress, out, clock = _plain("curate write", "rows", 16, interval=30)
    with progress:
        clock.now += 3
        progress.update(8)
        progress.update(16)
    assert [line.split(" ")[3] for line in _lines(out)] == ["8", "16"], _lines(out)


def test_pack_prints_a_line_per_tar_at_most_one_a_second():
    progress, out, clock = _plain("pack", "rows", 40, interval=30)
    with progress:
        for tar in range(1, 5):
            clock.now += 2  # a tar every two seconds: each prints
            progress.each(tar * 8, extra=f"{tar} tars")
        clock.now += 0.1  # the fifth within a second of the fourth: counted, printed at the close
        progress.each(40, extra="5 tars")
    lines = _lines(out)
    assert [line.rsplit(", ", 1)[1] for line in lines] == ["1 tars", "2 tars", "3 tars", "4 tars", "5 tars"], lines
    assert lines[-1].startswith("caption-debias pack: 40 / 40 rows (100.0%)")


def test_heartbeat_prints_while_the_caller_waits(monkeypatch):
    monkeypatch.setattr(shared, "HEARTBEAT_MIN", 0.01)
    progress, out, clock = _plain("demo", "stages", 10, interval=0, heartbeat=True)
    clock.now += 60  # the clock never moves again: every beat finds its interval passed
    deadline = time.monotonic() + 10
    while len(_lines(out)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # waiting for the thread, not timing it
    progress.close()
    beats = _lines(out)
    assert len(beats) >= 2 and all(b.startswith("caption-debias demo: 0 / 10 stages (0.0%)") for b in beats)
    silent, out, _ = _plain("demo", "stages", 10, interval=0, heartbeat=True, quiet=True)
    silent.close()
    assert out.getvalue() == "" and silent._ticker is None


def test_demo_stages_print_plain_lines_and_each_arm_its_steps_loss_and_eta():
    """A line as each stage starts and ends; while an arm trains, a line at its first step, then
    its steps, loss and an ETA from the step time measured from that first step, falling as the
    steps go (the stage count's ETA, which grew while a long stage ran, is gone); a stage that
    reports no work prints the heartbeat's line."""
    from caption_debias.demo import STAGES, DemoProgress

    clock, out = Clock(), io.StringIO()
    n = len(STAGES)
    with DemoProgress(quiet=False, interval=30, terminal=False, stream=out, clock=clock) as demo:
        with demo.stage("synth", "scenes"):
            clock.now += 0.3
        with demo.stage("longclip", "`longclip` fine-tune from the start, 300 steps"):
            clock.now += 5  # loading the start: not step time
            shared.add_work(300)  # what a quiet training run reports (train/log.py)
            for step in range(180):
                clock.now += 0.5
                shared.advance(1, extra=f"loss {3 - step / 100:.4f}")
                demo.progress.beat()  # the heartbeat: nothing, lines come with the steps
        with demo.stage("evaluate", "retrieval", "encodings"):
            clock.now += 31
            demo.progress.beat()
    lines = _lines(out)
    assert not any(ANSI.search(line) for line in lines)
    one, two = f"1 / {n} stages ({100 / n:.1f}%)", f"2 / {n} stages ({200 / n:.1f}%)"
    assert lines == [
        f"caption-debias demo: 0 / {n} stages (0.0%), started synth: scenes",
        f"caption-debias demo: {one}, done synth (0.3 s)",
        f"caption-debias demo: {one}, started longclip: `longclip` fine-tune from the start, 300 steps",
        f"caption-debias demo: {one}, running longclip, 1 / 300 steps (0.3%), loss 3.0000",
        f"caption-debias demo: {one}, running longclip, 61 / 300 steps (20.3%), 2.00 steps/s, ETA 2m00s, loss 2.4000",
        f"caption-debias demo: {one}, running longclip, 121 / 300 steps (40.3%), 2.00 steps/s, ETA 1m30s, loss 1.8000",
        f"caption-debias demo: {two}, done longclip (95.0 s), 180 / 300 steps (60.0%), 2.00 steps/s, ETA 1m00s, loss 1.2100",
        f"caption-debias demo: {two}, started evaluate: retrieval",
        f"caption-debias demo: {two}, running evaluate",
        f"caption-debias demo: 3 / {n} stages (30.0%), done evaluate (31.0 s)",
    ]
    assert demo.timings == {"synth": 0.3, "longclip": 95.0, "evaluate": 31.0}
    quiet = io.StringIO()
    with DemoProgress(quiet=True, interval=0.01, stream=quiet, clock=clock) as demo:
        with demo.stage("synth", "scenes"):
            clock.now += 0.05
    assert quiet.getvalue() == "" and demo.timings == {"synth": 0.05}


# -- each command, on tiny inputs -----------------------------------------------------------


def _run(args: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    """The command in a subprocess, its stdout and stderr real pipes."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_TERMINAL", "TTY_COMPATIBLE")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not ANSI.search(proc.stderr), "terminal escapes in a pipe"
    return proc


def _cli(args: list[str]):
    """The command through the CLI in this process; its stderr is no terminal."""
    from typer.testing import CliRunner

    from caption_debias.cli.main import app

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.stderr[-3000:], result.exception)
    assert not ANSI.search(result.stderr), "terminal escapes off a terminal"
    return result


def _table(path: Path, n: int) -> Path:
    rows = [
        {"key": f"k{i}", "image": f"img{i}.jpg", "caption": f"A photo of thing {i}. It is red. It sits on a table."}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _prepare(src: Path, out: Path, **options):
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    return prepare([src], out, PrepareOptions(format="table", quiet=True, **options))


def test_prepare_prints_bytes_read_of_the_input_size(tmp_path):
    src = _table(tmp_path / "t.jsonl", 3000)
    size = src.stat().st_size
    proc = _run(["prepare", str(src), "--format", "table", "--out", str(tmp_path / "out"), "--log-interval", "0.001"])
    assert proc.stderr.startswith(f"caption-debias: reading 1 input ({shared.format_bytes(size)}): t.jsonl\n")
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


def test_no_lines_with_quiet(tmp_path):
    src = _table(tmp_path / "t.jsonl", 50)
    proc = _run(
        ["prepare", str(src), "--format", "table", "--out", str(tmp_path / "out"), "-q", "--log-interval", "0.0001"]
    )
    assert "caption-debias prepare:" not in proc.stderr and proc.stderr == ""


def test_one_terminal_test_for_prepare_as_for_every_command(tmp_path):
    """rich's answer decides (TTY_COMPATIBLE, FORCE_COLOR): told it is a terminal, prepare shows
    its bar and no plain line; told it is not, plain lines (before, its bar asked isatty and its
    lines asked rich: told "terminal" through a pipe it showed neither)."""
    src = _table(tmp_path / "t.jsonl", 300)
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_TERMINAL", "TTY_COMPATIBLE", "FORCE_COLOR")}
    args = [CLI, "prepare", str(src), "--format", "table", "--log-interval", "0.0001", "--out"]
    for told, out in (("1", "bar"), ("0", "plain")):
        proc = subprocess.run(
            [*args, str(tmp_path / out)], capture_output=True, text=True, env={**env, "TTY_COMPATIBLE": told}
        )
        assert proc.returncode == 0, proc.stderr
        bar, lines = "━" in proc.stderr, "caption-debias prepare: " in proc.stderr
        assert (bar, lines) == ((True, False) if told == "1" else (False, True)), proc.stderr


def test_stats_prints_rows_done_of_the_total(tmp_path):
    _prepare(_table(tmp_path / "t.jsonl", 2000), tmp_path / "out", shard_rows=200)
    result = _cli(["stats", str(tmp_path / "out"), "--log-interval", "0.0001", "--out", str(tmp_path / "report")])
    lines = [line for line in result.stderr.splitlines() if line.startswith("caption-debias stats:")]
    pattern = re.compile(r"caption-debias stats: [\d,]+ / 2,000 rows \(\d+\.\d%\), [\d,.]+ rows/s(, ETA \S+)?")
    assert len(lines) >= 3 and all(pattern.fullmatch(line) for line in lines), result.stderr
    assert "800 / 2,000 rows (40.0%)" in result.stderr and lines[-1].startswith("caption-debias stats: 2,000 / 2,000")
    # what it is doing before the counts, and before the report's plots
    assert result.stderr.startswith(f"caption-debias: reading 2,000 rows of 1 folder: {tmp_path / 'out'}\n")
    assert f"caption-debias: writing report {tmp_path / 'report'}" in result.stderr
    assert result.stdout.rstrip().endswith(f"report: {tmp_path / 'report' / 'report.html'}")


def test_train_prints_steps_rate_eta_and_loss(tmp_path):
    data, images = make_prepared(tmp_path, n=12)
    args = ["train", str(data), "--image-root", str(images), "--model", "tiny", "--out", str(tmp_path / "run")]
    args += ["--batch-size", "4", "--max-steps", "3", "--precision", "fp32", "--log-every", "1"]
    result = _cli([*args, "--log-interval", "0.0001"])
    lines = [line for line in result.stderr.splitlines() if line.startswith("caption-debias train:")]
    pattern = re.compile(
        r"caption-debias train: (\d) / 3 steps \(\d+\.\d%\), [\d.]+ steps/s(, ETA \S+)?, loss \d+\.\d{4}"
    )
    # the last line once: the step that finished the run printed it, the close does not again
    assert [pattern.fullmatch(line).group(1) for line in lines] == ["1", "2", "3"], result.stderr
    assert "global batch 4 = 4 per process x 1 process(es) x accum-freq 1" in result.stderr
    assert result.stderr.startswith(f"caption-debias: loading model tiny (random weights), reading {data}\n")


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
    args = ["prepare", str(src), "--format", "table", "--out", str(tmp_path / "out"), "--limit", "10"]
    result = _cli([*args, "--log-interval", "0.0001"])
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["limit"] == 10 and manifest["counts"]["read"] == 10
    last = [line for line in result.stderr.splitlines() if line.startswith("caption-debias prepare:")][-1]
    assert last.startswith("caption-debias prepare: 10 / 10 records (100.0%)"), last


def _sharded(tmp_path: Path) -> tuple[Path, Path]:
    """A prepared folder of 16 rows in 4 shards, and its image root."""
    _, images = make_prepared(tmp_path, n=16)
    out = tmp_path / "sharded"
    _prepare(tmp_path / "table.jsonl", out, shard_rows=4)
    return out, images


def test_curate_prints_both_passes_over_the_shards(tmp_path):
    prepared, images = _sharded(tmp_path)
    args = ["curate", str(prepared), "--out", str(tmp_path / "c"), "--image-root", str(images)]
    result = _cli([*args, "--log-interval", "0.0001"])
    lines = [line for line in result.stderr.splitlines() if line.startswith("caption-debias curate")]
    pattern = re.compile(
        r"caption-debias curate (signals|write): \d+ / 16 rows \(\d+\.\d%\), [\d.,]+ rows/s(, ETA \S+)?, "
        r"(\d of 4 shards|\d shards)"
    )
    assert lines and all(pattern.fullmatch(line) for line in lines), result.stderr
    signals = [line for line in lines if line.startswith("caption-debias curate signals:")]
    assert (
        signals and signals[-1].startswith("caption-debias curate signals: 16 / 16") and "4 of 4 shards" in signals[-1]
    )
    assert lines[-1].startswith("caption-debias curate write: 16 / 16 rows (100.0%)") and lines[-1].endswith("4 shards")
    assert result.stderr.startswith("caption-debias: reading 16 rows in 4 shards\n")
    quiet = _cli([*args, "--overwrite", "-q", "--log-interval", "0.0001"])
    assert quiet.stderr == ""


def test_pack_prints_rows_and_tars(tmp_path):
    prepared, images = _sharded(tmp_path)
    args = ["pack", str(prepared), "--out", str(tmp_path / "t"), "--image-root", str(images), "--image-size", "32"]
    result = _cli([*args, "--samples-per-shard", "4", "--log-interval", "0.0001"])
    lines = [line for line in result.stderr.splitlines() if line.startswith("caption-debias pack:")]
    pattern = re.compile(r"caption-debias pack: [\d,]+ / 16 rows \(\d+\.\d%\), [\d,.]+ rows/s(, ETA \S+)?, \d tars")
    assert len(lines) >= 4 and all(pattern.fullmatch(line) for line in lines), result.stderr
    assert lines[-1].startswith("caption-debias pack: 16 / 16 rows (100.0%)") and lines[-1].endswith("4 tars")


def _counts_hold(lines: list[str], pattern: re.Pattern, phases: set[str]) -> None:
    """The rules a count's plain lines keep: done never falls, the total never changes, every phase
    is named, an ETA once a rate is known and work remains, and the last line printed once."""
    found = [pattern.fullmatch(line) for line in lines]
    assert lines and all(found), lines
    done = [float(m.group("pct")) for m in found]
    assert done == sorted(done), lines  # monotone
    assert len({m.group("total") for m in found}) == 1, lines
    assert phases <= {m.group("phase") for m in found}, lines
    moving = [m for m in found if 0 < float(m.group("pct")) < 100]
    assert moving and all(m.group("eta") for m in moving), lines
    assert float(done[-1]) == 100.0, lines

    def shown(line: str) -> str:  # a line less its rate and ETA
        return re.sub(r", [\d.,]+ \w+/s(, ETA \S+)?", "", line)

    assert shown(lines[-1]) != shown(lines[-2]), lines  # the last line printed once


def test_score_prints_rows_with_phases_batch_by_batch(tmp_path):
    """One shard of 16 rows, batches of 4: the rows move batch by batch inside the shard, through
    its phases, never back."""
    data, images = make_prepared(tmp_path, n=16)
    args = ["score", str(data), "--out", str(tmp_path / "s"), "--image-root", str(images), "--model", "tiny"]
    result = _cli([*args, "--batch-size", "4", "--reference-images", "4", "--log-interval", "0.0001"])
    err = result.stderr
    assert err.startswith("caption-debias: loading model tiny (random weights)\n"), err
    reference = [line for line in err.splitlines() if line.startswith("caption-debias score reference:")]
    assert reference[-1].startswith("caption-debias score reference: 4 / 4 images (100.0%)"), err
    lines = [line for line in err.splitlines() if line.startswith("caption-debias score:")]
    pattern = re.compile(
        r"caption-debias score: (?P<done>\d+) / (?P<total>16) rows \((?P<pct>\d+\.\d)%\), [\d.,]+ rows/s"
        r"(?P<eta>, ETA \S+)?(, (?P<phase>encoding images|encoding texts))?(, 1 shards)?"
    )
    _counts_hold(lines, pattern, {"encoding images", "encoding texts"})
    inside = {pattern.fullmatch(line).group("done") for line in lines} - {"0", "16"}
    assert len(inside) >= 3, err  # per batch, not per shard
    assert lines[-1].startswith("caption-debias score: 16 / 16 rows (100.0%)") and lines[-1].endswith("1 shards")


def test_eval_and_probe_print_rows_done_through_named_phases(tmp_path):
    data, images = make_prepared(tmp_path, n=16)
    common = ["tiny", "--data", str(data), "--image-root", str(images), "--device", "cpu", "--log-interval", "0.0001"]
    result = _cli(["eval", *common, "--variants", "keep,first", "--batch-size", "4"])
    lines = [line for line in result.stderr.splitlines() if line.startswith("caption-debias eval:")]
    pattern = re.compile(
        r"caption-debias eval: (?P<done>\d+) / (?P<total>16) rows \((?P<pct>\d+\.\d)%\), [\d.,]+ rows/s"
        r"(?P<eta>, ETA \S+)?(, (?P<phase>encoding images|encoding texts \((keep|first)\)))?"
    )
    _counts_hold(lines, pattern, {"encoding images", "encoding texts (keep)", "encoding texts (first)"})
    assert result.stderr.startswith(f"caption-debias: reading {data}\n")
    assert "caption-debias: loading model tiny (random weights)\n" in result.stderr
    result = _cli(["probe", *common, "--out", str(tmp_path / "probe")])
    lines = [line for line in result.stderr.splitlines() if line.startswith("caption-debias probe:")]
    pattern = re.compile(
        r"caption-debias probe: (?P<done>\d+) / (?P<total>16) rows \((?P<pct>\d+\.\d)%\), [\d.,]+ rows/s"
        r"(?P<eta>, ETA \S+)?(, (?P<phase>encoding images|encoding texts \([\w:]+\)|attention by position))?"
    )
    _counts_hold(lines, pattern, {"encoding images", "encoding texts (keep)", "attention by position"})


class TickingClock(Clock):
    """A clock that moves a second each time it is read: every line is due, and rates are finite."""

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_probe_moves_rows_through_named_phases_on_an_injected_clock(tmp_path):
    """probe's rows (every model reads every caption once) move through its work, not in
    encodings: the images, each variant's texts, then the attention pass, named, monotone, with
    an ETA, the last line once. (The CLI's total: test_eval_and_probe_print_rows_done_through_named_phases.)"""
    from caption_debias.evaluate.probe import ATTENTION, probe
    from caption_debias.model.load import load_model

    data, images = make_prepared(tmp_path, n=16)
    models = {"a": load_model("tiny"), "b": load_model("tiny")}
    out = io.StringIO()
    # as run_probe opens it: rows, the total every model's captions
    with Progress("probe", "rows", 32, terminal=False, stream=out, clock=TickingClock(), interval=0.5, phases=True):
        probe(models, data, None, batch_size=4, image_root=images)
    lines = _lines(out)
    pattern = re.compile(
        r"caption-debias probe: (?P<done>\d+) / (?P<total>32) rows \((?P<pct>\d+\.\d)%\), [\d.,]+ rows/s"
        r"(?P<eta>, ETA \S+)?(, (?P<phase>encoding images|encoding texts \([\w:]+\)|attention by position))?"
    )
    _counts_hold(lines, pattern, {"encoding images", "encoding texts (keep)", "encoding texts (filler:5)", ATTENTION})
    assert lines[-1].startswith("caption-debias probe: 32 / 32 rows (100.0%)"), lines
    halfway = [line for line in lines if line.startswith("caption-debias probe: 16 / 32 rows")]
    assert halfway, lines  # the first model's rows are whole when its attention pass ends


def test_urls_and_export_captions_print_rows_done(tmp_path):
    rows = [
        {"key": f"k{i}", "image": f"https://example.org/{i}.jpg", "caption": f"A photo of thing {i}. It is red."}
        for i in range(3000)
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepared = tmp_path / "p"
    _prepare(tmp_path / "t.jsonl", prepared)
    for command, out in (("urls", "u.parquet"), ("export-captions", "c.jsonl")):
        result = _cli([command, str(prepared), "--out", str(tmp_path / out), "--log-interval", "0.0001"])
        lines = [line for line in result.stderr.splitlines() if line.startswith(f"caption-debias {command}:")]
        pattern = re.compile(rf"caption-debias {command}: [\d,]+ / 3,000 rows \(\d+\.\d%\), [\d,.]+ rows/s(, ETA \S+)?")
        assert lines and all(pattern.fullmatch(line) for line in lines), result.stderr
        assert lines[-1].startswith(f"caption-debias {command}: 3,000 / 3,000 rows (100.0%)")


def test_export_says_what_it_loads_and_writes(tmp_path):
    result = _cli(["export", "tiny", "--out", str(tmp_path / "e")])
    # torch and open_clip are imported in this process already: no line says so (test_core_install's do)
    first, building, second = result.stderr.splitlines()[:3]
    assert first == "caption-debias: loading model tiny (random weights)"
    assert building == "caption-debias: building tiny with random weights"
    assert re.fullmatch(
        rf"caption-debias: writing {re.escape(str(tmp_path / 'e' / 'open_clip_model.safetensors'))} "
        r"\([\d.]+ [KM]B\) and open_clip_config.json",
        second,
    ), result.stderr
    assert _cli(["export", "tiny", "--out", str(tmp_path / "q"), "-q"]).stderr == ""


def test_zero_shot_images_count_in_the_active_progress(tmp_path, capsys):
    from caption_debias.evaluate.zeroshot import zeroshot
    from caption_debias.model.load import load_model

    for c, colour in (("cat", (200, 10, 10)), ("dog", (10, 10, 200))):
        for i in range(3):
            write(picture((32, 32), colour), tmp_path / c / f"{i}.png")
    loaded = load_model("tiny")
    capsys.readouterr()
    with Progress("eval", "encodings", interval=0.0) as progress:
        zeroshot(loaded, tmp_path, "simple", batch_size=2)
    assert progress.done == progress.total == 6
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("caption-debias eval: 6 / 6 encodings (100.0%)"), lines


def test_a_note_keeps_a_width_the_environment_states(monkeypatch):
    out = io.StringIO()
    long = "loading model local-dir:/tmp/runs/runs-of-the-objects-world-seed-0-longclip-300-steps-exported (15.2 MB)"
    monkeypatch.delenv("COLUMNS", raising=False)
    shared.say(long, stream=out)  # a log: one line, whatever its length
    monkeypatch.setenv("COLUMNS", "40")
    shared.say(long, stream=out)
    first, *wrapped = out.getvalue().splitlines()
    assert first == f"caption-debias: {long}"
    assert all(len(line) <= 40 for line in wrapped) and len(wrapped) > 2 and wrapped[1].startswith("    ")
    assert "".join("".join(wrapped).split()) == "".join(first.split())  # every character, wrapped
