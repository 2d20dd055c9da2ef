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

    .venv/bin/python benchmarks/bench_prepare_rate.py --rows 20000 --mix shuffled
    PYTHONPATH=/path/to/other/checkout .venv/bin/python benchmarks/bench_prepare_rate.py ...   # time other code
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path

from _common import add_data_option, long_captions, peak_rss_mib


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


def _run_prepare(table: str, out: str, segmenter: str, queue) -> None:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    t0 = time.perf_counter()
    manifest = prepare(
        [table], out, PrepareOptions(format="table", workers=1, quiet=True, overwrite=True, segmenter=segmenter)
    )
    dt = time.perf_counter() - t0
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime  # includes interpreter start-up and imports
    queue.put((dt, cpu, manifest, peak_rss_mib()))


def prepare_rate(table: Path, out: Path, segmenter: str) -> tuple[float, float, dict, float]:
    ctx = mp.get_context("spawn")  # a fresh interpreter: imports are timed, peak memory is prepare's own
    q = ctx.Queue()
    p = ctx.Process(target=_run_prepare, args=(str(table), str(out), segmenter, q))
    p.start()
    result = q.get()
    p.join()
    return result


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
    args = ap.parse_args()

    caps = long_captions(args.data)
    rows_text = table_captions(caps, args.rows, args.mix)
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "captions.jsonl"
        with table.open("w", encoding="utf-8") as fh:
            for i, caption in enumerate(rows_text):
                fh.write(json.dumps({"key": f"c{i}", "image": f"img/{i}.jpg", "caption": caption}) + "\n")
        base_wall, base_cpu = pysbd_rate(rows_text, args.pysbd_rows)
        dt, cpu, manifest, rss = prepare_rate(table, Path(tmp) / "out", args.segmenter)
    rows = args.rows
    import caption_debias

    print(f"code: {Path(caption_debias.__file__).parent}")
    print(
        f"captions: {len(caps)} real long captions, {rows} rows in the table, {len(set(rows_text))} distinct (--mix {args.mix})"
    )
    print(
        f"pysbd loop (segment only, {args.pysbd_rows} rows spread over the table): {base_wall:8.0f} captions/s wall, {base_cpu:8.0f} captions/s CPU"
    )
    print(
        f"prepare --segmenter {args.segmenter} --workers 1 (whole run, incl. start-up): "
        f"{rows / dt:8.0f} captions/s wall ({dt:.1f} s), {rows / cpu:8.0f} captions/s CPU ({cpu:.1f} s)"
    )
    print(
        f"ratio prepare / pysbd loop: {rows / dt / base_wall:.1f}x wall, {rows / cpu / base_cpu:.1f}x CPU "
        "(CPU time is the fairer figure on a shared machine)"
    )
    print(f"prepare peak RSS: {rss:.0f} MiB")
    counts = {k: v for k, v in manifest.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    print(f"manifest counts: {json.dumps(counts)[:300]}")


if __name__ == "__main__":
    main()
