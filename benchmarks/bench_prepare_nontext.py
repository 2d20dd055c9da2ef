"""CPU time per caption of the non-text part of a real `prepare` run, for one or more checkouts.

Runs the same command as bench_prepare_rate.py (`prepare([table], out, PrepareOptions(format="table",
workers=1))` in a fresh interpreter, on the same JSON-lines table) with nothing replaced: the
text steps run for real. Their CPU time is counted by thin wrappers around the text entry
points process_records calls (segmenter.spans, tokenizer.encode_caption / local_caption /
encode_sentences, summary.summary_scores, summary.summary_mask, summary.summary_scores_batch,
summary.summary_scores_flat, summary.summary_mask_batch), and the text modules are imported
and their models loaded before the timed call (counted as text set-up). Everything else is
the non-text part:

  start-up   interpreter start, imports of caption_debias.prepare.run (and what they pull in)
  run rest   prepare() CPU minus the text steps: reading, keys, fingerprints, the row loop,
             meta JSON, Arrow columns, Parquet write, sidecars, rejects, manifest
             (less the wrappers' own cost, calibrated and reported)

Checkouts alternate (--repeats rounds), each run in its own interpreter; the minimum per
checkout is reported (on a shared machine the minimum is the least disturbed run).
--against REV adds two trees made with `git archive`: REV as it was, and this checkout with
REV's caption_debias/prepare and caption_debias/readers (the same text code as this checkout,
so its total against this checkout's is the non-text change alone, side effects such as
garbage-collector time charged to the text steps included; it needs REV's prepare/ to call
the text API as this checkout has it).

    .venv/bin/python benchmarks/bench_prepare_nontext.py --rows 20000 --against REV
    .venv/bin/python benchmarks/bench_prepare_nontext.py --repos /path/to/other/checkout .
    .venv/bin/python benchmarks/bench_prepare_nontext.py --profile   # + cProfile of the last checkout's run
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, add_data_option, code_at, long_captions
from bench_prepare_rate import table_captions

HERE = Path(__file__).resolve()


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child(repo: str, table: str, out: str, profile: bool) -> None:
    sys.path.insert(0, repo)
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    startup = _cpu()  # interpreter start + prepare's own imports
    from caption_debias.text import summary
    from caption_debias.text.segment import get_segmenter
    from caption_debias.text.tokenize import get_tokenizer

    seg, tok = get_segmenter("fast"), get_tokenizer()
    for name in ("_model", "_scorer", "_batch_scorer"):  # the shipped summary model, loaded lazily
        if hasattr(summary, name):
            getattr(summary, name)()
    seg.spans("A warm-up caption. It has two sentences.")
    tok.encode_caption("A warm-up caption.", [(0, 18)])
    text_setup = _cpu() - startup

    clock = time.process_time
    spent = [0.0, 0]  # text CPU seconds, wrapped calls
    depth = [0]

    def wrap(fn):
        def timed(*args, **kwargs):
            if depth[0]:
                return fn(*args, **kwargs)
            depth[0] = 1
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += clock() - t0
                spent[1] += 1
                depth[0] = 0

        return timed

    # the wrappers' own cost outside the timed span, per call (calibrated on a no-op)
    noop = wrap(lambda *a: None)
    n = 20000
    t0 = clock()
    for _ in range(n):
        noop()
    total = clock() - t0
    inside = spent[0]
    overhead = (total - inside) / n
    spent[:] = [0.0, 0]

    seg.spans = wrap(seg.spans)
    for name in ("encode_caption", "local_caption", "encode_sentences"):  # the last two: the chunk's batch tokenization
        if hasattr(tok, name):
            setattr(tok, name, wrap(getattr(tok, name)))
    for name in ("summary_scores", "summary_mask", "summary_scores_batch", "summary_scores_flat", "summary_mask_batch"):
        if hasattr(summary, name):
            setattr(summary, name, wrap(getattr(summary, name)))

    # per-part CPU of the non-text work (supporting figures; text time inside a part is taken out)
    from caption_debias.prepare import run as run_mod
    from caption_debias.prepare import steps, stream

    parts = {"read+keys": 0.0, "fingerprint": 0.0, "process_records": 0.0, "parquet write": 0.0, "json writes": 0.0}

    def part(name, fn, text_inside=False):
        def timed(*args, **kwargs):
            t0, x0 = clock(), spent[0]
            try:
                return fn(*args, **kwargs)
            finally:
                parts[name] += clock() - t0 - ((spent[0] - x0) if text_inside else 0.0)

        return timed

    def timed_chunks(*args, **kwargs):
        it = stream.chunks(*args, **kwargs)
        while True:
            t0 = clock()
            try:
                item = next(it)
            except StopIteration:
                parts["read+keys"] += clock() - t0
                return
            parts["read+keys"] += clock() - t0
            yield item

    run_mod.chunks = timed_chunks
    stream.Chunk.fingerprint = part("fingerprint", stream.Chunk.fingerprint)
    steps.process_records = part("process_records", steps.process_records, text_inside=True)
    run_mod.write_shard = part("parquet write", run_mod.write_shard)
    run_mod.write_json = part("json writes", run_mod.write_json)

    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    c0 = _cpu()
    manifest = prepare([table], out, PrepareOptions(format="table", workers=1, quiet=True, overwrite=True))
    run = _cpu() - c0
    if prof is not None:
        prof.disable()
        import pstats

        st = pstats.Stats(prof, stream=sys.stderr)
        st.sort_stats("tottime").print_stats(40)
    print(
        json.dumps(
            {
                "startup": startup,
                "text_setup": text_setup,
                "run": run,
                "text": spent[0],
                "calls": spent[1],
                "overhead": overhead,
                "parts": parts,
                "read": manifest["counts"]["read"],
                "written": manifest["counts"]["written"],
            }
        )
    )


def measure(repo: Path, table: Path, out: Path, profile: bool) -> dict:
    cmd = [sys.executable, str(HERE), "--child", str(repo), str(table), str(out)] + (["--profile"] if profile else [])
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    if profile:
        print(res.stderr, file=sys.stderr)
    return json.loads(res.stdout.strip().splitlines()[-1])


def _trees(rev: str, tmp: Path) -> list[str]:
    """REV whole, and this checkout (tracked files as they are now) with REV's prepare/ and readers/."""
    old = code_at(rev, tmp / f"rev-{rev}", "caption_debias", "schemas")
    mixed = tmp / f"text-now+non-text-{rev}"
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "caption_debias", "schemas"], capture_output=True, text=True, check=True
    )
    for rel in files.stdout.split():
        if (ROOT / rel).is_file():
            dest = mixed / ("caption_debias/" + rel if rel.startswith("schemas/") else rel)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes((ROOT / rel).read_bytes())
    for sub in ("caption_debias/prepare", "caption_debias/readers"):
        for f in (mixed / sub).glob("*.py"):
            f.unlink()
        code_at(rev, mixed, sub)
    return [str(old), str(mixed)]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4], "--profile" in sys.argv)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--mix", choices=("repeat", "shuffled"), default="repeat")
    ap.add_argument("--repos", nargs="+", default=[str(HERE.parents[1])], help="checkouts to time (alternating)")
    ap.add_argument(
        "--against", metavar="REV", help="also time REV, and REV's prepare/ + readers/ on this checkout's text code"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="print a cProfile table (one extra run of the last repo)")
    args = ap.parse_args()

    rows_text = table_captions(long_captions(args.data), args.rows, args.mix)
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            args.repos = [*_trees(args.against, Path(tmp)), *args.repos]
        results: dict[str, list[dict]] = {r: [] for r in args.repos}
        table = Path(tmp) / "captions.jsonl"
        with table.open("w", encoding="utf-8") as fh:
            for i, caption in enumerate(rows_text):
                fh.write(json.dumps({"key": f"c{i}", "image": f"img/{i}.jpg", "caption": caption}) + "\n")
        for _ in range(args.repeats):
            for repo in args.repos:
                results[repo].append(measure(Path(repo).resolve(), table, Path(tmp) / "out", False))
        if args.profile:
            measure(Path(args.repos[-1]).resolve(), table, Path(tmp) / "out", True)

    us = 1e6 / args.rows
    print(
        f"{args.rows} rows (--mix {args.mix}), CPU us per caption, min of {args.repeats} runs per checkout "
        "(non-text = start-up + prepare() minus the text steps and the wrappers' cost)"
    )
    print(
        f"{'checkout':<28} {'start-up':>9} {'run rest':>9} {'NON-TEXT':>9} {'text':>8} {'text set-up':>11} {'total':>8}"
    )
    for repo, runs in results.items():

        def rest(r):
            return r["run"] - r["text"] - r["calls"] * r["overhead"]

        best = min(runs, key=lambda r: r["startup"] + rest(r))
        name = str(repo)[-28:]
        total = best["startup"] + best["text_setup"] + best["run"]
        print(
            f"{name:<28} {best['startup'] * us:9.1f} {rest(best) * us:9.1f} {(best['startup'] + rest(best)) * us:9.1f} "
            f"{(best['text'] + best['calls'] * best['overhead']) * us:8.1f} {best['text_setup'] * us:11.1f} {total * us:8.1f}"
        )
        each = ", ".join(f"{(r['startup'] + rest(r)) * us:.1f}" for r in runs)
        print(
            f"{'':<28} all runs non-text: {each}; "
            f"wrapper cost {best['overhead'] * 1e6:.2f} us x {best['calls']} calls; read {best['read']}, written {best['written']}"
        )
        print(
            f"{'':<28} parts of that run: "
            + ", ".join(f"{k} {v * us:.1f}" for k, v in best["parts"].items())
            + f", rest of run {(rest(best) - sum(best['parts'].values()) + best['calls'] * best['overhead']) * us:.1f} (wrapped-call cost is in process_records)"
        )


if __name__ == "__main__":
    main()
