"""Hostile runs: a killed command leaves no writer, a shard is what its manifest says, odd captions cost one row.

Each test here reproduces a fault of issue 25 that the toolkit once had; docs/reliability.md
lists them with what the user sees.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_process import run_cli
from input_fixtures import sharegpt_element
from pictures import noise, picture, write

from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare.run import prepare


def opts(**kw) -> PrepareOptions:
    return PrepareOptions(quiet=True, **kw)


cli = run_cli


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr.strip()


def element(i: int, caption: str | None = None, **fields) -> dict:
    text = caption if caption is not None else f"Photo {i} shows a harbour at dusk. Boats are moored.\n\nHills rise."
    return sharegpt_element(i, f"img/{i % 4}.jpg", text, **fields)


def sharegpt(path: Path, n: int) -> Path:
    path.write_text(json.dumps([element(i) for i in range(n)]))
    return path


def files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file's size and mtime, but the lock's (a refused command takes the lock before it refuses)."""
    from caption_debias.locking import LOCK_FILES

    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.name not in LOCK_FILES
    }


# -- dying processes: kill -9 of a command leaves no worker behind ---------------------------

# Loaded by every Python process of the run (spawned workers too): a worker's fsync before each
# rename sleeps, so the run is still busy when it is killed, whatever the machine's speed.
SLOW_WORKERS = """
import multiprocessing, os, time
_real_fsync = os.fsync
def _slow_fsync(fd):
    if multiprocessing.parent_process() is not None:
        time.sleep(float(os.environ["CD_SLOW_FSYNC"]))
    return _real_fsync(fd)
os.fsync = _slow_fsync
"""


def prepared_with_images(root: Path, rows: int, shard_rows: int, pictures: list) -> Path:
    """`root`: a ShareGPT4V file of `rows` rows, prepared/ in shards of `shard_rows`, and images/img/{i}.jpg
    of `pictures` (the rows use four)."""
    src = sharegpt(root / "s.json", rows)
    for i, im in enumerate(pictures):
        write(im, root / "images" / "img" / f"{i}.jpg")
    prepare([src], root / "prepared", opts(shard_rows=shard_rows))
    return root


@pytest.fixture(scope="module")
def kill_inputs(tmp_path_factory):
    """A ShareGPT4V file, a prepared folder of many small shards and its images."""
    pictures = [picture((40 + i, 30), (60 * i, 90, 200)) for i in range(4)]
    root = prepared_with_images(tmp_path_factory.mktemp("kill"), 80, 2, pictures)
    inject = root / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SLOW_WORKERS)
    return root


KILLED_COMMANDS = {
    "prepare": lambda r, out: ["prepare", str(r / "s.json"), "--out", str(out), "--shard-rows", "2"],
    "curate": lambda r, out: ["curate", str(r / "prepared"), "--out", str(out)],
    "pack": lambda r, out: (
        ["pack", str(r / "prepared"), "--out", str(out), "--image-root", str(r / "images")]
        + ["--samples-per-shard", "2", "--image-size", "32"]
    ),
}


@pytest.mark.parametrize("command", sorted(KILLED_COMMANDS))
def test_kill_9_of_a_command_leaves_no_worker_and_the_folder_unchanged(kill_inputs, tmp_path, command):
    import psutil

    out = tmp_path / "out"
    args = [*KILLED_COMMANDS[command](kill_inputs, out), "--workers", "2", "-q"]
    path = os.pathsep.join(p for p in (str(kill_inputs / "inject"), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "CD_SLOW_FSYNC": "0.3"}
    proc = subprocess.Popen([sys.executable, "-m", "caption_debias.cli.main", *args], env=env, stderr=subprocess.PIPE)
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    finished = []
    while time.monotonic() < deadline and proc.poll() is None:
        workers = [c for c in parent.children() if "resource_tracker" not in " ".join(c.cmdline())]
        finished = [p for p in out.rglob("*.json") if p.name.startswith(("part-", "0"))]
        if len(workers) >= 2 and len(finished) >= 2:
            break
        time.sleep(0.05)
    assert len(finished) >= 2, "no worker finished a task in time"
    run = parent.children(recursive=True)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    _, alive = psutil.wait_procs(run, timeout=5)
    for orphan in alive:  # do not leave them running past a failed test
        orphan.kill()
    assert not alive, f"{len(alive)} processes of the killed run still alive"  # so nothing can change the folder now


@pytest.mark.slow
def test_kill_9_of_a_ray_run_leaves_no_ray_process(kill_inputs, tmp_path):
    """--engine ray starts its own local runtime (engines/ray.ray_runtime); Ray binds the
    runtime's processes to the command (kernel fate sharing: PR_SET_PDEATHSIG), so kill -9 of the
    command leaves no raylet, GCS or Ray worker behind."""
    import psutil

    out = tmp_path / "out"
    args = ["curate", str(kill_inputs / "prepared"), "--out", str(out), "--engine", "ray", "--workers", "2", "-q"]
    proc = subprocess.Popen([sys.executable, "-m", "caption_debias.cli.main", *args], stderr=subprocess.PIPE)
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 180
    run: list = []
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            run = parent.children(recursive=True)
            names = " ".join(" ".join(p.cmdline()) for p in run)
        except psutil.Error:
            continue
        if "raylet" in names and "default_worker" in names:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before its Ray workers started"
    assert any("raylet" in " ".join(p.cmdline()) for p in run)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _, alive = psutil.wait_procs(run, timeout=30)
    names = [" ".join(p.cmdline())[:80] for p in alive if p.is_running()]
    for orphan in alive:  # do not leave them running past a failed test
        try:
            orphan.kill()
        except psutil.Error:
            pass
    assert not names, f"{len(names)} processes of the killed Ray run still alive: {names}"


# -- long and odd captions -------------------------------------------------------------------

ABBREVIATIONS = "Dr. e.g. U.S. p.m. fig. vs. Mt. etc. no. a.m. i.e. St. approx. Inc. Prof.".split()
WORDS = "the a red boat near small harbour with and of old lamp on it".split()


def adversarial(chars: int, seed: int = 0) -> str:
    """Abbreviations among lower-case words, no capital and no sentence end: pysbd's slowest text."""
    import random

    rng = random.Random(seed)
    words = [rng.choice(ABBREVIATIONS).lower() if rng.random() < 0.8 else rng.choice(WORDS) for _ in range(chars // 3)]
    return " ".join(words)[:chars]


def long_real(chars: int) -> str:
    import random

    rng = random.Random(1)
    out = []
    while sum(map(len, out)) < chars:
        out.append(f"A {rng.choice(WORDS)} boat number {rng.randrange(999)} rests near the harbour wall.")
        if rng.random() < 0.1:
            out.append("Dr. Smith waves at 5 p.m. to the U.S. flag... really")
    return " ".join(out)[:chars]


def pysbd_work(segmenter_name: str, text: str) -> tuple[int, int]:
    """(largest text pysbd was handed, the sum of their squared lengths: its cost model)."""
    from caption_debias.text.segment import get_segmenter

    get_segmenter.cache_clear()
    seg = get_segmenter(segmenter_name)
    pysbd = seg._pysbd._seg if segmenter_name == "fast" else seg._seg
    handed: list[int] = []
    real = pysbd.processor

    def processor(t):
        handed.append(len(t))
        return real(t)

    pysbd.processor = processor
    try:
        seg.spans(text)
    finally:
        get_segmenter.cache_clear()
    return max(handed, default=0), sum(n * n for n in handed)


@pytest.mark.parametrize("segmenter", ["fast", "pysbd"])
def test_segmenting_4x_the_text_costs_about_4x_not_16x(segmenter):
    # pysbd's cost is the square of what it is handed: count that rather than time (load-proof).
    # The small text is one whole piece: 4x of it costs 4x in pieces, 16x handed whole.
    small, large = adversarial(10_000, seed=1), adversarial(40_000, seed=2)
    largest_small, work_small = pysbd_work(segmenter, small)
    largest_large, work_large = pysbd_work(segmenter, large)
    assert largest_large <= 10_000  # text/segment/base.py's PIECE_CHARS
    assert work_large < 6 * work_small, work_large / work_small


def spans_reconcile(caption: str, spans: list) -> None:
    assert spans == sorted(spans) and all(s < e for s, e in spans)
    assert all(e <= s2 for (_, e), (s2, _) in zip(spans, spans[1:]))  # no overlap
    for s, e in spans:
        assert caption[s:e] == caption[s:e].strip() != ""
    between = [caption[e:s2] for (_, e), (s2, _) in zip(spans, spans[1:])]
    outside = [caption[: spans[0][0]], caption[spans[-1][1] :], *between]
    assert all(not part.strip() for part in outside)  # every non-space character is in a sentence


@pytest.mark.parametrize("text", ["real", "adversarial", "no spaces", "lines"])
def test_a_long_caption_is_prepared_and_its_sentences_reconcile_with_it(tmp_path, text):
    from caption_debias.dataset import PreparedDataset

    caption = {
        "real": long_real(25_000),
        "adversarial": adversarial(25_000),
        "no spaces": "x" * 25_000 + ". Then a sentence.",
        "lines": "\n".join(long_real(300) for _ in range(150)),
    }[text]
    src = tmp_path / "s.json"
    src.write_text(json.dumps([element(0, caption), element(1)]))
    prepare([src], tmp_path / "out", opts())
    row = PreparedDataset.open(tmp_path / "out").read().to_pylist()[0]
    spans = [(s["start"], s["end"]) for s in row["sentence_spans"]]
    assert row["caption"] == caption
    spans_reconcile(caption, spans)
    assert row["sentences"] == [caption[s:e] for s, e in spans]


def test_a_short_caption_is_segmented_as_before_pieces_exist():
    from caption_debias.text.segment import get_segmenter
    from caption_debias.text.segment.base import PIECE_CHARS, pieces

    caption = long_real(PIECE_CHARS)
    assert pieces(caption) == [(0, len(caption))]
    got = get_segmenter("fast").spans(caption)
    assert got == get_segmenter("pysbd").spans(caption)


def test_a_caption_over_the_maximum_length_is_rejected_with_the_reason(tmp_path, monkeypatch):
    from caption_debias.readers import common

    monkeypatch.setattr(common, "MAX_CAPTION_CHARS", 1000)  # the real limit (2 M characters) works alike
    src = tmp_path / "s.json"
    src.write_text(json.dumps([element(0, long_real(1001)), element(1, long_real(1000)), element(2)]))
    manifest = prepare([src], tmp_path / "out", opts())
    rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [r["location"] for r in rejects] == [rejects[0]["location"]] and len(rejects) == 1
    assert rejects[0]["reason"] == "caption too long: 1,001 characters (at most 1,000)"
    assert manifest["counts"]["written"] == 2 and manifest["counts"]["rejected"] == 1


@pytest.mark.parametrize("caption", ["\u200b", "\u200b\u200c\u200d", " \ufeff\u2060 \u200b\n"])
def test_a_caption_of_only_zero_width_characters_is_rejected_with_the_reason(tmp_path, caption):
    src = tmp_path / "s.json"
    src.write_text(json.dumps([element(0, caption), element(1, "A boat\u200b rests.")]))
    manifest = prepare([src], tmp_path / "out", opts())
    rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in rejects] == [
        "empty caption: only invisible characters (zero-width, format or whitespace)"
    ]
    assert manifest["counts"]["written"] == 1


@pytest.mark.parametrize("value", [["list", "id"], {"a": 1}, []])
def test_a_list_or_object_id_is_rejected_with_the_reason_not_made_a_key(tmp_path, value):
    from caption_debias.dataset import PreparedDataset

    src = tmp_path / "s.json"
    bad = {**element(0), "id": value}
    src.write_text(json.dumps([bad, element(1), {**element(2), "id": 7}]))
    manifest = prepare([src], tmp_path / "out", opts())
    rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in rejects] == [f"id is not a string or number: {type(value).__name__}"]
    keys = PreparedDataset.open(tmp_path / "out").read(["key"]).column("key").to_pylist()
    assert keys == ["sharegpt4v/s1", "sharegpt4v/7"] and manifest["counts"]["rejected"] == 1


def test_a_list_id_in_a_table_is_rejected_with_the_reason(tmp_path):
    src = tmp_path / "t.jsonl"
    rows = [{"id": ["a"], "image": "a.jpg", "caption": "A boat."}, {"id": "b", "image": "b.jpg", "caption": "A cat."}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepare([src], tmp_path / "out", opts(format="table", key_column="id"))
    rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in rejects] == ["id is not a string or number: list"]


# -- shards and manifests: a shard is what its manifest says ---------------------------------


@pytest.fixture(scope="module")
def swapped(tmp_path_factory):
    """A prepared folder (4 shards of 5 rows) and a copy whose shard 1 is replaced by shard 2: same row count."""
    import shutil

    root = tmp_path_factory.mktemp("swapped")
    src = sharegpt(root / "s.json", 20)
    prepare([src], root / "whole", opts(shard_rows=5))
    shutil.copytree(root / "whole", root / "swapped")
    shutil.copyfile(root / "whole/shards/part-00002.parquet", root / "swapped/shards/part-00001.parquet")
    return root


SWAPPED_LINE = "shard shards/part-00001.parquet is not the one manifest.json lists"


def test_a_replaced_shard_with_the_same_row_count_is_refused_naming_it(swapped):
    from caption_debias.dataset import PreparedDataset, ShardChanged

    with pytest.raises(ShardChanged) as err:
        PreparedDataset.open(swapped / "swapped")
    assert SWAPPED_LINE in str(err.value) and "\n" not in str(err.value)
    assert PreparedDataset.open(swapped / "whole").rows == 20


@pytest.mark.parametrize("command", ["stats", "curate", "pack", "export-captions"])
def test_commands_refuse_a_replaced_shard_in_one_line(swapped, tmp_path, command):
    folder = str(swapped / "swapped")
    args = {
        "stats": ["stats", folder, "-q"],
        "curate": ["curate", folder, "--out", str(tmp_path / "out"), "-q"],
        "pack": ["pack", folder, "--out", str(tmp_path / "out"), "--image-root", str(tmp_path), "-q"],
        "export-captions": ["export-captions", folder, "--out", str(tmp_path / "c.jsonl")],
    }[command]
    line = one_line_error(cli(*args))
    assert SWAPPED_LINE in line and folder in line
    assert not (tmp_path / "out" / "manifest.json").exists() and not (tmp_path / "c.jsonl").exists()


def test_a_resumed_curate_does_not_reuse_signals_of_a_changed_input(swapped, tmp_path):
    import shutil

    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.errors import UserError

    given = tmp_path / "in"
    shutil.copytree(swapped / "whole", given)
    curate([given], tmp_path / "out", CurateOptions(quiet=True))
    signals = tmp_path / "out" / ".curate" / "signals"
    before = files(tmp_path / "out")
    shutil.copyfile(given / "shards/part-00002.parquet", given / "shards/part-00001.parquet")
    with pytest.raises(UserError, match=SWAPPED_LINE):
        curate([given], tmp_path / "out", CurateOptions(quiet=True))
    assert files(tmp_path / "out") == before and list(signals.glob("part-*.parquet"))
    # the input's manifest edited to list the new shard: a changed input, never the old signals
    manifest = json.loads((given / "manifest.json").read_text())
    from caption_debias.shard_digests import sha256_file

    manifest["shards"][1]["sha256"] = sha256_file(given / "shards/part-00001.parquet")
    (given / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="curated with different options or from other inputs"):
        curate([given], tmp_path / "out", CurateOptions(quiet=True))
    assert files(tmp_path / "out") == before


def test_a_folder_without_digests_is_read_with_a_note(swapped, tmp_path, capsys):
    import shutil

    from caption_debias.dataset import PreparedDataset

    shutil.copytree(swapped / "whole", tmp_path / "old")
    manifest = json.loads((tmp_path / "old/manifest.json").read_text())
    for shard in manifest["shards"]:
        del shard["sha256"]
    (tmp_path / "old/manifest.json").write_text(json.dumps(manifest))
    ds = PreparedDataset.open(tmp_path / "old")
    assert ds.read(["key"]).num_rows == 20
    err = capsys.readouterr().err
    assert "records no sha256 for 4 shard(s)" in err and len(err.strip().splitlines()) == 1


# -- a full disk: the line names the file ----------------------------------------------------


@pytest.fixture
def mount_small(tmp_path):
    """mount_small(size) -> a fresh real tmpfs of that size (needs root and mount rights: skipped elsewhere)."""
    import shutil

    if not shutil.which("mount") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    points = []

    def mount(size: str) -> Path:
        point = tmp_path / f"disk{len(points)}"
        point.mkdir()
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], capture_output=True)
        if made.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({made.stderr.decode().strip()})")
        points.append(point)
        return point

    yield mount
    for point in points:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


@pytest.fixture(scope="module")
def big_images(tmp_path_factory):
    """Pictures of noise (large JPEGs: a small disk fills at several points of a run)."""
    return prepared_with_images(tmp_path_factory.mktemp("disk"), 200, 50, [noise((400, 300), i) for i in range(4)])


@pytest.mark.slow
@pytest.mark.parametrize("command", ["curate", "pack"])
def test_a_full_disk_is_one_line_naming_the_file_wherever_it_fills(big_images, mount_small, command):
    extra = ["--image-size", "256"] if command == "pack" else []
    # the disk fills at a different write each time (curate writes ~300 KB here, pack ~14 MB)
    sizes = ("48k", "160k", "240k") if command == "curate" else ("200k", "2m", "8m")
    for size in sizes:
        out = mount_small(size) / "out"
        given = ["--out", str(out), "--image-root", str(big_images / "images"), "-q", *extra]  # -q: no progress lines
        proc = cli(command, str(big_images / "prepared"), *given)
        line = one_line_error(proc)
        assert "No space left on device" in line and f"{out}" in line, (size, line)


# -- reading a folder whose command was stopped ----------------------------------------------


def test_dataset_constants_name_every_commands_state_folder():
    from caption_debias.curate.run import STATE_DIR as CURATE
    from caption_debias.dataset import RUN_STATE_DIRS, STATE_DIR
    from caption_debias.pack.tars import STATE_DIR as PACK

    assert RUN_STATE_DIRS == {STATE_DIR: "prepare", CURATE: "curate", PACK: "pack"}


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """Folders of a curate and a pack stopped before their end: finished files, no manifest yet."""
    root = tmp_path_factory.mktemp("stopped")
    inputs = prepared_with_images(root, 8, 4, [picture((40 + i, 30), (60 * i, 90, 200)) for i in range(4)])
    for command in ("curate", "pack"):
        assert cli(*KILLED_COMMANDS[command](inputs, root / command), "-q").returncode == 0
        (root / command / "manifest.json").unlink()  # what a run stopped before its end leaves
    return root


UNFINISHED_READERS = {
    "stats": lambda folder, tmp: ["stats", str(folder), "-q"],
    "pack": lambda folder, tmp: ["pack", str(folder), "--out", str(tmp / "p"), "--image-root", str(tmp), "-q"],
    "train": lambda folder, tmp: ["train", str(folder), "--model", "tiny", "--out", str(tmp / "run"), "-q"],
}


@pytest.mark.parametrize(
    ("command", "reader"), [("curate", "stats"), ("curate", "pack"), ("curate", "train"), ("pack", "train")]
)
def test_a_folder_of_a_stopped_curate_or_pack_says_so_and_how_to_finish_it(stopped, tmp_path, command, reader):
    out = stopped / command
    line = one_line_error(cli(*UNFINISHED_READERS[reader](out, tmp_path)))
    assert f"{out}: {command} has not finished this folder" in line
    assert f"rerun the same `caption-debias {command}` command to finish it" in line


def test_rerunning_prepare_rewrites_an_edited_shard_of_the_same_size(swapped, tmp_path):
    import shutil

    from caption_debias.dataset import PreparedDataset, ShardChanged

    folder = tmp_path / "edited"
    shutil.copytree(swapped / "whole", folder)
    shard = folder / "shards/part-00001.parquet"
    data = bytearray(shard.read_bytes())
    data[10] ^= 0xFF  # one byte of the first page flipped: same size, same footer
    shard.write_bytes(bytes(data))
    with pytest.raises(ShardChanged, match="rerun the same `caption-debias prepare` command to rewrite it"):
        PreparedDataset.open(folder)
    prepare([swapped / "s.json"], folder, opts(shard_rows=5))
    assert shard.read_bytes() == (swapped / "whole/shards/part-00001.parquet").read_bytes()
    assert PreparedDataset.open(folder).rows == 20
