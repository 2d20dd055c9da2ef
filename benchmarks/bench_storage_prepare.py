"""`prepare` on remote storage against the same run on local files, one process each.

Writes a JSON-lines table of real long captions (the calibration captions, repeated with fresh
keys up to --rows) and a ShareGPT4V-style JSON array of the same rows, then times
`prepare(..., workers=1)` in a fresh interpreter per run, alternating:
  local:   input and output folder on the local disk (the baseline)
  memory:  input and output on fsspec's memory:// (the remote code path: buffered fsspec
           reads, shards staged locally and put whole, the lock object; no network cost)
  s3:      with --s3, input and output on moto's S3 server on 127.0.0.1 (s3fs's HTTP path,
           real PUTs and ranged GETs on loopback; needs s3fs and moto[server])
and prints each run's wall and CPU seconds (CPU includes interpreter start-up and imports; with
s3 the moto server runs in the same process and its CPU is counted) and the ratio to local.

    .venv/bin/python benchmarks/bench_storage_prepare.py --rows 20000 --shard-rows 2000 --repeat 2 --s3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from _common import add_data_option, long_captions


def _run(kind: str, table: str, fmt: str, shard_rows: int, queue) -> None:
    import logging

    import fsspec

    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    server = None
    if kind == "local":
        source, out = table, str(Path(table).parent / f"out-{uuid.uuid4().hex[:6]}")
    elif kind == "memory":
        fs = fsspec.filesystem("memory")
        fs.put_file(table, f"/bench/{Path(table).name}")
        source, out = f"memory://bench/{Path(table).name}", "memory://bench/out"
    else:
        import os

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        os.environ.update(
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ENDPOINT_URL=f"http://{host}:{port}",
        )
        fs = fsspec.filesystem("s3")
        fs.mkdir("bench")
        fs.put_file(table, f"bench/{Path(table).name}")
        source, out = f"s3://bench/{Path(table).name}", "s3://bench/out"
    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    manifest = prepare([source], out, PrepareOptions(format=fmt, shard_rows=shard_rows, workers=1, quiet=True))
    dt = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
    if server is not None:
        server.stop()
    queue.put((dt, cpu, manifest["counts"]["written"], [s["sha256"] for s in manifest["shards"]]))


def timed(kind: str, table: Path, fmt: str, shard_rows: int) -> tuple[float, float, int, list[str]]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_run, args=(kind, str(table), fmt, shard_rows, q))
    p.start()
    result = q.get()
    p.join()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--shard-rows", type=int, default=2000, help="rows per shard (each shard is one upload)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each kind, alternated")
    ap.add_argument("--s3", action="store_true", help="also time s3:// on moto's loopback server")
    args = ap.parse_args()
    caps = long_captions(args.data)
    work = Path(tempfile.mkdtemp(prefix="bench-storage-"))
    rows = [{"key": f"k{i}", "image": f"img/{i}.jpg", "caption": caps[i % len(caps)]} for i in range(args.rows)]
    (work / "table.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    share = [
        {"id": r["key"], "image": r["image"], "conversations": [{"from": "gpt", "value": r["caption"]}]} for r in rows
    ]
    (work / "sharegpt4v.json").write_text(json.dumps(share), "utf-8")
    kinds = ["local", "memory"] + (["s3"] if args.s3 else [])
    for name, fmt in (("table.jsonl", "table"), ("sharegpt4v.json", "sharegpt4v")):
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
        digests: dict[str, list[str]] = {}
        for _ in range(args.repeat):
            for kind in kinds:
                dt, cpu, written, shas = timed(kind, work / name, fmt, args.shard_rows)
                times[kind].append((dt, cpu))
                digests[kind] = shas
        base_wall = statistics.median(t[0] for t in times["local"])
        base_cpu = statistics.median(t[1] for t in times["local"])
        print(f"{name}: {args.rows} rows, {written} written, {args.shard_rows} rows a shard, median of {args.repeat}")
        for kind in kinds:
            wall = statistics.median(t[0] for t in times[kind])
            cpu = statistics.median(t[1] for t in times[kind])
            print(
                f"  {kind:6s} {wall:6.2f} s wall ({wall / base_wall:4.2f}x local), "
                f"{cpu:6.2f} s CPU ({cpu / base_cpu:4.2f}x local), {args.rows / cpu:7.0f} rows/CPU s"
            )
        # the input file's name is in each row's meta, so shards differ by path between kinds; counts must not
        print(f"  shards per kind: {', '.join(f'{k} {len(v)}' for k, v in digests.items())}")


if __name__ == "__main__":
    main()
