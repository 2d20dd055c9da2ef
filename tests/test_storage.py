"""Remote folders and inputs through fsspec (docs/storage.md), on fsspec's in-process memory:// store.

memory:// is a real fsspec filesystem held in this Python process: the commands run in-process
(CliRunner, library calls), never in a subprocess, and nothing reaches the network.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest
from cli_process import run_cli

from caption_debias import locking, storage
from caption_debias.dataset import IncompleteFolder, PreparedDataset
from caption_debias.errors import UserError
from caption_debias.locking import HOLDER_FILE, FolderLocked, folder_lock
from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare.run import prepare

MEM = fsspec.filesystem("memory")


@pytest.fixture
def bucket():
    """A fresh memory:// prefix, removed afterwards (the store is shared by the whole process)."""
    name = f"/test-{uuid.uuid4().hex[:10]}"
    yield f"memory://{name.lstrip('/')}"
    if MEM.exists(name):
        MEM.rm(name, recursive=True)


def _table(path: Path, n: int = 40) -> list[dict]:
    rows = []
    for i in range(n):
        caption = f"This image shows object {i}. It sits on a table. The light is warm." + (" Dots." * (i % 3))
        rows.append({"key": f"k{i}", "image": f"img{i:04d}.png", "caption": caption})
    rows.append({"key": "bad", "image": "/abs.png", "caption": "Absolute path."})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return rows


def _put(local: Path, url: str) -> str:
    MEM.put_file(str(local), storage.as_path(url).path)
    return url


def _shards(folder) -> list:
    ds = PreparedDataset.open(folder)
    return ds.read().drop_columns(["meta"]).to_pylist()


# ---------------------------------------------------------------- paths


def test_local_paths_stay_pathlib_and_urls_become_upaths(tmp_path):
    assert storage.as_path(str(tmp_path)) == tmp_path and type(storage.as_path(str(tmp_path))) is type(tmp_path)
    assert storage.as_path(f"file://{tmp_path}") == tmp_path and not storage.is_remote(f"file://{tmp_path}")
    remote = storage.as_path("memory://b/x")
    assert storage.is_remote(remote) and storage.is_remote("memory://b/x") and remote.protocol == "memory"
    assert str(remote / "manifest.json") == "memory://b/x/manifest.json"
    assert storage.same_place("memory://b/x", "memory://b/x/") and not storage.same_place("memory://b/x", tmp_path)


def test_unknown_protocol_and_missing_backend_are_one_line():
    with pytest.raises(UserError, match="unknown storage protocol nosuch://"):
        storage.as_path("nosuch://bucket/x")
    if importlib.util.find_spec("gcsfs") is None:
        with pytest.raises(UserError, match=r"gs:// needs the gcsfs package.*pip install gcsfs"):
            storage.as_path("gs://bucket/prepared")


def test_cli_missing_backend_is_one_line_not_a_traceback(tmp_path):
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    _table(tmp_path / "t.jsonl")
    res = run_cli("prepare", str(tmp_path / "t.jsonl"), "-o", "gs://bucket/prepared", "-q")
    assert res.returncode != 0 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "caption-debias: error: gs://bucket/prepared: gs:// needs the gcsfs package (fsspec's gs backend): pip install gcsfs"
    ]


# ---------------------------------------------------------------- the round trip


def test_prepare_stats_curate_train_round_trip_on_memory(tmp_path, bucket):
    """prepare -> stats -> curate through the CLI with memory:// folders, then 2 training steps on
    the curated remote folder (images local under --image-root)."""
    from typer.testing import CliRunner

    from caption_debias.cli.main import app

    pytest.importorskip("torch")
    from train_fixtures import make_prepared

    local, images = make_prepared(tmp_path / "w", n=16)
    table = tmp_path / "w" / "table.jsonl"
    prepared, report, curated = f"{bucket}/prepared", f"{bucket}/report", f"{bucket}/curated"
    runner = CliRunner()
    res = runner.invoke(app, ["prepare", str(table), "--format", "table", "-o", prepared, "-q"])
    assert res.exit_code == 0, res.output
    assert _shards(prepared) == _shards(local)  # same rows, ids and flags as a local run
    assert MEM.exists(storage.as_path(prepared).path + "/manifest.json")
    assert not MEM.exists(storage.as_path(prepared).path + f"/{HOLDER_FILE}")  # the lock is gone after the run

    res = runner.invoke(app, ["stats", prepared, "--out", report, "-q"])
    assert res.exit_code == 0, res.output
    stats = json.loads(MEM.cat_file(storage.as_path(report).path + "/stats.json"))
    assert stats["records"] == 16 and stats["folders"] == [prepared]
    assert MEM.cat_file(storage.as_path(report).path + "/report.html").startswith(b"<!DOCTYPE html>")

    res = runner.invoke(app, ["curate", prepared, "-o", curated, "--image-root", str(images), "-q"])
    assert res.exit_code == 0, res.output
    manifest = json.loads(MEM.cat_file(storage.as_path(curated).path + "/manifest.json"))
    c = manifest["counts"]
    assert c["read"] == 16 and c["read"] == c["written"] + c["removed"]
    ds = PreparedDataset.open(curated)
    assert ds.rows == c["written"] and ds.read(["image_width"]).column("image_width").to_pylist() == [64] * ds.rows

    run = tmp_path / "run"
    train_args = ["train", curated, "--image-root", str(images), "--model", "tiny", "--batch-size", "4"]
    res = runner.invoke(app, [*train_args, "--max-steps", "2", "--precision", "fp32", "--out", str(run), "-q"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [x["step"] for x in lines if "loss" in x][-1] == 2


def test_prepare_reads_remote_inputs_like_local_ones(tmp_path, bucket):
    """A JSON array, JSON lines, CSV and Parquet input read from memory://: the same rows and rejects."""
    import pyarrow as pa
    from input_fixtures import write_sharegpt

    write_sharegpt(tmp_path / "s.json", 30, bad_every=7)
    rows = _table(tmp_path / "t.jsonl")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    lines = ["image,caption"] + [f'{r["image"]},"{r["caption"]}"' for r in rows]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n", "utf-8")
    for name, fmt in (("s.json", "auto"), ("t.jsonl", "table"), ("t.parquet", "auto"), ("t.csv", "auto")):
        url = _put(tmp_path / name, f"{bucket}/in/{name}")
        options = PrepareOptions(format=fmt, shard_rows=8, quiet=True)
        remote = prepare([url], f"{bucket}/out-{name}", options)
        local = prepare([tmp_path / name], tmp_path / f"out-{name}", options)
        assert remote["counts"] == local["counts"], name
        assert _shards(f"{bucket}/out-{name}") == _shards(tmp_path / f"out-{name}"), name
        remote_rejects = [{**r, "input": None} for r in PreparedDataset.open(f"{bucket}/out-{name}").rejects()]
        local_rejects = [{**r, "input": None} for r in PreparedDataset.open(tmp_path / f"out-{name}").rejects()]
        assert remote_rejects == local_rejects and remote["counts"]["rejected"] >= 1, name


def test_prepare_reads_remote_folder_formats(tmp_path, bucket):
    """Folder layouts (DCI, Urban1k) listed and read through fsspec: the same rows and rejects."""
    from input_fixtures import write_dci, write_urban1k

    write_dci(tmp_path / "dci")
    write_urban1k(tmp_path / "Urban1k")
    for name in ("dci", "Urban1k"):
        MEM.put(str(tmp_path / name), storage.as_path(f"{bucket}/{name}").path, recursive=True)
        remote = prepare([f"{bucket}/{name}"], f"{bucket}/out-{name}", PrepareOptions(quiet=True))
        local = prepare([tmp_path / name], tmp_path / f"out-{name}", PrepareOptions(quiet=True))
        assert remote["inputs"][0]["format"] == name.lower() and remote["counts"]["written"] >= 1, name
        assert remote["counts"] == local["counts"] and remote["counts"]["rejected"] >= 1, name
        assert _shards(f"{bucket}/out-{name}") == _shards(tmp_path / f"out-{name}"), name


def test_remote_reads_are_buffered_not_a_block_per_line(bucket):
    """fsspec's own readline reads a whole block per line; open_file puts a buffer in front."""
    MEM.pipe_file(storage.as_path(f"{bucket}/lines.jsonl").path, b"".join(b'{"i": %d}\n' % i for i in range(1000)))
    with storage.open_file(f"{bucket}/lines.jsonl", "rb") as fh:
        assert sum(1 for _ in fh) == 1000
    with storage.open_file(f"{bucket}/lines.jsonl", "r", encoding="utf-8") as fh:
        assert json.loads(fh.readline()) == {"i": 0}


# ---------------------------------------------------------------- resume and refusals


def test_remote_prepare_resumes_reusing_finished_shards(tmp_path, bucket):
    _table(tmp_path / "t.jsonl", n=40)
    options = PrepareOptions(format="table", shard_rows=8, quiet=True)
    out = f"{bucket}/prepared"
    first = prepare([tmp_path / "t.jsonl"], out, options)
    base = storage.as_path(out).path
    shard_bytes = {s["path"]: MEM.cat_file(f"{base}/{s['path']}") for s in first["shards"]}
    # a run stopped mid-way: no manifest, the last shard and its sidecar never written
    MEM.rm_file(f"{base}/manifest.json")
    MEM.rm_file(f"{base}/{first['shards'][-1]['path']}")
    stamp = MEM.info(f"{base}/{first['shards'][0]['path']}")["created"]
    with pytest.raises(IncompleteFolder, match="prepare has not finished"):
        PreparedDataset.open(out)
    again = prepare([tmp_path / "t.jsonl"], out, options)
    assert again["shards"] == first["shards"]
    assert MEM.info(f"{base}/{first['shards'][0]['path']}")["created"] == stamp  # reused, not rewritten
    assert {s["path"]: MEM.cat_file(f"{base}/{s['path']}") for s in again["shards"]} == shard_bytes
    with pytest.raises(UserError, match="different options"):
        prepare([tmp_path / "t.jsonl"], out, PrepareOptions(format="table", shard_rows=9, quiet=True))


def test_partial_remote_folders_are_refused(tmp_path, bucket):
    _table(tmp_path / "t.jsonl", n=20)
    out = f"{bucket}/prepared"
    manifest = prepare([tmp_path / "t.jsonl"], out, PrepareOptions(format="table", shard_rows=8, quiet=True))
    base = storage.as_path(out).path
    shard = f"{base}/{manifest['shards'][1]['path']}"
    whole = MEM.cat_file(shard)
    MEM.pipe_file(shard, whole[: len(whole) // 2])  # a torn copy
    with pytest.raises(IncompleteFolder, match=r"part-00001.parquet is unreadable"):
        PreparedDataset.open(out)
    MEM.rm_file(shard)
    with pytest.raises(IncompleteFolder, match=r"part-00001.parquet listed in manifest.json is missing"):
        PreparedDataset.open(out)
    with pytest.raises(UserError, match="no such folder"):
        PreparedDataset.open(f"{bucket}/nothing-here")


def test_process_local_store_refuses_other_processes(tmp_path, bucket):
    _table(tmp_path / "t.jsonl")
    with pytest.raises(UserError, match=r"memory:// lives in this process only.*--workers 1"):
        prepare([tmp_path / "t.jsonl"], f"{bucket}/p", PrepareOptions(format="table", workers=2, quiet=True))


# ---------------------------------------------------------------- the other readers of a prepared folder


def test_pack_export_and_eval_read_a_remote_folder(tmp_path, bucket):
    pytest.importorskip("webdataset")
    from train_fixtures import make_prepared

    from caption_debias.evaluate.benchmarks import load_benchmark
    from caption_debias.export.captions import export_captions
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack

    local, images = make_prepared(tmp_path / "w", n=10)
    table = tmp_path / "w" / "table.jsonl"
    prepared = f"{bucket}/prepared"
    prepare([table], prepared, PrepareOptions(format="table", quiet=True))

    packed = f"{bucket}/packed"
    manifest = pack(prepared, packed, PackOptions(image_root=str(images), image_size=32, quiet=True))
    local_manifest = pack(local, tmp_path / "packed", PackOptions(image_root=str(images), image_size=32, quiet=True))
    assert [t["sha256"] for t in manifest["tars"]] == [t["sha256"] for t in local_manifest["tars"]]
    assert MEM.exists(storage.as_path(packed).path + "/00000.tar")
    from caption_debias.pack.folder import PackedFolder

    with pytest.raises(UserError, match="memory-mapped tar index, which needs local files"):
        PackedFolder(packed)

    result = export_captions(prepared, f"{bucket}/captions.jsonl")
    exported = MEM.cat_file(storage.as_path(f"{bucket}/captions.jsonl").path).decode().splitlines()
    assert result["rows"] == len(exported) == 10

    data = load_benchmark("prepared", prepared, images)
    assert len(data.captions) == 10 and data.name == "prepared" and all(p.is_file() for p in data.images)


def test_urls_writes_a_remote_list_from_a_remote_folder(tmp_path, bucket):
    from caption_debias.export.urls import write_url_list

    rows = [
        {"key": f"k{i}", "image": f"https://example.org/{i}.jpg", "caption": f"A photo {i}. Red."} for i in range(5)
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([tmp_path / "t.jsonl"], f"{bucket}/p", PrepareOptions(format="table", quiet=True))
    result = write_url_list(f"{bucket}/p", f"{bucket}/list.parquet")
    listed = pq.read_table(MEM.open(storage.as_path(f"{bucket}/list.parquet").path, "rb"))
    assert result["rows"] == 5 and listed.column("url").to_pylist() == [r["image"] for r in rows]
    assert f"--url_list {bucket}/list.parquet" in result["command"]


def test_remote_image_root_is_one_line(tmp_path, bucket):
    """curate reads a URL root (issue 29; tests/test_stage_images.py): one that is not there is one
    line naming it as typed."""
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate

    _table(tmp_path / "t.jsonl")
    prepare([tmp_path / "t.jsonl"], f"{bucket}/p", PrepareOptions(format="table", quiet=True))
    with pytest.raises(UserError, match=r"^--image-root memory://\S+/images: no such folder$"):
        curate([f"{bucket}/p"], f"{bucket}/c", CurateOptions(image_root=f"{bucket}/images", quiet=True))


# ---------------------------------------------------------------- the remote lock


def _record(folder: str) -> str:
    return storage.as_path(folder).path + "/" + HOLDER_FILE


def test_remote_lock_refuses_a_second_writer_and_is_removed_after(bucket):
    folder = f"{bucket}/out"
    with folder_lock(folder, "prepare"):
        held = json.loads(MEM.cat_file(_record(folder)))
        assert held["pid"] == os.getpid() and held["command"] == "prepare" and held["token"]
        with pytest.raises(FolderLocked, match=rf"in use by caption-debias prepare \(pid {os.getpid()}\)"):
            with folder_lock(folder, "curate"):
                pytest.fail("a second writer got the lock")
    assert not MEM.exists(_record(folder))
    with pytest.raises(RuntimeError):
        with folder_lock(folder, "prepare"):
            raise RuntimeError("boom")
    assert not MEM.exists(_record(folder))  # released on error too


def test_remote_lock_of_a_dead_process_on_this_host_is_taken_at_once(bucket):
    folder = f"{bucket}/out"
    dead = {"pid": 2**22 + 12345, "host": socket.gethostname(), "command": "prepare", "since": time.time()}
    MEM.pipe_file(_record(folder), json.dumps({**dead, "heartbeat": time.time(), "token": "x"}).encode())
    with folder_lock(folder, "curate"):
        assert json.loads(MEM.cat_file(_record(folder)))["command"] == "curate"


def test_remote_lock_of_another_host_waits_until_stale(bucket, monkeypatch):
    folder = f"{bucket}/out"
    other = {"pid": 1, "host": "elsewhere", "command": "pack", "since": time.time(), "token": "x"}
    MEM.pipe_file(_record(folder), json.dumps({**other, "heartbeat": time.time() - 30}).encode())
    with pytest.raises(FolderLocked, match=r"caption-debias pack \(pid 1 on elsewhere\).*not refreshed for 600 s"):
        with folder_lock(folder, "prepare"):
            pass
    MEM.pipe_file(_record(folder), json.dumps({**other, "heartbeat": time.time() - 601}).encode())
    with folder_lock(folder, "prepare"):
        assert json.loads(MEM.cat_file(_record(folder)))["host"] == socket.gethostname()


BEAT_THREAD = "caption-debias-lock-heartbeat"


def heartbeat_reads(monkeypatch, n: int, answer=None) -> threading.Event:
    """An event set once the heartbeat has read the holder record n more times (each read after the
    first follows a refresh); `answer` replaces what the reads return."""
    done, seen, real = threading.Event(), [], locking._read_record

    def read(record):
        got = real(record) if answer is None else answer
        if threading.current_thread().name == BEAT_THREAD:
            seen.append(got)
            if len(seen) >= n:
                done.set()
        return got

    monkeypatch.setattr(locking, "_read_record", read)
    return done


def test_remote_lock_heartbeat_refreshes_and_a_takeover_fails_the_run(bucket, monkeypatch):
    monkeypatch.setattr(locking, "HEARTBEAT_S", 0.05)
    folder = f"{bucket}/out"
    with folder_lock(folder, "prepare"):
        first = json.loads(MEM.cat_file(_record(folder)))["heartbeat"]
        assert heartbeat_reads(monkeypatch, 2).wait(60)  # a beat refreshed the record, and the next began
        assert json.loads(MEM.cat_file(_record(folder)))["heartbeat"] > first
    with pytest.raises(FolderLocked, match="taken over by caption-debias curate"):
        with folder_lock(folder, "prepare"):
            thief = {"pid": 7, "host": "elsewhere", "command": "curate", "since": time.time()}
            MEM.pipe_file(_record(folder), json.dumps({**thief, "heartbeat": time.time(), "token": "t"}).encode())
            (beat,) = [t for t in threading.enumerate() if t.name == BEAT_THREAD]
            beat.join(60)  # the heartbeat ends when it finds the record taken over
            assert not beat.is_alive()
    assert json.loads(MEM.cat_file(_record(folder)))["token"] == "t"  # the other holder's record is left alone


def test_remote_lock_survives_an_unreadable_record_for_a_beat(bucket, monkeypatch):
    """A read that fails at a heartbeat (a store hiccup) is not a takeover: the run does not fail."""
    monkeypatch.setattr(locking, "HEARTBEAT_S", 0.05)
    folder = f"{bucket}/out"
    real_read = locking._read_record
    with folder_lock(folder, "prepare"):
        assert heartbeat_reads(monkeypatch, 3, answer={}).wait(60)  # three beats read nothing readable
        monkeypatch.setattr(locking, "_read_record", real_read)
    assert not MEM.exists(_record(folder))


@pytest.mark.parametrize("backend", ["refuses xb", "takes xb as wb"])
def test_remote_lock_without_exclusive_create_checks_then_reads_back(bucket, monkeypatch, backend):
    """A backend without fsspec's "x" mode, or one that writes over an object on "xb": check,
    write, read back (best effort, docs/storage.md); a live holder's record is never overwritten."""
    real_open = type(MEM).open

    def no_exclusive(self, path, mode="rb", *args, **kwargs):
        if "x" in mode:
            if backend == "refuses xb":
                raise ValueError("exclusive create not supported")
            mode = mode.replace("x", "w")
        return real_open(self, path, mode, *args, **kwargs)

    monkeypatch.setattr(type(MEM), "open", no_exclusive)
    folder = f"{bucket}/out"
    with folder_lock(folder, "prepare"):
        held = MEM.cat_file(_record(folder))
        assert json.loads(held)["pid"] == os.getpid()
        with pytest.raises(FolderLocked):
            with folder_lock(folder, "curate"):
                pass
        assert MEM.cat_file(_record(folder)) == held
    assert not MEM.exists(_record(folder))


def test_is_this_a_url_is_decided_in_storage_and_nowhere_else():
    assert storage.is_url("s3://bucket/a.jpg") and storage.is_url("https://x.org/a.jpg")
    assert storage.is_url("file:///data/a.jpg") and not storage.is_remote("file:///data/a.jpg")
    assert not storage.is_url("sam/a.jpg") and not storage.is_url("dir/http://x.jpg") and not storage.is_url("C:/a.jpg")
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pa.array(["s3://b/a.jpg", "sam/a.jpg", "dir/http://x.jpg"])
    by_arrow = pc.match_substring_regex(values, storage.URL_PATTERN).to_pylist()
    assert by_arrow == [storage.is_url(v) for v in values.to_pylist()]  # the batch form agrees
    root = Path(__file__).resolve().parents[1]
    others = [
        str(p.relative_to(root))
        for p in sorted([*(root / "caption_debias").rglob("*.py"), *(root / "cli").rglob("*.py")])
        if p.name != "storage.py" and ('"://"' in p.read_text("utf-8") or "'://'" in p.read_text("utf-8"))
    ]
    assert others == [], f"decide 'is this a URL?' with storage.is_url: {others}"
