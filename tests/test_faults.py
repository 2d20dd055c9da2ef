"""Faults real dumps and runs meet: each costs what it must and no more, and says so in one line.

prepare: one bad record costs one record; a BOM is skipped; wrong column types, a failed start
and a failed write are one clear line; one writer per folder. Readers of a prepared folder
refuse a partial one. Benchmarks keep image paths inside their root; model files are never
unpickled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_process import run_cli
from input_fixtures import sharegpt_element

from caption_debias.dataset import PreparedDataset
from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare.run import prepare
from caption_debias.readers.sharegpt4v import iter_array
from caption_debias.records import Reject


def opts(**kw) -> PrepareOptions:
    return PrepareOptions(quiet=True, **kw)


cli = run_cli  # Python's view of the environment: a C library's setenv (COLUMNS) does not leak in


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The refusal is exactly one line on stderr, non-zero exit, no traceback."""
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("caption-debias: error: ")
    return proc.stderr.strip()


# -- ShareGPT4V: one broken element costs one record ---------------------------------------


def element(i: int) -> dict:
    text = f"Photo {i} shows a harbour {{at}} [dusk]. Boats are moored.\n\nHills rise."
    return sharegpt_element(i, f"sam/images/sa_{i}.jpg", text)


# Each fault breaks element 20 of 200 (10% into the array); `marker` is where it starts.
SHAREGPT_FAULTS = {
    "raw tab in a string": ("Photo 20 ", "Photo\t20 "),
    "raw newline in a string": ("Photo 20 ", "Photo\n20 "),
    "raw NUL in a string": ("Photo 20 ", "Photo\x0020 "),
    "bad escape": ("Photo 20 ", "Photo \\q20 "),
    "missing colon": ('"image": "sam/images/sa_20.jpg"', '"image" "sam/images/sa_20.jpg"'),
    "unquoted value": ('"sam/images/sa_20.jpg"', "sam/images/sa_20.jpg"),
    "unescaped quote": ("Photo 20 shows", 'Photo 20" shows'),
    "missing closing quote": ('sa_20.jpg"', "sa_20.jpg"),
    "missing bracket": (
        '[{"from": "human", "value": "<image>\\nWhat is this photo about?"}, {"from": "gpt", "value": "Photo 20 ',
        '[{"from": "human", "value": "<image>\\nWhat is this photo about?", {"from": "gpt", "value": "Photo 20 ',
    ),
}
# (old, new, where in `new` the stray text starts)
STRAY_FAULTS = {
    "stray character between elements": (', {"id": "s20"', ' x, {"id": "s20"', 1),
    "stray character after a comma": (', {"id": "s20"', ', x {"id": "s20"', 2),
    "doubled comma": (', {"id": "s20"', ',, {"id": "s20"', 1),
}


def write_faulty(path: Path, old: str, new: str, n: int = 200, indent: int | None = None) -> bytes:
    text = json.dumps([element(i) for i in range(n)], ensure_ascii=False, indent=indent)
    assert text.count(old) == 1, old
    data = text.replace(old, new).encode("utf-8")
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("fault", sorted(SHAREGPT_FAULTS))
@pytest.mark.parametrize("read_bytes", [5, 1 << 20])
def test_sharegpt4v_broken_element_costs_exactly_that_record(tmp_path, fault, read_bytes):
    data = write_faulty(tmp_path / "s.json", *SHAREGPT_FAULTS[fault])
    items = list(iter_array(tmp_path / "s.json", read_bytes=read_bytes))
    rejects = [i for i in items if isinstance(i, Reject)]
    kept = [value["id"] for offset, value in (i for i in items if not isinstance(i, Reject))]
    assert kept == [f"s{i}" for i in range(200) if i != 20]
    assert len(rejects) == 1 and not rejects[0].fatal
    assert rejects[0].location == data.index(b'{"id": "s20"') and rejects[0].reason.startswith("broken JSON: ")


@pytest.mark.parametrize("fault", sorted(STRAY_FAULTS))
def test_sharegpt4v_stray_text_between_elements_is_one_reject(tmp_path, fault):
    old, new, at = STRAY_FAULTS[fault]
    data = write_faulty(tmp_path / "s.json", old, new)
    items = list(iter_array(tmp_path / "s.json", read_bytes=64))
    rejects = [i for i in items if isinstance(i, Reject)]
    assert [v["id"] for _, v in (i for i in items if not isinstance(i, Reject))] == [f"s{i}" for i in range(200)]
    assert (
        len(rejects) == 1 and not rejects[0].fatal and rejects[0].reason == "broken JSON: stray text between elements"
    )
    assert rejects[0].location == data.index(new.encode()) + at


@pytest.mark.parametrize("indent", [None, 2])
def test_sharegpt4v_bad_element_at_ten_percent_loses_one_record_in_prepare(tmp_path, indent):
    src = tmp_path / "s.json"
    write_faulty(src, "Photo 20 ", "Photo\t20 ", indent=indent)
    manifest = prepare([src], tmp_path / "out", opts(shard_rows=64))
    assert manifest["complete"] is True
    assert (manifest["counts"]["read"], manifest["counts"]["written"], manifest["counts"]["rejected"]) == (200, 199, 1)
    rows = PreparedDataset.open(tmp_path / "out").read(["key"]).to_pylist()
    assert [r["key"] for r in rows] == [f"sharegpt4v/s{i}" for i in range(200) if i != 20]
    (reject,) = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert reject["reason"].startswith("broken JSON: Invalid control character") and isinstance(reject["location"], int)


def test_sharegpt4v_broken_last_element_is_a_reject_not_a_cut_off_file(tmp_path):
    src = tmp_path / "s.json"
    write_faulty(src, "Photo 199 shows", 'Photo 199" shows')  # the quote count no longer balances
    proc = cli("prepare", str(src), "--out", str(tmp_path / "out"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["complete"] is True and manifest["counts"]["written"] == 199


def test_sharegpt4v_only_a_file_that_ends_early_is_cut_off(tmp_path):
    src = tmp_path / "s.json"
    data = write_faulty(src, "Photo 20 ", "Photo\t20 ")
    src.write_bytes(data[: data.index(b'{"id": "s150"') + 40])
    proc = cli("prepare", str(src), "--out", str(tmp_path / "out"), "--quiet")
    assert proc.returncode == 3 and "cut off" in one_line_error(proc)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert (
        manifest["complete"] is False and manifest["counts"]["written"] == 149 and manifest["counts"]["rejected"] == 2
    )


def test_sharegpt4v_every_cut_point_is_one_fatal_reject_and_only_whole_records(tmp_path):
    full = json.dumps([element(i) for i in range(3)], indent=1).encode()
    path = tmp_path / "cut.json"
    for cut in range(1, len(full) - 1):
        path.write_bytes(full[:cut])
        items = list(iter_array(path, read_bytes=7))
        rejects = [i for i in items if isinstance(i, Reject)]
        assert len(rejects) == 1 and rejects[0].fatal, (cut, rejects)
        assert all(v == element(int(v["id"][1:])) for _, v in (i for i in items if not isinstance(i, Reject)))


# -- a UTF-8 byte-order mark at the start of any input is skipped ---------------------------

BOM = b"\xef\xbb\xbf"


def _bom_inputs(root: Path) -> dict[str, tuple[Path, int]]:
    """One small input per text format, each file starting with a BOM: {format: (path, records)}."""
    inputs: dict[str, tuple[Path, int]] = {}
    sharegpt = root / "s.json"
    sharegpt.write_bytes(BOM + json.dumps([element(i) for i in range(3)]).encode())
    inputs["sharegpt4v"] = (sharegpt, 3)
    jsonl = root / "t.jsonl"
    jsonl.write_bytes(
        BOM + b"".join(json.dumps({"image": f"{i}.jpg", "caption": f"Cap {i}."}).encode() + b"\n" for i in range(3))
    )
    inputs["table"] = (jsonl, 3)
    docci = root / "docci" / "docci_descriptions.jsonlines"
    docci.parent.mkdir()
    row = {"example_id": "test_00001", "split": "test", "image_file": "test_00001.jpg", "description": "A lamp."}
    docci.write_bytes(BOM + json.dumps(row).encode() + b"\n")
    inputs["docci"] = (docci.parent, 1)
    coco = root / "captions_val2017.json"
    doc = {"images": [{"id": 1, "file_name": "1.jpg"}], "annotations": [{"id": 5, "image_id": 1, "caption": "A cat."}]}
    coco.write_bytes(BOM + json.dumps(doc).encode())
    inputs["coco"] = (coco, 1)
    dci = root / "dci"
    (dci / "annotations").mkdir(parents=True)
    (dci / "photos").mkdir()
    ann = {"image": "sa_1.jpg", "short_caption": "A dog.", "extra_caption": "It sits.", "mask_data": {}}
    (dci / "annotations" / "1-data.json").write_bytes(BOM + json.dumps(ann).encode())
    (dci / "splits.json").write_bytes(BOM + json.dumps({"train": ["1-data.json"], "valid": [], "test": []}).encode())
    inputs["dci"] = (dci, 1)
    urban = root / "Urban1k"
    (urban / "image").mkdir(parents=True)
    (urban / "caption").mkdir()
    (urban / "image" / "1.jpg").write_bytes(b"jpg")
    (urban / "caption" / "1.txt").write_bytes(BOM + b"A busy street. Red cars.\n")
    inputs["urban1k"] = (urban, 1)
    return inputs


def test_bom_is_skipped_in_every_text_input(tmp_path):
    inputs = _bom_inputs(tmp_path)
    manifest = prepare([path for path, _ in inputs.values()], tmp_path / "out", opts())
    got = {entry["format"]: (entry["read"], entry["written"], entry["rejected"]) for entry in manifest["inputs"]}
    assert got == {fmt: (n, n, 0) for fmt, (_, n) in inputs.items()}
    rows = PreparedDataset.open(tmp_path / "out").read(["caption", "image"]).to_pylist()
    assert not [r for r in rows if "\ufeff" in r["caption"] or "\ufeff" in r["image"]]


@pytest.mark.parametrize("suffix,delimiter", [(".csv", ","), (".tsv", "\t")])
def test_bom_is_skipped_in_csv_and_tsv_column_names(tmp_path, suffix, delimiter):
    src = tmp_path / f"t{suffix}"
    lines = [delimiter.join(["uid", "image", "caption"])] + [
        delimiter.join([f"u{i}", f"{i}.jpg", f"Cap {i}."]) for i in range(3)
    ]
    src.write_bytes(BOM + "\n".join(lines).encode() + b"\n")
    first = tmp_path / f"f{suffix}"  # the image column first: its name must match --image-column
    first.write_bytes(BOM + "\n".join(delimiter.join(line.split(delimiter)[1:]) for line in lines).encode() + b"\n")
    manifest = prepare([src, first], tmp_path / "out", opts(key_column="uid"))
    assert [(e["read"], e["written"]) for e in manifest["inputs"]] == [(3, 3), (3, 3)]
    rows = PreparedDataset.open(tmp_path / "out").read(["key", "meta"]).to_pylist()
    assert [r["key"] for r in rows[:3]] == ["table/u0", "table/u1", "table/u2"]
    assert all("\ufeff" not in r["meta"] for r in rows)


def test_bom_is_skipped_by_benchmark_loaders(tmp_path):
    from caption_debias.evaluate.benchmarks import load_benchmark

    inputs = _bom_inputs(tmp_path)
    docci_file = inputs["docci"][0] / "docci_descriptions.jsonlines"
    assert load_benchmark("docci", docci_file.parent).captions == [["A lamp."]]
    (tmp_path / "coco" / "annotations").mkdir(parents=True)
    inputs["coco"][0].rename(tmp_path / "coco" / "annotations" / "captions_val2017.json")
    assert load_benchmark("coco", tmp_path / "coco").captions == [["A cat."]]
    assert load_benchmark("dci", inputs["dci"][0]).captions == [["A dog.", "It sits."]]
    assert load_benchmark("urban1k", inputs["urban1k"][0]).captions == [["A busy street.", "Red cars."]]


# -- a column of the wrong type is one clear error, not one reject per row ------------------


@pytest.mark.parametrize(
    "column,values,flag",
    [
        ("caption", [b"bytes one", b"bytes two"], "--caption-column"),
        ("caption", [["a list"], ["of strings"]], "--caption-column"),
        ("image", [1, 2], "--image-column"),
        ("key", [[1], [2]], "--key-column"),
    ],
)
def test_parquet_column_of_the_wrong_type_is_one_error_naming_it(tmp_path, column, values, flag):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = {"image": ["a.jpg", "b.jpg"], "caption": ["One.", "Two."], "key": ["k1", "k2"]}
    table[column] = values
    src = tmp_path / "t.parquet"
    pq.write_table(pa.table(table), src)
    proc = cli("prepare", str(src), "--out", str(tmp_path / "out"), "--quiet")
    line = one_line_error(proc)
    assert f"column {column!r}" in line and f"holds {str(pa.array(values).type).split('<')[0]}" in line and flag in line
    assert not (tmp_path / "out" / "rejects.jsonl").exists()


def test_url_table_and_img2dataset_columns_are_type_checked(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from caption_debias.errors import UserError
    from caption_debias.readers import get_reader

    src = tmp_path / "recap.parquet"
    pq.write_table(pa.table({"url": ["http://x/1.jpg"], "re_caption": [[1, 2]], "key": ["k"]}), src)
    with pytest.raises(UserError, match="column .re_caption. holds list<"):
        list(get_reader("recap-datacomp")(src, str(src), opts()))
    folder = tmp_path / "i2d"
    folder.mkdir()
    meta = {"key": ["000000000"], "caption": [b"raw bytes"], "url": ["http://x/1.jpg"], "status": ["success"]}
    pq.write_table(pa.table(meta), folder / "00000.parquet")
    with pytest.raises(UserError, match="column 'caption' holds binary values"):
        list(get_reader("img2dataset")(folder, str(folder), opts()))


def test_integer_keys_and_all_null_captions_are_not_type_errors(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({"image": ["a.jpg", "b.jpg"], "caption": pa.nulls(2, pa.string()), "key": [7, 8]}), src)
    manifest = prepare([src], tmp_path / "out", opts())
    assert manifest["counts"]["rejected"] == 2 and manifest["counts"]["rejects_by_reason"] == {"missing caption": 2}


# -- a failed start leaves nothing that blocks the corrected command -------------------------


def test_run_failing_before_any_shard_does_not_block_the_fixed_command(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({"image": ["a.jpg", "b.jpg"], "text": ["One.", "Two."]}), src)
    out = tmp_path / "out"
    wrong = cli("prepare", str(src), "--out", str(out), "--quiet")
    assert "no column 'caption'" in one_line_error(wrong)
    fixed = cli("prepare", str(src), "--out", str(out), "--caption-column", "text", "--quiet")
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads((out / "manifest.json").read_text())["counts"]["written"] == 2


def test_run_that_wrote_no_shard_does_not_block_other_options(tmp_path):
    src = tmp_path / "t.jsonl"  # JSON lines have no header: a wrong column rejects every row
    src.write_text("".join(json.dumps({"image": f"{i}.jpg", "text": f"Cap {i}."}) + "\n" for i in range(3)))
    first = prepare([src], tmp_path / "out", opts())
    assert first["counts"]["written"] == 0 and first["counts"]["rejects_by_reason"] == {"missing field": 3}
    again = prepare([src], tmp_path / "out", opts(caption_column="text"))
    assert again["counts"]["written"] == 3


# -- a failed write is one line; finished shards stay; a rerun finishes identically ----------

FAIL_SHARD = """
import errno, os
if os.environ.get("CD_FAIL_SHARD"):
    import pyarrow.parquet as pq

    real = pq.write_table
    def write_table(table, where, *args, **kwargs):
        if os.environ["CD_FAIL_SHARD"] in str(where):
            with open(where, "wb") as fh:
                fh.write(b"PAR1 half a shard")
            raise OSError(errno.ENOSPC, "Error writing bytes to file")
        return real(table, where, *args, **kwargs)
    pq.write_table = write_table
"""


def _sharegpt(path: Path, n: int) -> Path:
    path.write_text(json.dumps([element(i) for i in range(n)]))
    return path


def _snapshot(folder: Path) -> tuple:
    manifest = json.loads((folder / "manifest.json").read_text())
    rows = PreparedDataset.open(folder).read().to_pylist()
    return manifest["shards"], manifest["counts"], rows, (folder / "rejects.jsonl").read_bytes()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_disk_full_mid_run_is_one_line_and_a_rerun_finishes_identically(tmp_path, workers):
    from caption_debias.prepare.writer import sha256_file

    src = _sharegpt(tmp_path / "s.json", 120)
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(FAIL_SHARD)  # also loaded by spawned worker processes
    out = tmp_path / "out"
    args = ["prepare", str(src), "--out", str(out), "--shard-rows", "20", "--workers", workers, "--quiet"]
    path = os.pathsep.join(p for p in (str(inject), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "CD_FAIL_SHARD": "part-00003"}
    proc = subprocess.run(
        [sys.executable, "-m", "caption_debias.cli.main", *args], capture_output=True, text=True, env=env, timeout=180
    )
    line = one_line_error(proc)
    assert str(out / "shards" / "part-00003.parquet") in line and "No space left on device" in line
    assert not (out / "manifest.json").exists()
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]  # the half-written shard is gone
    for side_path in (out / ".prepare").glob("part-*.json"):  # what finished is whole and matches its sidecar
        side = json.loads(side_path.read_text())
        assert sha256_file(out / side["path"]) == side["sha256"]
    assert (out / ".prepare" / "part-00000.json").exists()

    rerun = cli(*args)
    assert rerun.returncode == 0, rerun.stderr
    prepare([src], tmp_path / "clean", opts(shard_rows=20))
    assert _snapshot(out) == _snapshot(tmp_path / "clean")


def test_unwritable_output_is_one_line(tmp_path):
    src = _sharegpt(tmp_path / "s.json", 3)
    (tmp_path / "file").write_text("x")
    proc = cli("prepare", str(src), "--out", str(tmp_path / "file" / "out"), "--quiet")
    line = one_line_error(proc)
    assert str(tmp_path / "file" / "out") in line


def test_permission_denied_on_the_manifest_is_one_line_naming_it(tmp_path, monkeypatch):
    import errno

    from caption_debias.runner import WriteFailed, writes

    src = _sharegpt(tmp_path / "s.json", 30)
    real = writes.os.replace

    def replace(a, b):
        if str(b).endswith("manifest.json"):
            raise PermissionError(errno.EACCES, "Permission denied", str(b))
        return real(a, b)

    monkeypatch.setattr(writes.os, "replace", replace)
    with pytest.raises(WriteFailed, match=r"manifest.json: cannot write \(Permission denied\)"):
        prepare([src], tmp_path / "out", opts(shard_rows=10))
    monkeypatch.undo()
    assert prepare([src], tmp_path / "out", opts(shard_rows=10))["counts"]["written"] == 30


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 320 KiB tmpfs (needs root and mount rights: skipped elsewhere); yields its mount point."""
    import shutil

    point = tmp_path / "small"
    point.mkdir()
    if not shutil.which("mount") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=320k", "tmpfs", str(point)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.decode().strip()})")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_real_full_disk_then_a_bigger_one_finishes_identically(tmp_path, small_tmpfs):
    src = _sharegpt(tmp_path / "s.json", 3000)
    out = small_tmpfs / "out"
    args = ["prepare", str(src), "--out", str(out), "--shard-rows", "100", "--quiet"]
    full = cli(*args)
    line = one_line_error(full)
    assert str(out) in line and "No space left on device" in line
    assert list((out / "shards").glob("part-*.parquet")), "the disk filled before any shard: make it bigger"
    grown = subprocess.run(["mount", "-o", "remount,size=64m", str(small_tmpfs)], capture_output=True)
    assert grown.returncode == 0, grown.stderr
    rerun = cli(*args)
    assert rerun.returncode == 0, rerun.stderr
    prepare([src], tmp_path / "clean", opts(shard_rows=100))
    assert _snapshot(out) == _snapshot(tmp_path / "clean")


# -- one writer per folder ------------------------------------------------------------------


def _prepare_proc(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "caption_debias.cli.main", "prepare", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def assert_shards_match_manifest(out: Path) -> None:
    import pyarrow.parquet as pq

    from caption_debias.prepare.writer import sha256_file

    manifest = json.loads((out / "manifest.json").read_text())
    assert {s["path"] for s in manifest["shards"]} == {
        str(p.relative_to(out)) for p in (out / "shards").glob("*.parquet")
    }
    for shard in manifest["shards"]:
        assert pq.ParquetFile(out / shard["path"]).metadata.num_rows == shard["rows"]
        assert sha256_file(out / shard["path"]) == shard["sha256"]
    assert sum(s["rows"] for s in manifest["shards"]) == manifest["counts"]["written"]
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.mark.parametrize("overwrite", [False, True])
def test_second_prepare_on_a_folder_in_use_is_refused_at_once_and_writes_nothing(tmp_path, overwrite):
    import signal
    import time

    src = _sharegpt(tmp_path / "s.json", 3000)
    out = tmp_path / "out"
    first = _prepare_proc(str(src), "--out", str(out), "--shard-rows", "50", "--quiet")
    try:
        deadline = time.monotonic() + 120
        while not list((out / ".prepare").glob("part-*.json")) and time.monotonic() < deadline:
            assert first.poll() is None, first.stderr.read()
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGSTOP)  # hold still, so any change below would be the second run's
        before = _files(out)
        started = time.monotonic()
        second = cli("prepare", str(src), "--out", str(out), "--quiet", *(["--overwrite"] if overwrite else []))
        elapsed = time.monotonic() - started
        line = one_line_error(second)
        assert second.returncode == 4 and str(out) in line and f"pid {first.pid}" in line and "prepare" in line
        assert _files(out) == before
        assert elapsed < 60  # refused at start-up, not after reading the input
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert_shards_match_manifest(out)
    assert json.loads((out / "manifest.json").read_text())["counts"]["written"] == 3000


@pytest.mark.parametrize("delay", [0.0, 0.7, 2.5])
def test_two_real_prepares_on_one_folder_leave_shards_that_match_the_manifest(tmp_path, delay):
    import time
    from concurrent.futures import ThreadPoolExecutor

    src = _sharegpt(tmp_path / "s.json", 1500)
    out = tmp_path / "out"
    common = ["prepare", str(src), "--out", str(out), "--shard-rows", "100", "--quiet"]
    for second_flags in ([], ["--overwrite"]):
        with ThreadPoolExecutor(2) as pool:  # two processes of their own at once (run_cli waits for its own)
            first = pool.submit(cli, *common, "--overwrite")
            time.sleep(delay)
            second = pool.submit(cli, *common, *second_flags)
            results = [(p.result().returncode, p.result().stderr) for p in (first, second)]
        codes = sorted(code for code, _ in results)
        assert codes in ([0, 0], [0, 4]), results  # both ran one after the other, or one was refused
        for code, err in results:
            if code == 4:
                assert str(out) in err and "pid " in err and len(err.strip().splitlines()) == 1
        assert_shards_match_manifest(out)


# -- readers of a prepared folder are never fooled by a partial one ----------------------------


@pytest.fixture(scope="module")
def whole_folder(tmp_path_factory) -> Path:
    """A finished prepared folder of 12 rows in shards of 5, 5 and 2."""
    root = tmp_path_factory.mktemp("whole")
    src = _sharegpt(root / "s.json", 12)
    prepare([src], root / "out", opts(shard_rows=5))
    return root / "out"


def partial_folder(whole: Path, fault: str, where: Path) -> Path:
    """A copy of `whole` with one fault: incomplete input, a missing shard, a wrong row count, no manifest."""
    import shutil

    from caption_debias.errors import IncompleteInput

    out = where / fault
    if fault == "incomplete":
        data = json.dumps([element(i) for i in range(12)]).encode()
        (where / "cut.json").write_bytes(data[: len(data) * 2 // 3])
        with pytest.raises(IncompleteInput):
            prepare([where / "cut.json"], out, opts(shard_rows=5))
        return out
    shutil.copytree(whole, out)
    if fault == "missing shard":
        (out / "shards" / "part-00001.parquet").unlink()
    elif fault == "row count":
        shutil.copyfile(out / "shards" / "part-00002.parquet", out / "shards" / "part-00001.parquet")
    elif fault == "unfinished":
        (out / "manifest.json").unlink()
    return out


FOLDER_FAULTS = {
    "incomplete": "was cut off or broken mid-way",
    "missing shard": "shard shards/part-00001.parquet listed in manifest.json is missing",
    "row count": "shard shards/part-00001.parquet holds 2 rows, manifest.json says 5",
    "unfinished": "prepare has not finished this folder",
}


@pytest.mark.parametrize("fault", sorted(FOLDER_FAULTS))
def test_prepared_dataset_refuses_a_partial_folder_in_one_line(tmp_path, whole_folder, fault):
    from caption_debias.dataset import IncompleteFolder

    folder = partial_folder(whole_folder, fault, tmp_path)
    with pytest.raises(IncompleteFolder) as err:
        PreparedDataset.open(folder)
    message = str(err.value)
    assert str(folder) in message and FOLDER_FAULTS[fault] in message and "rerun the same" in message
    assert "\n" not in message
    if fault == "incomplete":  # the rows before the cut are whole: readable when asked for
        ds = PreparedDataset.open(folder, allow_incomplete=True)
        assert ds.manifest["complete"] is False and ds.read(["key"]).num_rows == ds.rows > 0
    else:  # damage is refused even then
        with pytest.raises(IncompleteFolder):
            PreparedDataset.open(folder, allow_incomplete=True)
    assert PreparedDataset.open(whole_folder).rows == 12


READING_COMMANDS = {
    "stats": lambda folder, tmp: ["stats", str(folder), "--quiet"],
    "eval --data": lambda folder, tmp: ["eval", "tiny", "--data", str(folder), "--image-root", str(tmp), "--quiet"],
    "export-captions": lambda folder, tmp: ["export-captions", str(folder), "--out", str(tmp / "c.jsonl")],
    "urls": lambda folder, tmp: ["urls", str(folder), "--out", str(tmp / "u.parquet")],
}


@pytest.mark.parametrize("fault", ["incomplete", "row count"])
@pytest.mark.parametrize("command", sorted(READING_COMMANDS))
def test_commands_reading_a_prepared_folder_refuse_a_partial_one(tmp_path, whole_folder, command, fault):
    folder = partial_folder(whole_folder, fault, tmp_path)
    proc = cli(*READING_COMMANDS[command](folder, tmp_path))
    line = one_line_error(proc)
    assert str(folder) in line and FOLDER_FAULTS[fault] in line
    assert not (tmp_path / "c.jsonl").exists() and not (tmp_path / "u.parquet").exists()


HOLD_LOCK = """
import sys, time
from caption_debias.locking import folder_lock
with folder_lock(sys.argv[1], "prepare", beside=sys.argv[2:] == ["beside"]):
    print("held", flush=True)
    time.sleep(120)
"""


def _folder_writers():
    from caption_debias.demo import preset, run_demo
    from caption_debias.evaluate.suite import DataSpec, run_probe
    from caption_debias.model.export import export
    from caption_debias.stats.report import write_report
    from caption_debias.synth.world import write_world

    return {
        "synth": lambda out: write_world(out, 4, seed=0),
        "export": lambda out: export("tiny", out),
        "stats --report": lambda out: write_report({}, out),
        "probe --report": lambda out: run_probe(["tiny"], DataSpec("prepared", out.parent / "none"), out),
        "demo": lambda out: run_demo(preset("quick", out), quiet=True),
    }


@pytest.mark.parametrize("command", ["synth", "export", "stats --report", "probe --report", "demo"])
def test_every_folder_writing_command_is_refused_while_another_holds_the_folder(tmp_path, command):
    from caption_debias.locking import LOCK_FILES, FolderLocked

    out = tmp_path / "out"
    beside = ["beside"] if command == "export" else []  # an export's lock sits beside the folder
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out), *beside], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderLocked, match=f"pid {holder.pid}"):
            _folder_writers()[command](out)
        assert {p.name for p in out.iterdir()} <= LOCK_FILES  # nothing written
    finally:
        holder.kill()
        holder.wait()


def test_export_over_an_earlier_export_replaces_the_files_and_holds_only_them(tmp_path):
    from caption_debias.errors import UserError
    from caption_debias.locking import LOCK_FILES
    from caption_debias.model.export import CONFIG_FILE, WEIGHTS_FILE, export

    out = tmp_path / "exp"
    export("tiny", out)
    (out / "stale.txt").write_text("from before")
    with pytest.raises(UserError, match="not empty"):
        export("tiny", out)
    export("tiny", out, overwrite=True)
    assert {p.name for p in out.iterdir()} == {CONFIG_FILE, WEIGHTS_FILE}  # the lock sits beside it
    (out / next(iter(LOCK_FILES))).write_text("")  # an older export's lock file inside: removed too
    export("tiny", out, overwrite=True)
    assert {p.name for p in out.iterdir()} == {CONFIG_FILE, WEIGHTS_FILE}


# -- benchmark loaders keep image paths inside the image root --------------------------------

UNSAFE = ["../outside.jpg", "/abs/outside.jpg", "a/../../outside.jpg"]


def _benchmark_layout(name: str, root: Path) -> tuple[Path, Path]:
    """A tiny `name` layout whose images are UNSAFE plus one safe path: (--data, default image root)."""
    images = [*UNSAFE, "ok.jpg"]
    if name == "docci":
        rows = [
            {"example_id": f"test_{i}", "split": "test", "image_file": im, "description": f"Photo {i}. More."}
            for i, im in enumerate(images)
        ]
        (root / "docci_descriptions.jsonlines").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return root, root / "images"
    if name in ("dci", "long-dci"):
        (root / "annotations").mkdir()
        names = []
        for i, im in enumerate(images):
            ann = {"image": im, "short_caption": f"Photo {i}.", "extra_caption": "More here.", "mask_data": {}}
            (root / "annotations" / f"{i}-data.json").write_text(json.dumps(ann))
            names.append(f"{i}-data.json")
        (root / "splits.json").write_text(json.dumps({"train": names, "valid": [], "test": []}))
        return root, root / "photos"
    if name == "coco":
        doc = {
            "images": [{"id": i, "file_name": im} for i, im in enumerate(images)],
            "annotations": [{"id": 10 + i, "image_id": i, "caption": f"Photo {i}."} for i in range(len(images))],
        }
        (root / "annotations").mkdir()
        (root / "annotations" / "captions_val2017.json").write_text(json.dumps(doc))
        (root / "val2017").mkdir()
        return root, root / "val2017"
    if name in ("flickr30k", "flickr30k-full"):
        doc = {
            "images": [
                {"filename": im, "split": "test", "sentences": [{"raw": f"Photo {i} ."}]} for i, im in enumerate(images)
            ]
        }
        (root / "dataset_flickr30k.json").write_text(json.dumps(doc))
        (root / "flickr30k-images").mkdir()
        return root, root / "flickr30k-images"
    if name in ("sharegpt4v-1k", "sharegpt4v-1k-sam"):
        if name.endswith("sam"):  # only SAM records count there: paths that start like one and climb out
            images = ["sam/../../x.jpg", "sam/a/../../../x.jpg", "sam/../../../x.jpg", "sam/ok.jpg"]
        path = root / "share-captioner_coco_lcs_sam_1246k_1107.json"
        path.write_text(json.dumps([{**element(i), "image": im} for i, im in enumerate(images)]))
        return path, root
    raise AssertionError(name)


@pytest.mark.parametrize(
    "name", ["docci", "dci", "long-dci", "coco", "flickr30k", "flickr30k-full", "sharegpt4v-1k", "sharegpt4v-1k-sam"]
)
def test_benchmark_loaders_skip_image_paths_outside_their_root_with_a_count(tmp_path, name):
    from caption_debias.evaluate.benchmarks import BENCHMARKS, load_benchmark

    assert name in BENCHMARKS
    data_path, image_root = _benchmark_layout(name, tmp_path)
    data = load_benchmark(name, data_path)
    assert data.n_images == 1 and len(data.captions) == 1
    assert data.images[0].resolve().is_relative_to(image_root.resolve())
    assert data.info["skipped_outside_image_root"] == 3 and "3 pairs skipped" in data.definition


def test_every_benchmark_layout_is_covered_by_the_path_test():
    from caption_debias.evaluate.benchmarks import BENCHMARKS

    # urban1k pairs caption/N.txt with image/N.jpg by file name: no path to climb out with
    covered = {"docci", "dci", "long-dci", "coco", "flickr30k", "flickr30k-full", "sharegpt4v-1k", "sharegpt4v-1k-sam"}
    assert set(BENCHMARKS) == covered | {"urban1k"}


def test_prepared_folder_rows_outside_the_image_root_are_skipped_with_a_count(tmp_path, whole_folder):
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from caption_debias.evaluate.benchmarks import load_benchmark
    from caption_debias.shard_digests import sha256_file

    folder = tmp_path / "made-elsewhere"
    shutil.copytree(whole_folder, folder)
    shard = folder / "shards" / "part-00000.parquet"
    table = pq.read_table(shard)
    images = table.column("image").to_pylist()
    images[:3] = UNSAFE
    at = table.schema.get_field_index("image")
    pq.write_table(table.set_column(at, table.schema.field(at), pa.array(images)), shard)
    manifest = json.loads((folder / "manifest.json").read_text())  # as the tool that made it would list it
    manifest["shards"][0]["sha256"] = sha256_file(shard)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "root").mkdir()  # a typed root is checked up front (image_source.roots); its rows are what is tested
    data = load_benchmark("prepared", folder, image_root=tmp_path / "root")
    assert data.n_images == 9 and data.info["skipped_outside_image_root"] == 3
    assert all(p.resolve().is_relative_to((tmp_path / "root").resolve()) for p in data.images)


# -- model files: refusals are one line, and nothing is ever unpickled ----------------------


class _Evil:
    """Unpickling this runs code: it creates the file `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, Path]:
    """Good and bad model files for the tiny model: checkpoints, local-dir: folders, a run-like folder."""
    import shutil

    import torch

    from caption_debias.model.export import CONFIG_FILE, WEIGHTS_FILE, export
    from caption_debias.model.load import load_model

    root = tmp_path_factory.mktemp("models")
    marker = root / "UNPICKLED"
    export("tiny", root / "local-safetensors")
    state = load_model("tiny").model.state_dict()
    files = {"local-safetensors": root / "local-safetensors"}
    torch.save(state, root / "good.pt")
    torch.save(state, root / "legacy.pt", _use_new_zipfile_serialization=False)
    files.update(good_pt=root / "good.pt", legacy_pt=root / "legacy.pt")
    files["safetensors"] = root / "local-safetensors" / WEIGHTS_FILE
    for name, payload in (("local-bin", state), ("local-evil-bin", {"state_dict": state, "x": _Evil(marker)})):
        folder = root / name
        folder.mkdir()
        shutil.copy(root / "local-safetensors" / CONFIG_FILE, folder)
        torch.save(payload, folder / "open_clip_pytorch_model.bin")
        files[name] = folder
    torch.save({"state_dict": state, "x": _Evil(marker)}, root / "evil.pt")
    torch.save({"x": _Evil(marker)}, root / "evil-legacy.pt", _use_new_zipfile_serialization=False)
    files.update(evil_pt=root / "evil.pt", evil_legacy_pt=root / "evil-legacy.pt")
    run = root / "run-evil"  # a run folder's layout (config + checkpoints/step_*.pt) holding an object
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(root / "local-safetensors" / CONFIG_FILE, run)
    torch.save({"model": state, "step": 1, "x": _Evil(marker)}, run / "checkpoints" / "step_00000001.pt")
    files["run_evil"] = run
    good = (root / "good.pt").read_bytes()
    (root / "torn.pt").write_bytes(good[: len(good) // 2])
    (root / "unknown.bin").write_text("not weights at all\n")
    files.update(torn_pt=root / "torn.pt", unknown=root / "unknown.bin", marker=marker)
    return files


def _no_pickle(monkeypatch) -> None:
    """Make every plain-pickle entry point fail: torch.load(weights_only=False) goes through them."""
    import pickle

    def refuse(*args, **kwargs):
        raise AssertionError("a model file was unpickled")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)


def test_every_model_load_path_reads_weights_only(model_files, monkeypatch):
    from caption_debias.model.export import export
    from caption_debias.model.load import load_model

    _no_pickle(monkeypatch)
    loaded = [
        load_model("tiny"),
        load_model(str(model_files["good_pt"]), "tiny"),
        load_model(str(model_files["legacy_pt"]), "tiny"),
        load_model(str(model_files["safetensors"]), "tiny"),
        load_model("tiny", str(model_files["good_pt"])),
        load_model(f"local-dir:{model_files['local-safetensors']}"),
        load_model(f"local-dir:{model_files['local-bin']}"),
    ]
    assert all(m.model is not None for m in loaded)
    export(f"local-dir:{model_files['local-bin']}", model_files["good_pt"].parent / "re-exported")


@pytest.mark.parametrize(
    "spec,pretrained,expect",
    [
        ("evil_pt", "tiny", "refusing to unpickle it"),
        ("evil_legacy_pt", "tiny", "refusing to unpickle it"),
        ("tiny", "evil_pt", "refusing to unpickle it"),
        ("local-evil-bin", None, "refusing to unpickle it"),
        ("run_evil", None, "refusing to unpickle it"),
        ("torn_pt", "tiny", "not a readable checkpoint"),
        ("unknown", "tiny", "not a readable checkpoint"),
    ],
)
def test_model_files_that_cannot_be_read_weights_only_are_refused_and_never_run(
    model_files, monkeypatch, spec, pretrained, expect
):
    from caption_debias.errors import UserError
    from caption_debias.model.load import load_model

    _no_pickle(monkeypatch)
    as_spec = lambda name: str(model_files[name]) if name in model_files else name  # noqa: E731
    spec_text = as_spec(spec)
    if spec.startswith("local-"):
        spec_text = f"local-dir:{spec_text}"
    with pytest.raises(UserError, match=expect) as err:
        load_model(spec_text, as_spec(pretrained) if pretrained else None)
    assert "\n" not in str(err.value)
    assert not model_files["marker"].exists()


@pytest.mark.parametrize("kind", ["good_pt", "safetensors"])
def test_a_checkpoint_cut_anywhere_is_one_line(model_files, tmp_path, kind):
    from caption_debias.errors import UserError
    from caption_debias.model.load import load_model

    data = model_files[kind].read_bytes()
    cut = tmp_path / f"cut{model_files[kind].suffix}"
    for at in [0, 1, 8, 64, 200, *range(len(data) // 13, len(data) - 1, len(data) // 13)]:
        cut.write_bytes(data[:at])
        with pytest.raises(UserError, match="not a readable checkpoint"):
            load_model(str(cut), "tiny")


def test_model_refusal_on_the_command_line_is_one_line(model_files, tmp_path):
    spec = f"local-dir:{model_files['local-evil-bin']}"
    proc = cli("export", spec, "--out", str(tmp_path / "o"))
    # first, before torch is imported, the line saying what is loaded (and the lines saying what it is doing
    # meanwhile: the imports, the weights read); then the refusal in one line
    said, *rest = proc.stderr.splitlines(keepends=True)
    assert said.startswith(f"caption-debias: loading model {spec} (") and said.endswith(" MB)\n"), proc.stderr
    doing = ("caption-debias: importing torch and open_clip", "caption-debias: reading weights ")
    assert any(line.startswith(doing[1]) for line in rest), proc.stderr
    rest = [line for line in rest if not line.startswith(doing)]
    refusal = subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout, "".join(rest))
    assert "refusing to unpickle it" in one_line_error(refusal)
    assert not model_files["marker"].exists()


def test_no_code_path_unpickles_a_file():
    """Static guard: torch.load and open_clip's loaders weights-only; pickle's loaders nowhere but Ray IPC."""
    import ast

    package = Path(__file__).resolve().parents[1] / "caption_debias"
    weights_only_calls = {"load", "load_checkpoint", "load_state_dict"}
    offenders = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute):
                owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
                name = node.func.attr
            elif isinstance(node.func, ast.Name):  # e.g. open_clip.factory's load_state_dict imported by name
                owner, name = ("open_clip" if node.func.id in weights_only_calls - {"load"} else ""), node.func.id
            else:
                continue
            where = f"{path.relative_to(package.parent)}:{node.lineno}"
            kwargs = {k.arg: k.value for k in node.keywords}
            if owner in ("torch", "open_clip") and name in weights_only_calls:
                flag = kwargs.get("weights_only")
                if not (isinstance(flag, ast.Constant) and flag.value is True):
                    offenders.append(f"{where}: {owner}.{name} without weights_only=True")
            if owner in ("pickle", "cPickle", "dill", "joblib") and name in ("load", "loads", "Unpickler"):
                if path != package / "engines" / "ray.py":  # its own task bytes between processes, never a file
                    offenders.append(f"{where}: {owner}.{name}")
            if owner in ("np", "numpy") and name == "load" and "allow_pickle" in kwargs:
                offenders.append(f"{where}: numpy.load with allow_pickle")
            if owner in ("pd", "pandas") and name == "read_pickle":
                offenders.append(f"{where}: pandas.read_pickle")
    assert offenders == []


def test_a_write_failure_in_a_ray_task_comes_back_as_its_one_line(tmp_path):
    from caption_debias.engines.ray import _ERROR, _run_task
    from caption_debias.prepare.writer import WriteFailed

    def finish(task):
        raise WriteFailed(f"out/shards/part-0000{task}.parquet: cannot write (No space left on device)")

    side = _run_task(finish, 3, str(tmp_path))
    assert side == {_ERROR: "out/shards/part-00003.parquet: cannot write (No space left on device)"}
