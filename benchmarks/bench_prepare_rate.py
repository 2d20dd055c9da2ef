"""Whole-`prepare` rate against a plain pysbd loop over the same captions, one process each.

Writes a JSON-lines table of real long captions (the calibration captions, repeated with
fresh keys up to --rows; with --mix shuffled every row after the first pass is a distinct
caption: the same sentences in a new order), then times:
  baseline: `for caption in captions: pysbd.Segmenter(language="en", clean=False).segment(caption)`
            over --pysbd-rows rows spread evenly over the same table
  prepare:  caption_debias.prepare.run.prepare([table], out, PrepareOptions(format="table", workers=1))
            (read, split, detect summaries, tokenize, write Parquet + manifest)
and prints both rates and their ratio, plus prepare's peak memory (of a child process that
only runs prepare, so the baseline does not count).

The whole-run figure holds prepare's start-up (interpreter, imports, vocabulary), which a run
of millions of rows pays once. So a prepare of the table's first row in a fresh process is
timed as well: start-up is its CPU, and the steady rate is (rows - 1) / (whole - start-up),
set against the pysbd loop, whose import is not timed either. --bytecode says how modules
load: `as-is` leaves the environment alone (this box sets PYTHONDONTWRITEBYTECODE=1 and the
venv holds no .pyc, so every run compiles every module it imports); `cached` gives each
child a compiled-bytecode folder (PYTHONPYCACHEPREFIX) filled by one untimed warm-up run,
as an installed package loads (pip compiles at install; Python writes .pyc on first import).

--against REV times the code at git revision REV too, in --pairs alternating pairs (REV
first), each pair with its own pysbd loop; load averages are printed with every pair.

    .venv/bin/python benchmarks/bench_prepare_rate.py --rows 20000 --mix shuffled
    .venv/bin/python benchmarks/bench_prepare_rate.py --rows 20000 --mix shuffled --against main --pairs 3
    PYTHONPATH=/path/to/other/checkout .venv/bin/python benchmarks/bench_prepare_rate.py ...   # time other code
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import add_data_option, code_at, long_captions


def table_captions(caps: list[str], rows: int, mix: str) -> list[str]:
    """Row i holds caption i % len(caps); with mix 'shuffled', pass r > 0 over the captions
    holds each caption's sentences (pysbd's) in a seeded new order, joined by spaces, so no
    caption string repeats and caches keyed by caption or sentence lists gain nothing."""
    if mix == "repeat" or rows <= len(caps):
        return [caps[i % len(caps)] for i in range(rows)]
    import random

    import pysbd

    seg = pysbd.Segmenter(language="en", clean=False)
    sentences = [[t.strip() for t in seg.segment(c) if t.strip()] for c in caps]
    out = []
    for i in range(rows):
        r, j = divmod(i, len(caps))
        if r == 0:
            out.append(caps[j])
            continue
        order = sentences[j][:]
        random.Random(i).shuffle(order)
        out.append(" ".join(order))
    return out


def pysbd_rate(captions: list[str], limit: int) -> float:
    import pysbd

    seg = pysbd.Segmenter(language="en", clean=False)
    step = max(1, len(captions) // limit)
    sample = captions[::step][:limit]
    t0, c0 = time.perf_counter(), time.process_time()
    for c in sample:
        seg.segment(c)
    return len(sample) / (time.perf_counter() - t0), len(sample) / (time.process_time() - c0)


# A prepare in a fresh interpreter (imports are timed, peak memory is prepare's own); argv:
# table, output, segmenter, code folder to import first ("" for the installed one).
CHILD = """
import json, resource, sys, time
if sys.argv[4]:
    sys.path.insert(0, sys.argv[4])
import caption_debias
from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare.run import prepare
t0 = time.perf_counter()
manifest = prepare([sys.argv[1]], sys.argv[2], PrepareOptions(format="table", workers=1, quiet=True, overwrite=True,
                                                             segmenter=sys.argv[3]))
dt = time.perf_counter() - t0
own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime  # includes interpreter start-up and imports
with open("/proc/self/status") as fh:
    rss = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024
print(json.dumps([dt, cpu, manifest, rss, str(caption_debias.__file__).rsplit("/", 1)[0]]))
"""


def prepare_rate(table: Path, out: Path, segmenter: str, env: dict[str, str | None] | None = None) -> tuple:
    """(wall s, CPU s, manifest, peak RSS MiB, code folder) of one prepare in a fresh
    interpreter, its environment changed by `env` (None removes a variable; "code" is the
    folder to import caption_debias from)."""
    env = dict(env or {})
    code = env.pop("code", None) or ""
    child = {k: v for k, v in os.environ.items() if k not in env}
    child.update({k: v for k, v in env.items() if v is not None})
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(table), str(out), segmenter, code],
        env=child,
        cwd=out.parent,  # `python -c` puts the working folder first on sys.path
        capture_output=True,
        text=True,
        check=True,
    )
    return tuple(json.loads(done.stdout.strip().splitlines()[-1]))


def write_table(path: Path, captions: list[str]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for i, caption in enumerate(captions):
            fh.write(json.dumps({"key": f"c{i}", "image": f"img/{i}.jpg", "caption": caption}) + "\n")
    return path


def child_env(code: str | None, bytecode: str, tmp: Path) -> dict[str, str | None]:
    """The environment of a prepare child: PYTHONPATH for other code, and with --bytecode
    cached a compiled-bytecode folder of its own (filled by a warm-up run first)."""
    env: dict[str, str | None] = {"code": code}
    if bytecode == "cached":
        env.update(PYTHONPYCACHEPREFIX=str(tmp / f"pyc-{abs(hash(code))}"), PYTHONDONTWRITEBYTECODE=None)
    return env


def time_code(tables: tuple[Path, Path, int], out: Path, segmenter: str, env: dict) -> dict:
    """One whole run and one first-row run (start-up) of the code `env` points at."""
    table, one_row, rows = tables
    dt, cpu, manifest, rss, code = prepare_rate(table, out, segmenter, env)
    _, cpu1, _, _, _ = prepare_rate(one_row, out.with_name(out.name + "-1"), segmenter, env)
    return {
        "dt": dt,
        "cpu": cpu,
        "startup": cpu1,
        "steady": (rows - 1) / max(cpu - cpu1, 1e-9),
        "rss": rss,
        "code": code,
        "manifest": manifest,
    }


def report(label: str, r: dict, rows: int, base: tuple[float, float], segmenter: str) -> None:
    base_wall, base_cpu = base
    dt, cpu = r["dt"], r["cpu"]
    print(f"[{label}] code: {r['code']}")
    print(
        f"[{label}] prepare --segmenter {segmenter} --workers 1 (whole run, incl. start-up): "
        f"{rows / dt:8.0f} captions/s wall ({dt:.1f} s), {rows / cpu:8.0f} captions/s CPU ({cpu:.2f} s)"
    )
    print(
        f"[{label}] ratio prepare / pysbd loop: {rows / dt / base_wall:.1f}x wall, {rows / cpu / base_cpu:.1f}x CPU "
        "(CPU time is the fairer figure on a shared machine)"
    )
    print(
        f"[{label}] start-up (first row alone, fresh process): {r['startup']:.2f} s CPU; steady state "
        f"{r['steady']:8.0f} captions/s CPU = {r['steady'] / base_cpu:.1f}x the pysbd loop"
    )
    print(f"[{label}] prepare peak RSS: {r['rss']:.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--rows", type=int, default=20000, help="captions in the prepared table")
    ap.add_argument("--pysbd-rows", type=int, default=1500, help="captions timed in the pysbd loop")
    ap.add_argument("--segmenter", default="fast", help="segmenter for prepare (fast, pysbd, spacy)")
    ap.add_argument(
        "--mix",
        choices=("repeat", "shuffled"),
        default="repeat",
        help="repeat: the calibration captions cycled; shuffled: later passes reorder each caption's sentences (no caption repeats)",
    )
    ap.add_argument("--bytecode", choices=("as-is", "cached"), default="as-is", help="how modules load (see above)")
    ap.add_argument("--against", metavar="REV", help="also time the code at this git revision, alternating")
    ap.add_argument("--pairs", type=int, default=1, help="with --against: alternating pairs")
    args = ap.parse_args()

    caps = long_captions(args.data)
    rows_text = table_captions(caps, args.rows, args.mix)
    rows = args.rows
    print(
        f"captions: {len(caps)} real long captions, {rows} rows in the table, {len(set(rows_text))} distinct (--mix {args.mix}); "
        f"bytecode {args.bytecode}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tables = (write_table(tmp / "captions.jsonl", rows_text), write_table(tmp / "one.jsonl", rows_text[:1]), rows)
        codes: list[tuple[str, str | None]] = [("this checkout", None)]
        if args.against:
            codes.insert(0, (args.against, str(code_at(args.against, tmp / "rev"))))
        envs = {label: child_env(code, args.bytecode, tmp) for label, code in codes}
        if args.bytecode == "cached":  # fill each bytecode folder, untimed
            for label, _ in codes:
                prepare_rate(tables[1], tmp / "warm", args.segmenter, envs[label])
        for pair in range(args.pairs if args.against else 1):
            base = pysbd_rate(rows_text, args.pysbd_rows)
            print(f"-- pair {pair + 1}: load average {os.getloadavg()[0]:.1f}")
            print(
                f"pysbd loop (segment only, {args.pysbd_rows} rows spread over the table): "
                f"{base[0]:8.0f} captions/s wall, {base[1]:8.0f} captions/s CPU"
            )
            for label, _ in codes:
                r = time_code(tables, tmp / "out", args.segmenter, envs[label])
                report(label, r, rows, base, args.segmenter)
            print(f"   load average after the pair {os.getloadavg()[0]:.1f}")
    counts = {k: v for k, v in r["manifest"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    print(f"manifest counts: {json.dumps(counts)[:300]}")


if __name__ == "__main__":
    main()
