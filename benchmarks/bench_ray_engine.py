"""The Ray engine's task scheduler: Ray Data windows (as of --baseline, main before the switch) against plain Ray tasks.

Both run the same stage functions; only how tasks reach the cluster differs. Ray Data
(`engines.ray.ray_ordered_map` at the --baseline revision, imported beside this checkout): each window
of 2 x CPUs tasks is a dataset with one block per task (pickled rows, the next window read on a
thread), and a window ends with its slowest task. Tasks (this checkout's `ray_ordered_map`): `ray.remote` per task, a new one started
as soon as any finishes (`ray.wait`), at most a window running. One local `ray.init` (--cpus) for
the whole script; prepare of the real long captions (--shard-rows per task), then curate of that
folder (signals and write steps, text only, and the key group-by), each scheduler --repeats times,
interleaved. Prints wall seconds and the driver's CPU seconds (user+sys; the workers' are not
counted) per run, the best of each, their ratio, and whether both wrote the same bytes.

    .venv/bin/python benchmarks/bench_ray_engine.py --out /tmp/bre --repeats 3 --baseline ac61c1f
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import add_data_option, import_at, long_captions  # noqa: E402

TIMED = {"created", "elapsed_s", "manifest_sha256", "input_manifests", "fingerprint", "engine", "workers"}


def digests(folder: Path) -> dict[str, str]:
    """sha256 of every file (lock files aside; JSON without time keys and runtime options)."""

    def timeless(v):
        if isinstance(v, dict):
            return {k: timeless(x) for k, x in v.items() if k not in TIMED}
        return [timeless(x) for x in v] if isinstance(v, list) else v

    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and not rel.startswith(".caption-debias.lock"):
            data = path.read_bytes()
            if path.suffix == ".json":
                data = json.dumps(timeless(json.loads(data)), sort_keys=True).encode()
            out[rel] = hashlib.sha256(data).hexdigest()
    return out


def run_once(name: str, table: Path, out: Path, args) -> tuple[float, float, dict[str, str]]:
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.engines import ray as ray_engine
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    ray_engine.ray_ordered_map = SCHEDULERS[name]  # what engines.mapper hands every stage
    shutil.rmtree(out, ignore_errors=True)
    t0, c0 = time.perf_counter(), os.times()
    common = dict(quiet=True, engine="ray", workers=args.cpus)
    prepare([table], out / "prepared", PrepareOptions(format="table", shard_rows=args.shard_rows, **common))
    curate([out / "prepared"], out / "curated", CurateOptions(**common))
    c1 = os.times()
    wall, cpu = time.perf_counter() - t0, (c1.user - c0.user) + (c1.system - c0.system)
    return wall, cpu, {**digests(out / "prepared"), **{f"c/{k}": v for k, v in digests(out / "curated").items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--shard-rows", type=int, default=40)
    ap.add_argument("--baseline", default="ac61c1f", help="a revision whose ray_ordered_map is Ray Data's windows")
    args = ap.parse_args()
    import ray

    from caption_debias.engines import ray as ray_engine

    before = import_at(args.baseline, "caption_debias.engines.ray", args.out / "baseline")
    SCHEDULERS.update(data=before.ray_ordered_map, tasks=ray_engine.ray_ordered_map)
    args.out.mkdir(parents=True, exist_ok=True)
    table = args.out / "captions.jsonl"
    caps = long_captions(args.data)
    table.write_text("".join(json.dumps({"image": f"{i}.jpg", "caption": c}) + "\n" for i, c in enumerate(caps)))
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray_engine._quiet_data_context()
    print(
        f"{len(caps)} captions, {len(caps) // args.shard_rows + 1} tasks a step, {args.cpus} CPUs; load {os.getloadavg()}"
    )
    runs: dict[str, list[tuple[float, float]]] = {"data": [], "tasks": []}
    outputs = {}
    run_once("data", table, args.out / "warm", args)  # Ray's workers and imports warm for both
    for r in range(args.repeats):
        for name in ("data", "tasks") if r % 2 == 0 else ("tasks", "data"):
            wall, cpu, outputs[name] = run_once(name, table, args.out / "run", args)  # one place: outputs record paths
            runs[name].append((wall, cpu))
            print(f"  {name:5s} run {r}: {wall:6.2f} s wall, {cpu:6.2f} s driver CPU")
    best = {n: min(w for w, _ in v) for n, v in runs.items()}
    print(
        f"best: Ray Data {best['data']:.2f} s, tasks {best['tasks']:.2f} s, tasks / Ray Data {best['tasks'] / best['data']:.2f}"
    )
    differ = [
        k
        for k in sorted(set(outputs["data"]) | set(outputs["tasks"]))
        if outputs["data"].get(k) != outputs["tasks"].get(k)
    ]
    print("same bytes:", not differ, f"({len(outputs['tasks'])} files)", *differ[:5])
    print(f"load after: {os.getloadavg()}")
    ray.shutdown()


SCHEDULERS: dict = {}

if __name__ == "__main__":
    main()
