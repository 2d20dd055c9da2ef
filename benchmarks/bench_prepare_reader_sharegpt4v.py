"""The ShareGPT4V array reader against streaming JSON libraries: speed, and records kept after a fault.

Writes a ShareGPT4V-layout JSON array of --records elements (real long captions when --data
is given), then
  speed:    elements/s (CPU time) of readers.sharegpt4v.iter_array, json.load of the whole file (the
            baseline: not streaming), and ijson.items / json_stream.load when importable;
  recovery: one broken element 10% into the array (a raw tab inside a caption; a stray
            character between two elements): how many of the good elements after it each
            reader still yields.
  against:  with --against REV, iter_array as it is at git revision REV, timed in the same
            process, alternating with today's (CPU time; min and median of --repeats x 2).
ijson and json-stream are not dependencies; install them anywhere importable to compare, e.g.
    pip install --target /tmp/jsonlibs ijson json-stream
    PYTHONPATH=/tmp/jsonlibs .venv/bin/python benchmarks/bench_prepare_reader_sharegpt4v.py
    .venv/bin/python benchmarks/bench_prepare_reader_sharegpt4v.py --against main --repeats 4
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _common import add_data_option, import_at, long_captions


def captions(data: Path, n: int) -> list[str]:
    caps = long_captions(data)
    return [caps[i % len(caps)] for i in range(n)]


def element(i: int, caption: str) -> dict:
    return {
        "id": f"r{i}",
        "image": f"sam/images/sa_{i}.jpg",
        "conversations": [
            {"from": "human", "value": "<image>\nWhat is this photo about?"},
            {"from": "gpt", "value": caption},
        ],
    }


def read_ours(path: Path) -> list[str]:
    from caption_debias.readers.sharegpt4v import iter_array
    from caption_debias.records import Reject

    return [item[1]["id"] for item in iter_array(path) if not isinstance(item, Reject)]


def read_json_load(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            return [e["id"] for e in json.load(fh)]
    except ValueError:
        return []


def read_ijson(path: Path) -> list[str]:
    import ijson

    ids = []
    try:
        with open(path, "rb") as fh:
            for e in ijson.items(fh, "item"):
                ids.append(e["id"])
    except ijson.JSONError:
        pass
    return ids


def read_json_stream(path: Path) -> list[str]:
    import json_stream

    ids = []
    try:
        with open(path, encoding="utf-8") as fh:
            for e in json_stream.load(fh):
                ids.append(e["id"])
    except ValueError:
        pass
    return ids


def available() -> dict:
    readers = {"iter_array (ours)": read_ours, "json.load (whole file)": read_json_load}
    for name, fn, module in (
        ("ijson.items", read_ijson, "ijson"),
        ("json_stream.load", read_json_stream, "json_stream"),
    ):
        try:
            mod = __import__(module)
        except ImportError:
            print(f"{name}: not importable, skipped")
            continue
        label = name + (f" ({mod.backend})" if module == "ijson" else "")
        readers[label] = fn
    return readers


def against(rev: str, path: Path, n: int, repeats: int, tmp: str) -> None:
    """Today's iter_array against REV's, in this process, alternating (the box's load hits both alike)."""
    from caption_debias.readers import sharegpt4v as today

    old = import_at(rev, "caption_debias.readers.sharegpt4v", Path(tmp) / "rev")
    times: dict[str, list[float]] = {"today": [], rev: []}
    for r in range(2 * repeats):
        order = [("today", today), (rev, old)] if r % 2 else [(rev, old), ("today", today)]
        for label, module in order:
            t0 = time.process_time()
            count = sum(1 for _ in module.iter_array(path))
            times[label].append(time.process_time() - t0)
            assert count == n, (label, count)
    for label, values in times.items():
        values.sort()
        print(f"  iter_array at {label:8s} CPU min {values[0]:.3f} s  median {values[len(values) // 2]:.3f} s")
    ratio = sorted(times["today"])[repeats] / sorted(times[rev])[repeats]
    print(f"  today / {rev}: {ratio:.3f}x (median CPU)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_option(ap)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3, help="best of N timings")
    ap.add_argument("--against", metavar="REV", help="also time iter_array as it is at this git revision")
    args = ap.parse_args()
    n = args.records
    elements = [element(i, c) for i, c in enumerate(captions(args.data, n))]
    text = json.dumps(elements, ensure_ascii=False)
    readers = available()
    with tempfile.TemporaryDirectory() as tmp:
        good = Path(tmp) / "good.json"
        good.write_text(text, encoding="utf-8")
        print(f"{n} elements, {good.stat().st_size / 1e6:.1f} MB")
        if args.against:
            print(f"\niter_array today against {args.against}")
            against(args.against, good, n, args.repeats, tmp)
        print("\nspeed (CPU time, best of %d)" % args.repeats)
        ours_s = None
        for name, fn in readers.items():
            best = float("inf")
            for _ in range(args.repeats):
                t0 = time.process_time()
                got = fn(good)
                best = min(best, time.process_time() - t0)
            assert len(got) == n, (name, len(got))
            ours_s = ours_s or best
            print(f"  {name:32s} {n / best:10,.0f} elements/s  {best:6.2f} s CPU  vs ours {best / ours_s:5.2f}x")

        bad_at = n // 10
        key = f'{{"id": "r{bad_at}"'
        cut = text.index(key)
        faults = {
            "raw tab in a caption": text[:cut] + text[cut:].replace('"value": "', '"value": "\t', 2),
            "stray character between elements": text[: cut - 2] + " x" + text[cut - 2 :],
        }
        print(f"\nrecovery: one broken element at {bad_at} of {n}; good elements after it: {n - bad_at - 1}")
        for fault, broken in faults.items():
            path = Path(tmp) / "bad.json"
            path.write_bytes(broken.encode("utf-8"))
            print(f"  {fault}")
            for name, fn in readers.items():
                ids = fn(path)
                after = sum(1 for i in ids if int(i[1:]) > bad_at)
                print(f"    {name:32s} kept {len(ids):8,d} of {n:,d}; after the fault {after:8,d}")
            del path
        print("\nbyte offsets per element: iter_array yes; json.load, ijson.items, json_stream.load no")


if __name__ == "__main__":
    main()
