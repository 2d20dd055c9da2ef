"""The stage runner (caption_debias/runner.py) on its own: resume state, task sidecars, atomic
writes, appended lists, count reconciliation (kept under python -O), progress and summary,
and a small stage built on it end to end (killed mid-way, resumed, pruned)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from caption_debias.errors import UserError
from caption_debias.locking import LOCK_FILES
from caption_debias.options import StageOptions
from caption_debias.progress import Progress
from caption_debias.runner import (
    CountsDoNotReconcile,
    StageFolder,
    Summary,
    WriteFailed,
    atomic_output,
    load_sidecar,
    reconcile,
    sha256_file,
    stage_run,
    write_json,
    write_shard,
)


def _folder(out: Path) -> StageFolder:
    return StageFolder(
        out, "toy", state_dir=".toy", owned=("manifest.json", "removed.jsonl", "shards"), subdirs=("shards",)
    )


def _finish_a_task(out: Path, index: int = 0) -> None:
    write_json({"index": index, "fingerprint": "f", "path": None}, out / ".toy" / f"part-{index:05d}.json")


def test_start_fresh_then_resume_refuse_other_options_and_overwrite(tmp_path):
    out = tmp_path / "out"
    folder = _folder(out)
    assert folder.start({"rows": 10}, overwrite=False) is False
    assert json.loads((out / ".toy/state.json").read_text()) == {"options": {"rows": 10}}
    assert (out / "shards").is_dir()
    _finish_a_task(out)
    (out / "manifest.json").write_text("{}")
    assert folder.start({"rows": 10}, overwrite=False) is True
    assert not (out / "manifest.json").exists()  # only a finished run has a manifest
    with pytest.raises(UserError, match=r"was written by toy with different options or from other inputs \(rows\)"):
        folder.start({"rows": 7}, overwrite=False)
    (out / ".caption-debias.lock").write_text("")
    (out / "shards/part-00000.parquet").write_bytes(b"x")
    assert folder.start({"rows": 7}, overwrite=True) is False
    assert not (out / "shards/part-00000.parquet").exists() and not (out / ".toy/part-00000.json").exists()
    assert (out / ".caption-debias.lock").exists()  # the lock files are never removed


def test_a_run_that_finished_no_task_starts_afresh_whatever_its_options(tmp_path):
    out = tmp_path / "out"
    folder = _folder(out)
    folder.start({"rows": 10}, overwrite=False)
    (out / ".manifest.json.tmp-123").write_text("half")  # a killed run's temp
    assert folder.start({"rows": 7}, overwrite=False) is False
    assert json.loads((out / ".toy/state.json").read_text())["options"] == {"rows": 7}
    assert not (out / ".manifest.json.tmp-123").exists()


def test_a_folder_of_other_files_is_refused_and_a_file_is_not_a_folder(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty and holds no toy run"):
        _folder(tmp_path / "busy").start({}, overwrite=False)
    assert _folder(tmp_path / "busy").start({}, overwrite=True) is False
    assert (tmp_path / "busy" / "notes.txt").exists()  # --overwrite removes only the stage's own files
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="exists and is not a folder"):
        with stage_run(_folder(tmp_path / "file"), StageOptions(), []):
            pass
    assert (tmp_path / "file").read_text() == "x"


def test_state_written_before_the_runner_is_read(tmp_path):
    out = tmp_path / "out"
    (out / ".toy").mkdir(parents=True)
    (out / ".toy/state.json").write_text(json.dumps({"shaping": {"rows": 3}}))  # curate's old key
    _finish_a_task(out)
    assert _folder(out).start({"rows": 3}, overwrite=False) is True


def test_atomic_output_leaves_nothing_on_failure_and_names_the_file(tmp_path):
    target = tmp_path / "a.json"
    with pytest.raises(ValueError):
        with atomic_output(target) as tmp:
            tmp.write_text("half")
            raise ValueError("killed")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(WriteFailed, match=r"nowhere/a.json: cannot write \(No such file or directory\)"):
        write_json({"a": 1}, tmp_path / "nowhere" / "a.json")
    write_json({"a": 1}, target)
    assert json.loads(target.read_text()) == {"a": 1} and [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_load_sidecar_needs_its_fingerprint_and_its_output_in_place(tmp_path):
    shard = tmp_path / "shards" / "part-00000.parquet"
    shard.parent.mkdir()
    digest = write_shard(pa.table({"a": [1, 2, 3]}), shard)
    assert digest == sha256_file(shard)
    side = {"index": 0, "fingerprint": "f", "path": "shards/part-00000.parquet", "bytes": shard.stat().st_size}
    write_json(side, tmp_path / "s.json")
    assert load_sidecar(tmp_path / "s.json", "f", tmp_path) == side
    assert load_sidecar(tmp_path / "s.json", "other", tmp_path) is None
    assert load_sidecar(tmp_path / "missing.json", "f", tmp_path) is None
    assert load_sidecar(tmp_path / "s.json", "f", tmp_path, output=tmp_path / "s.json") is None  # wrong size
    shard.write_bytes(b"cut")
    assert load_sidecar(tmp_path / "s.json", "f", tmp_path) is None
    (tmp_path / "bad.json").write_text("{not json")
    assert load_sidecar(tmp_path / "bad.json", "f", tmp_path) is None


def test_partial_lines_appear_whole_or_not_at_all(tmp_path):
    out = tmp_path / "out"
    folder = _folder(out)
    folder.start({}, overwrite=False)
    (out / "removed.jsonl").write_text("before\n")
    with pytest.raises(RuntimeError):
        with folder.partial_lines("removed.jsonl") as lines:
            lines.write({"key": "a"})
            raise RuntimeError("a task failed")
    assert (out / "removed.jsonl").read_text() == "before\n"
    with folder.partial_lines("removed.jsonl") as lines:
        lines.write_all([{"key": "a"}, {"key": "é"}])
    assert lines.count == 2
    assert (out / "removed.jsonl").read_text("utf-8") == '{"key": "a"}\n{"key": "é"}\n'
    assert not (out / ".toy/removed.jsonl.partial").exists()


def test_reconcile_raises_and_python_O_keeps_the_check():
    reconcile("toy", read=5, written=3, removed=1, rejected=1)
    with pytest.raises(CountsDoNotReconcile, match="read 5 != written 3 \\+ removed 1"):
        reconcile("toy", read=5, written=3, removed=1)
    code = "from caption_debias.runner import reconcile\nreconcile('toy', read=2, written=1)"
    done = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True)
    assert done.returncode != 0 and "CountsDoNotReconcile" in done.stderr


def test_prune_removes_what_this_run_did_not_write(tmp_path):
    out = tmp_path / "out"
    folder = _folder(out)
    folder.start({}, overwrite=False)
    for i in range(4):
        (out / f"shards/part-{i:05d}.parquet").write_bytes(b"x")
        _finish_a_task(out, i)
    (out / "shards/.part-00001.parquet.tmp-9").write_bytes(b"half")
    folder.prune({"shards/part-*.parquet": ["shards/part-00000.parquet"]}, n_tasks=2, sidecar_dirs=[".toy"])
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["part-00000.parquet"]
    assert sorted(p.name for p in (out / ".toy").iterdir()) == ["part-00000.json", "part-00001.json", "state.json"]


def test_locked_turns_an_os_error_into_one_line(tmp_path):
    folder = _folder(tmp_path / "out")
    with pytest.raises(WriteFailed, match="gone.txt: No such file or directory"):
        with folder.locked():
            open(tmp_path / "out" / "missing" / "gone.txt", "w")
    assert {p.name for p in (tmp_path / "out").iterdir()} <= LOCK_FILES


def test_progress_prints_plain_lines_off_a_terminal_and_nothing_when_quiet(capsys):
    quiet = Progress("toy", "rows", total=10, quiet=True, interval=0)
    quiet.update(5)
    quiet.close(finished=True)
    assert capsys.readouterr().err == ""
    progress = Progress("toy", "rows", total=10, interval=0)
    progress.update(5, extra="1 shards")
    progress.close(finished=True)
    lines = capsys.readouterr().err.splitlines()
    # the close prints no second line saying what the last one said
    assert len(lines) == 1 and lines[0].startswith("caption-debias toy: 5 / 10 rows (50.0%)")
    assert lines[0].endswith("1 shards")


def test_summary_prints_counts_outputs_and_reasons(capsys):
    Summary(
        "toy", "OUT", {"read": 10, "written": 8, "removed": 2}, outputs=2, reused=1, elapsed_s=2.0,
        reasons={"image_missing": 2}, details="OUT/removed.jsonl", notes=["  next: train"],
    ).print()  # fmt: skip
    err = capsys.readouterr().err
    assert "toy -> OUT" in err and "rows read 10, written 8, removed 2" in err
    assert "shards 2 (1 reused from an earlier run), 2.0 s, 5 rows/s" in err
    assert "image_missing" in err and "details: OUT/removed.jsonl" in err and "next: train" in err


# -- a whole stage on the runner: the shape prepare, curate and pack have -------------------


def _toy_stage(out: Path, n_tasks: int, fail_at: int | None = None, overwrite: bool = False) -> dict:
    """Task i writes shard i (rows of odd numbers kept, even ones removed) and its sidecar."""
    folder = _folder(out)
    with stage_run(folder, StageOptions(), []):
        resumed = folder.start({"n": "toy"}, overwrite)
        read = written = 0
        shards = []
        with folder.partial_lines("removed.jsonl") as removed:
            for index in range(n_tasks):
                sidecar = out / ".toy" / f"part-{index:05d}.json"
                side = load_sidecar(sidecar, f"task{index}", out) if resumed else None
                if side is None:
                    if index == fail_at:
                        raise RuntimeError("killed")
                    rows = list(range(index * 4, index * 4 + 4))
                    rel = f"shards/part-{index:05d}.parquet"
                    digest = write_shard(pa.table({"n": [r for r in rows if r % 2]}), out / rel)
                    side = {
                        "index": index,
                        "fingerprint": f"task{index}",
                        "path": rel,
                        "bytes": (out / rel).stat().st_size,
                        "sha256": digest,
                        "read": 4,
                        "rows": 2,
                        "removed": [{"n": r, "reason": "even"} for r in rows if not r % 2],
                    }
                    write_json(side, sidecar)
                read += side["read"]
                written += side["rows"]
                removed.write_all(side["removed"])
                shards.append(side["path"])
        folder.prune({"shards/part-*.parquet": shards}, n_tasks, sidecar_dirs=[".toy"])
        reconcile("toy", read=read, written=written, removed=removed.count)
        manifest = {"read": read, "written": written, "removed": removed.count, "shards": shards}
        write_json(manifest, out / "manifest.json")
    return manifest


def test_a_stage_killed_mid_way_resumes_with_its_finished_tasks(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="killed"):
        _toy_stage(out, 4, fail_at=2)
    assert not (out / "manifest.json").exists() and not (out / "removed.jsonl").exists()
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "shards").iterdir()}
    assert sorted(stamps) == ["part-00000.parquet", "part-00001.parquet"]
    manifest = _toy_stage(out, 4)
    assert manifest["read"] == 16 and manifest["written"] == 8 and manifest["removed"] == 8
    assert {p: (out / "shards" / p).stat().st_mtime_ns for p in stamps} == stamps  # reused, not redone
    assert len((out / "removed.jsonl").read_text().splitlines()) == 8
    shorter = _toy_stage(out, 2)  # a shorter run leaves no shard or sidecar of the longer one behind
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
    assert shorter["shards"] == ["shards/part-00000.parquet", "shards/part-00001.parquet"]
    assert not (out / ".toy/part-00003.json").exists()
    assert sorted(os.listdir(out / ".toy")) == ["part-00000.json", "part-00001.json", "state.json"]


def test_work_names_what_makes_a_run_worth_resuming(tmp_path):
    out = tmp_path / "out"
    folder = StageFolder(
        out, "toy", state_dir=".toy", owned=("shards",), subdirs=("shards",), work=("shards/*.parquet",)
    )
    folder.start({"rows": 10}, overwrite=False)
    _finish_a_task(out)  # a task that wrote no shard (every row rejected)
    assert folder.start({"rows": 7}, overwrite=False) is False  # nothing to keep: other options start afresh
    (out / "shards/part-00000.parquet").write_bytes(b"x")
    with pytest.raises(UserError, match="different options"):
        folder.start({"rows": 10}, overwrite=False)


# -- the one skeleton: every stage runs in stage_run ----------------------------------------------

STAGE_MODULES = ("prepare/run.py", "curate/run.py", "score/run.py", "pack/run.py", "ablate/run.py")
SKELETON_CALLS = ("locked", "runtime", "require_shared", "refuse_overlap", "check_not_a_file")


def skeleton_calls_outside_the_runner(package: Path) -> list[str]:
    """Calls of the skeleton's pieces (the lock, the engine's runtime, the storage and overlap checks) by a stage
    module itself: each is stage_run's, so a stage assembling its own would drift from the others."""
    import ast

    found = []
    for rel in STAGE_MODULES:
        tree = ast.parse((package / rel).read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in SKELETON_CALLS:
                    found.append(f"{rel}:{node.lineno}: {node.func.attr}()")
    return found


def test_every_stage_runs_in_the_one_skeleton():
    package = Path(__file__).resolve().parents[1] / "caption_debias"
    assert skeleton_calls_outside_the_runner(package) == []
    for rel in STAGE_MODULES:
        assert "stage_run(" in (package / rel).read_text("utf-8"), rel


def test_the_skeleton_scan_finds_a_stage_that_locks_by_itself(tmp_path):
    for rel in STAGE_MODULES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("with stage_run(folder, options, inputs):\n    pass\n")
    (tmp_path / "pack/run.py").write_text("with folder.locked(), engines.runtime(options):\n    pass\n")
    assert skeleton_calls_outside_the_runner(tmp_path) == ["pack/run.py:1: locked()", "pack/run.py:1: runtime()"]


def test_stage_run_checks_once_refuses_overlap_and_names_an_os_error(tmp_path, monkeypatch):
    calls = []
    real = StageFolder.check_not_a_file
    monkeypatch.setattr(StageFolder, "check_not_a_file", lambda self: calls.append(self.out) or real(self))
    out = tmp_path / "out"
    (tmp_path / "in").mkdir()
    manifest = _toy_stage(out, 2)
    assert manifest["read"] == 8 and calls == [out]  # once a run (it was three times: before, in locked, in start)
    with pytest.raises(UserError, match="is inside the input"):
        with stage_run(_folder(tmp_path / "in" / "out"), StageOptions(), [tmp_path / "in"]):
            pass
    assert not (tmp_path / "in" / "out").exists()  # refused before the lock made the folder
    with pytest.raises(UserError, match="--workers"):
        with stage_run(_folder(tmp_path / "w"), StageOptions(workers=0), []):
            pass  # the options are validated first
    with pytest.raises(WriteFailed, match="gone.txt: No such file or directory"):
        with stage_run(_folder(tmp_path / "w"), StageOptions(), []):
            open(tmp_path / "w" / "missing" / "gone.txt", "w")


def test_curate_and_pack_check_their_options_once_a_run(tmp_path, monkeypatch):
    """The skeleton (stage_run) is the one place a stage's options are checked: image_source.stage_root
    only resolves the root (it checked them too, so every curate and pack run validated twice)."""
    from collections import Counter

    from curate_fixtures import make_world

    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack

    calls: Counter = Counter()
    for cls in (CurateOptions, PackOptions):
        real = cls.validate
        monkeypatch.setattr(cls, "validate", lambda self, real=real: calls.update([type(self).__name__]) or real(self))
    world = make_world(tmp_path / "world")
    root = str(world["images"])
    curated = tmp_path / "curated"
    curate([world["prepared"]], curated, CurateOptions(image_root=root, quiet=True))
    assert calls == {"CurateOptions": 1}  # a root given
    pack(curated, tmp_path / "packed", PackOptions(image_size=32, quiet=True))
    assert calls == {"CurateOptions": 1, "PackOptions": 1}  # the root curate recorded
    with pytest.raises(UserError, match="--samples-per-shard"):
        pack(curated, tmp_path / "refused", PackOptions(image_root=root, samples_per_shard=0, quiet=True))
    assert calls["PackOptions"] == 2 and not (tmp_path / "refused").exists()
