"""Measure models' curation signals on a world with planted faults (docs/curation.md, "Planted faults").

    .venv/bin/python experiments/score_planted.py --work DIR --demo DEMO_OUT [--model NAME=SPEC ...]
        [--n 2000] [--seed 0] [--json PATH]

synth --plant (a held-out world: split `planted`, a stream no demo world uses) -> prepare ->
`score --keep-embeddings` with each model -> per model:

- hallucinated sentences: AUROC of low `sentence_grounding` for the swapped sentences against
  the clean detail sentences;
- mismatched captions: rows with `clip_score` under the random-pair threshold (the 99th
  percentile of captions scored against a seeded random other image of the folder: needs no
  labels), and DataComp's keep-top 94% beside it;
- re-drawn scenes: SemDeDup's rule (image cosine >= T with an earlier kept row) for a few T,
  with the copies found and the hard-negative group members removed; cosines of centred
  embeddings as curate compares them (semdedup.centred), raw cosines beside them.

Models: `--demo DIR` adds a demo folder's `debias` and `longclip` arms; the shipped
`demo-start` is always scored; `--model NAME=SPEC` adds any spec `score` accepts. Everything
is seeded; the JSON holds every figure and the table is printed (Markdown).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEDUP_THRESHOLDS = (0.9, 0.95, 0.97, 0.98, 0.99)
KEEP_TOP_PERCENT = 94.0
PAIR_QUANTILES = (0.9, 0.95, 0.99)


def make_world(work: Path, n: int, seed: int) -> tuple[Path, Path]:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.synth.plant import PlantSpec
    from caption_debias.synth.world import write_world

    world, prepared = work / "world", work / "prepared"
    write_world(world, n, seed, split="planted", overwrite=True, plant=PlantSpec())
    options = PrepareOptions(format="sharegpt4v", image_root=str(world), split="planted", overwrite=True, quiet=True)
    prepare([world / "sharegpt4v.json"], prepared, options)
    return world, prepared


def score(prepared: Path, world: Path, spec: str, out: Path) -> float:
    from caption_debias.score.options import ScoreOptions
    from caption_debias.score.run import score_folder

    t0 = time.perf_counter()
    options = ScoreOptions(model=spec, image_root=str(world), keep_embeddings=True, overwrite=True, quiet=True)
    score_folder([str(prepared)], str(out), options)
    return time.perf_counter() - t0


def measure(scored_dir: Path, key: dict, seed: int) -> dict:
    from caption_debias.curate.semdedup import centred
    from caption_debias.evaluate import planted

    cols = ["summary_mask", "sentence_grounding", "clip_score", "image_embedding", "caption_embedding", "meta"]
    scored = planted.read_scored(scored_dir, cols)
    groups = [json.loads(m)["group"] for m in scored["meta"]]
    images = np.asarray(scored["image_embedding"], np.float32)
    captions = np.asarray(scored["caption_embedding"], np.float32)
    top = planted.keep_top(scored["clip_score"], KEEP_TOP_PERCENT)
    return {
        "hallucination": planted.hallucination(scored, key),
        "alignment": {
            "random_pair_rule": {f"{q:g}": _pair_rule(scored, key, images, captions, seed, q) for q in PAIR_QUANTILES},
            "keep_top": {
                "percent": KEEP_TOP_PERCENT,
                **planted._removal_figures(scored["key"], top, key, "mismatched"),
            },
            "auroc": round(_clip_auroc(scored, key), 4),
        },
        # the whole caption: does one swapped sentence lower the caption's own clip_score?
        "hallucinated_caption_auroc": round(_clip_auroc(scored, key, "hallucinated"), 4),
        "duplicates": {f"{t:g}": planted.duplicates(scored, key, groups, t, centred(images)) for t in DEDUP_THRESHOLDS},
        "duplicates_raw": {f"{t:g}": planted.duplicates(scored, key, groups, t) for t in DEDUP_THRESHOLDS},
        "copy_cosines": _copy_cosines(scored, key, groups),
        "copy_cosines_raw": _copy_cosines(scored, key, groups, center=False),
    }


def curate_check(
    scored_dir: Path, world: Path, out: Path, key: dict, groups: dict, min_clip: float, dedup: float
) -> dict:
    """`caption-debias curate` on the scored folder with a clip_score floor and a SemDeDup threshold;
    the planted rows it removes as low_alignment and semantic_duplicate, and the clean ones."""
    import subprocess

    cmd = [sys.executable, "-m", "caption_debias.cli.main", "curate", str(scored_dir), "--out", str(out)]
    cmd += ["--image-root", str(world), "--min-clip-score", f"{min_clip:.4f}"]
    cmd += ["--semantic-duplicate-threshold", f"{dedup:g}", "--overwrite", "-q"]
    subprocess.run(cmd, check=True)
    removed = [json.loads(line) for line in (out / "removed.jsonl").read_text("utf-8").splitlines() if line.strip()]
    kinds = {kind: {e["key"] for e in key[kind]} for kind in ("hallucinated", "mismatched", "redrawn")}
    planted_rows = set().union(*kinds.values())
    clean_rows = len(groups) - len(planted_rows)
    by_reason: dict[str, list[dict]] = {}
    for r in removed:
        by_reason.setdefault(r["reason"], []).append(r)
    low = {r["key"] for r in by_reason.get("low_alignment", [])}
    dups = by_reason.get("semantic_duplicate", [])
    dup_keys = {r["key"] for r in dups}
    return {
        "command": " ".join(cmd[1:]),
        "removed_by_reason": {reason: len(rows) for reason, rows in by_reason.items()},
        "low_alignment": {
            "min_clip_score": round(min_clip, 4),
            "recall": round(len(low & kinds["mismatched"]) / len(kinds["mismatched"]), 4),
            "clean_removed_share": round(len(low - planted_rows) / clean_rows, 4),
            "hallucinated_removed": len(low & kinds["hallucinated"]),
        },
        "semantic_duplicate": {
            "threshold": dedup,
            "recall": round(len(dup_keys & kinds["redrawn"]) / len(kinds["redrawn"]), 4),
            "clean_removed_share": round(len(dup_keys - planted_rows) / clean_rows, 4),
            "group_members_removed": sum(
                1 for r in dups if r["key"] not in kinds["redrawn"] and groups[r["key"]] == groups[r["detail"]["match"]]
            ),
        },
    }


def _pair_rule(scored: dict, key: dict, images: np.ndarray, captions: np.ndarray, seed: int, q: float) -> dict:
    from caption_debias.evaluate import planted

    threshold = planted.random_pair_threshold(images, captions, seed=seed, quantile=q)
    return {"min_clip_score": round(threshold, 4), **planted.alignment(scored, key, threshold)}


def _clip_auroc(scored: dict, key: dict, kind: str = "mismatched") -> float:
    """AUROC of low clip_score for the rows planted with `kind` against the clean rows."""
    from caption_debias.evaluate import planted

    bad = {e["key"] for e in key[kind]}
    planted_rows = {e["key"] for kind in ("hallucinated", "mismatched", "redrawn") for e in key[kind]}
    pos = [-s for k, s in zip(scored["key"], scored["clip_score"]) if k in bad]
    neg = [-s for k, s in zip(scored["key"], scored["clip_score"]) if k not in planted_rows]
    return planted.auroc(pos, neg)


def _copy_cosines(scored: dict, key: dict, groups: list[str], center: bool = True) -> dict:
    """Where the threshold can sit: copy vs its source, against the closest pair that is no copy."""
    from caption_debias.curate.semdedup import centred

    e = np.asarray(scored["image_embedding"], np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    if center:
        e = centred(e)
    index = {k: i for i, k in enumerate(scored["key"])}
    copies = [(index[x["key"]], index[x["copy_of_key"]]) for x in key["redrawn"]]
    copy_sims = [float(e[a] @ e[b]) for a, b in copies]
    sims = e @ e.T
    np.fill_diagonal(sims, -2)
    for a, _ in copies:
        sims[a, :] = sims[:, a] = -2  # the copies themselves: the pairs measured above
    g = np.asarray(groups)
    same = g[:, None] == g[None, :]
    return {
        "copy_min": round(min(copy_sims), 4),
        "copy_median": round(float(np.median(copy_sims)), 4),
        "same_group_max": round(float(sims[same].max()), 4),
        "other_group_max": round(float(sims[~same].max()), 4),
    }


def table(results: dict) -> str:
    head = (
        "| model | hallucinated sentences: AUROC (swapped vs clean detail) | whole caption: clip_score AUROC, "
        "hallucinated rows vs clean | clip_score AUROC (mismatched vs clean) "
        "| mismatched removed / clean removed, S = random-pair q 0.90 | q 0.95 | q 0.99 | keep top 94% "
        "| re-drawn removed / clean removed / group members removed, centred, T = 0.95 | T = 0.97 | T = 0.98 "
        "| raw cosine, T = 0.97 | centred: copy cosine min / closest other pair (same group, other group) |"
    )
    lines = [head, "|" + "---|" * 13]

    def removal(f: dict) -> str:
        return f"{f['recall']:.2f} / {100 * f['clean_removed_share']:.1f}%"

    for name, r in results["models"].items():
        h, a, c = r["hallucination"], r["alignment"], r["copy_cosines"]
        pair = [
            f"{removal(a['random_pair_rule'][q])} (S {a['random_pair_rule'][q]['min_clip_score']:.3f})"
            for q in ("0.9", "0.95", "0.99")
        ]
        dups = [
            f"{removal(r['duplicates'][t])} / {r['duplicates'][t]['group_members_removed']}"
            for t in ("0.95", "0.97", "0.98")
        ]
        raw = r["duplicates_raw"]["0.97"]
        dups.append(f"{removal(raw)} / {raw['group_members_removed']}")
        lines.append(
            f"| {name} | {h['auroc']:.3f} ({h['hallucinated']} vs {h['clean_detail']}) "
            f"| {r['hallucinated_caption_auroc']:.3f} | {a['auroc']:.3f} "
            f"| {' | '.join(pair)} | {removal(a['keep_top'])} | {' | '.join(dups)} "
            f"| {c['copy_min']:.3f} / {c['same_group_max']:.3f}, {c['other_group_max']:.3f} |"
        )
    curated = [(name, r["curate"]) for name, r in results["models"].items() if "curate" in r]
    if curated:
        lines += [
            "",
            "| model (`curate`) | low_alignment: S | mismatched removed | clean removed | semantic_duplicate: T "
            "| re-drawn removed | clean removed | group members removed | removed by reason |",
            "|" + "---|" * 9,
        ]
        for name, c in curated:
            low, dup = c["low_alignment"], c["semantic_duplicate"]
            lines.append(
                f"| {name} | {low['min_clip_score']:.3f} | {low['recall']:.2f} | {100 * low['clean_removed_share']:.1f}% "
                f"| {dup['threshold']:g} | {dup['recall']:.2f} | {100 * dup['clean_removed_share']:.1f}% "
                f"| {dup['group_members_removed']} | {json.dumps(c['removed_by_reason'])} |"
            )
    return "\n".join(lines)


def main() -> None:
    from caption_debias.demo import shipped_start
    from caption_debias.evaluate import planted

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--demo", type=Path, help="a `caption-debias demo --out` folder: its runs/debias and runs/longclip")
    ap.add_argument("--model", action="append", default=[], help="NAME=SPEC (any spec `score` accepts)")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="results file (default WORK/planted_results.json)")
    ap.add_argument("--reuse", action="store_true", help="keep an earlier world and scored folders in WORK")
    ap.add_argument(
        "--curate", action="store_true", help="also run `curate` with the rules below on each scored folder"
    )
    ap.add_argument("--pair-quantile", type=float, default=0.9, help="--curate: S = this random-pair quantile")
    ap.add_argument("--dedup-threshold", type=float, default=0.97, help="--curate: --semantic-duplicate-threshold")
    args = ap.parse_args()

    models = {}
    if args.demo:
        models.update({arm: str(args.demo / "runs" / arm) for arm in ("debias", "longclip")})
    models["start"] = f"local-dir:{shipped_start()}"
    for item in args.model:
        name, _, spec = item.partition("=")
        models[name] = spec
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    if args.reuse and (work / "prepared" / "manifest.json").is_file():
        world, prepared = work / "world", work / "prepared"
    else:
        world, prepared = make_world(work, args.n, args.seed)
    key = planted.read_key(world)
    results = {"n": args.n, "seed": args.seed, "specs": models, "models": {}, "score_s": {}}
    for name, spec in models.items():
        out = work / "scored" / name
        if not (args.reuse and (out / "manifest.json").is_file()):
            results["score_s"][name] = round(score(prepared, world, spec, out), 1)
        results["models"][name] = measure(out, key, args.seed)
        if args.curate:
            from caption_debias.evaluate import planted as measures

            meta = measures.read_scored(out, ["meta"])
            groups = {k: json.loads(m)["group"] for k, m in zip(meta["key"], meta["meta"])}
            rule = results["models"][name]["alignment"]["random_pair_rule"][f"{args.pair_quantile:g}"]
            results["models"][name]["curate"] = curate_check(
                out, world, work / "curated" / name, key, groups, rule["min_clip_score"], args.dedup_threshold
            )
        print(f"{name}: {json.dumps(results['models'][name]['hallucination'])}", flush=True)
    path = args.json or work / "planted_results.json"
    path.write_text(json.dumps(results, indent=1), "utf-8")
    print(table(results))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
