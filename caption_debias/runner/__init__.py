"""The stage runner: what every stage that writes a folder of shards shares (prepare, curate, pack, score, ablate).

Modelled on datatrove's executor: a stage is a list of numbered tasks (one input chunk or
shard each) whose results are written under their final names only when whole, each
finished task leaves a small JSON sidecar (its completion record: counts, digest, a
fingerprint of what it was made from), and a rerun skips every task whose sidecar matches.
The stage then gathers the sidecars in task order, writes its appended lists, checks that
its counts reconcile and writes its manifest last.

By role: `stage.py` (`stage_run`, the one skeleton), `folder.py` (`StageFolder`, `PartialLines`),
`tasks.py` (`Task`, `run_tasks`, sidecars, `fingerprint`, `manifest_stamp`, `reconcile`), `writes.py`
(atomic writes, `WriteFailed`), `summary.py` (`Summary`). Import them from here.

One stage run, in order::

    from caption_debias import engines
    from caption_debias.progress import Progress
    from caption_debias.runner import StageFolder, Summary, Task, reconcile, run_tasks, stage_run, write_json

    folder = StageFolder(out, "score", state_dir=".score", owned=("manifest.json", "removed.jsonl", "shards"),
                         subdirs=("shards",), verb="scored")
    with stage_run(folder, options, inputs):          # checked, locked, engine up; OSError -> one line
        folder.start(shaping, overwrite)                 # folder.resumed: same options as the run before
        tasks = (Task(i, str(out), fingerprint(...), f".score/shards/part-{i:05d}.json", work=shard) for ...)
        progress = Progress("score", "rows", total=n_rows, quiet=quiet, interval=log_interval)
        with folder.partial_lines("removed.jsonl") as removed:   # OUT/.score/removed.jsonl.partial
            def on_side(task, side):                     # in task order; a worker wrote the output, then `side`
                tally.add(task.work, side)               # a tally object: counts, removals, outputs
                removed.write_all(side["removed"])
                progress.update(tally.read, extra=f"{len(tally.shards)} shards")
            reused = run_tasks(folder, tasks, fn, engines.mapper(options), on_side, progress)
        folder.prune({"shards/part-*.parquet": written_paths}, n_tasks, sidecar_dirs=[".score/shards"])
        reconcile("score", read=read, written=written, removed=removed.count)
        write_json({**manifest, **manifest_stamp(elapsed)}, out / "manifest.json")   # last: only a finished run has one
    Summary("score", str(out), {"read": read, "written": written, "removed": removed.count}).print()

What each piece guarantees:

- `stage_run(folder, options, inputs)`: the options validated, the output's storage checked,
  no input overlapping the output, the output not a file, then `StageFolder.locked()` and
  `engines.runtime(options)` around the body; once each, for every stage.
- `StageFolder.locked()`: `locking.folder_lock` for the whole run (a second writer is
  refused at once, a killed one never blocks), and an OS error outside the atomic writers
  (which name their file themselves) becomes one `WriteFailed` line naming the file.
- `StageFolder.start(shaping, overwrite)` (`work=`: globs of the outputs that make a run
  worth resuming; default any task sidecar): resume state in `OUT/<state_dir>/state.json`
  (`{"options": shaping}`, the options that shape the output). A run is resumed only when
  that state is there and it left work worth keeping (by default a task sidecar):
  with other options it is refused in one line naming them, unless `overwrite`. Anything
  else starts afresh: the stage's own files are removed (never the lock files), a folder
  holding files of its own is refused unless `overwrite`. The manifest is removed either
  way (only a finished run has one).
- `atomic_output`, `write_shard`, `write_json`, `write_text`: write a temp name, fsync,
  rename (a remote folder: a local file put under its final name, where it appears whole);
  a failed write removes its temp and raises `WriteFailed` naming the file.
- `Task`, `run_tasks`: a task is what a worker gets (`work`, typed) and how a rerun knows it
  is done (its sidecar and fingerprint); `run_tasks` passes every task a resumed folder finished
  before (`Task.finished`) through without running it, runs the others on the engine
  (caption_debias/engines: `engines.mapper(options)`) and hands each sidecar back in task order.
- `load_sidecar`: a finished task's sidecar, when its fingerprint matches and the file it
  names (`side["path"]` under OUT, or `output`) is there with the recorded size.
- `fingerprint`, `manifest_stamp`, `shard_name`, `part_name`: what an output is made from as one
  digest; a manifest's last keys; `shards/part-NNNNN.parquet`; a task's `DIR/part-NNNNN.json`.
- `StageFolder.partial_lines(name)`: a JSON-lines list (rejects, removals) appended in task
  order to `OUT/<state_dir>/<name>.partial` (a local temp for a remote folder), written
  to `OUT/<name>` whole when the block ends without an error.
- `reconcile(stage, read=..., written=..., removed=..., rejected=...)`: raises
  `CountsDoNotReconcile` unless `read == written + removed + rejected` (an error, so
  `python -O` keeps the check).
- Progress is not the runner's: every command shares `caption_debias.progress.Progress`
  (a rich bar on a terminal, plain lines every `--log-interval` seconds off it, nothing when quiet).
- `Summary`: the end-of-run lines (counts, outputs, time, rate, reasons, where the details are).
"""

from __future__ import annotations

from caption_debias.runner.folder import MANIFEST, PARTIAL, STATE_FILE, PartialLines, StageFolder
from caption_debias.runner.stage import stage_run
from caption_debias.runner.summary import Summary, rate_text
from caption_debias.runner.tasks import (
    SHARDS_DIR,
    CountsDoNotReconcile,
    Engine,
    Task,
    fingerprint,
    load_sidecar,
    manifest_stamp,
    part_name,
    reconcile,
    run_tasks,
    shard_name,
)
from caption_debias.runner.writes import (
    TEMP_MARK,
    WriteFailed,
    atomic_output,
    is_temp,
    os_error_text,
    sha256_file,  # the digest manifests record and readers check
    temp_path,
    write_json,
    write_shard,
    write_text,
)

__all__ = [
    "MANIFEST",
    "PARTIAL",
    "SHARDS_DIR",
    "STATE_FILE",
    "TEMP_MARK",
    "CountsDoNotReconcile",
    "Engine",
    "PartialLines",
    "StageFolder",
    "Summary",
    "Task",
    "WriteFailed",
    "atomic_output",
    "fingerprint",
    "is_temp",
    "load_sidecar",
    "os_error_text",
    "rate_text",
    "reconcile",
    "run_tasks",
    "sha256_file",
    "part_name",
    "shard_name",
    "stage_run",
    "manifest_stamp",
    "temp_path",
    "write_json",
    "write_shard",
    "write_text",
]
