"""semantic_duplicate at scale: SemDeDup (seeded k-means, pairs within clusters) against exact all pairs.

Random unit embeddings (float16, the dtype `score --keep-embeddings` stores) with 1% of the
rows planted as re-drawn copies of an earlier row (the original plus noise: cosine 0.93-0.99).
Each mode runs in its own process, so its peak memory is its own:

  clustered  curate's path (semdedup.semantic_duplicates, default cluster size, home + second
             probe) on every row: time per stage, peak memory, pairs compared, planted copies
             found; and the same clusters with homes only (SemDeDup as published)
  exact      the all-pairs rule (one cluster) on a sample of --sample rows, timed, and the
             time extrapolated to every row (n^2: the pairs grow with the square)
  sweep      cluster size x probes on --sweep-rows rows: time and planted copies found
             (random rows are never near each other at 768 dimensions, so the planted copies
             are every pair there is to find)

    .venv/bin/python benchmarks/bench_curate_semdedup.py --rows 1000000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import peak_rss_mib  # noqa: E402

THRESHOLD = 0.9
DIM = 768


def world(rows: int, dim: int = DIM, seed: int = 0, copy_share: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """(embeddings float16, rows that are planted copies), generated in chunks (memory: the float16 matrix)."""
    rng = np.random.default_rng(seed)
    emb = np.empty((rows, dim), np.float16)
    for a in range(0, rows, 65536):
        x = rng.standard_normal((min(65536, rows - a), dim), dtype=np.float32)
        emb[a : a + len(x)] = x / np.linalg.norm(x, axis=1, keepdims=True)
    copies = np.sort(rng.choice(np.arange(rows // 10, rows), int(rows * copy_share), replace=False))
    originals = (rng.random(len(copies)) * copies).astype(np.int64)  # an earlier row
    noise = rng.uniform(0.15, 0.4, (len(copies), 1)).astype(np.float32)
    e = emb[originals].astype(np.float32) + noise * rng.standard_normal((len(copies), dim), dtype=np.float32) / np.sqrt(
        dim
    )
    emb[copies] = e / np.linalg.norm(e, axis=1, keepdims=True)
    return emb, copies


def _pairs_compared(clusters: np.ndarray) -> int:
    homes = np.bincount(clusters[:, 0]).astype(np.int64)
    away = clusters[:, 1] != clusters[:, 0]
    visitors = np.bincount(clusters[away, 1], minlength=len(homes)).astype(np.int64)
    return int((homes**2).sum() // 2 + (homes[: len(visitors)] * visitors[: len(homes)]).sum())


def run_clustered(rows: int, cluster_size: int | None = None) -> dict:
    from caption_debias.curate import semdedup
    from caption_debias.curate.options import SEMDEDUP_CLUSTER_SIZE

    size = cluster_size or SEMDEDUP_CLUSTER_SIZE
    emb, copies = world(rows)
    orders = np.arange(rows, dtype=np.int64)
    base = peak_rss_mib()
    tc = time.perf_counter()
    semdedup.centred(emb, out=emb)  # curate's default: in place, one chunk of extra memory
    t0 = time.perf_counter()
    k = max(1, round(rows / size))
    centroids = semdedup.fit_centroids(emb, k)
    t1 = time.perf_counter()
    clusters = semdedup.assign(emb, centroids, semdedup.PROBES)
    t2 = time.perf_counter()
    removed = semdedup.semantic_duplicates(emb, orders, THRESHOLD, clusters)
    t3 = time.perf_counter()
    peak = peak_rss_mib()
    homes = np.repeat(clusters[:, :1], 2, axis=1)
    t4 = time.perf_counter()
    removed_homes = semdedup.semantic_duplicates(emb, orders, THRESHOLD, homes)
    t5 = time.perf_counter()
    sizes = np.bincount(clusters[:, 0])
    return {
        "mode": "clustered",
        "rows": rows,
        "dim": emb.shape[1],
        "cluster_size": size,
        "clusters": int(k),
        "largest_cluster": int(sizes.max()),
        "pairs_compared": _pairs_compared(clusters),
        "pairs_all": rows * (rows - 1) // 2,
        "center_s": round(t0 - tc, 2),
        "fit_s": round(t1 - t0, 2),
        "assign_s": round(t2 - t1, 2),
        "pairs_s": round(t3 - t2, 2),
        "total_s": round(t3 - t0, 2),
        "removed": len(removed),
        "planted_found": int(np.isin(copies, np.fromiter(removed, np.int64)).sum()),
        "planted": len(copies),
        "homes_only_pairs_s": round(t5 - t4, 2),
        "homes_only_pairs_compared": _pairs_compared(homes),
        "homes_only_planted_found": int(np.isin(copies, np.fromiter(removed_homes, np.int64)).sum()),
        "data_mib": round(emb.nbytes / 2**20),
        "peak_rss_mib": round(peak),
        "peak_over_data_mib": round(peak - base),
    }


def run_exact(rows: int, sample: int) -> dict:
    from caption_debias.curate import semdedup

    emb, copies = world(rows)
    emb = emb[:sample]  # the first rows: copies among them point at earlier rows among them
    orders = np.arange(sample, dtype=np.int64)
    base = peak_rss_mib()
    t0 = time.perf_counter()
    removed = semdedup.semantic_duplicates(emb, orders, THRESHOLD, np.zeros((sample, 2), np.int32))
    t = time.perf_counter() - t0
    planted = copies[copies < sample]
    return {
        "mode": "exact",
        "rows": sample,
        "time_s": round(t, 2),
        "extrapolated_s": round(t * (rows / sample) ** 2, 1),
        "extrapolated_to": rows,
        "removed": len(removed),
        "planted_found": int(np.isin(planted, np.fromiter(removed, np.int64)).sum()),
        "planted": len(planted),
        "peak_over_data_mib": round(peak_rss_mib() - base),
        "extrapolated_pair_matrix_gib": round(rows * rows * 4 / 2**30),
    }


def run_sweep(rows: int) -> list[dict]:
    from caption_debias.curate import semdedup

    emb, copies = world(rows)
    orders = np.arange(rows, dtype=np.int64)
    out = []
    for size in (250, 1000, 4000):
        t0 = time.perf_counter()
        clusters = semdedup.clusters_of(emb, size)
        fit = time.perf_counter() - t0
        for probes in (1, 2):
            c = clusters if probes == 2 else np.repeat(clusters[:, :1], 2, axis=1)
            t0 = time.perf_counter()
            got = semdedup.semantic_duplicates(emb, orders, THRESHOLD, c)
            out.append(
                {
                    "cluster_size": size,
                    "probes": probes,
                    "clusters_s": round(fit, 2),
                    "pairs_s": round(time.perf_counter() - t0, 2),
                    "pairs_compared": _pairs_compared(c),
                    "planted_found": int(np.isin(copies, np.fromiter(got, np.int64)).sum()),
                    "planted": len(copies),
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--sample", type=int, default=10_000, help="rows of the exact all-pairs baseline")
    ap.add_argument("--sweep-rows", type=int, default=100_000)
    ap.add_argument("--mode", choices=["all", "clustered", "exact", "sweep"], default="all")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if args.mode == "clustered":
        print(json.dumps(run_clustered(args.rows)))
        return
    if args.mode == "exact":
        print(json.dumps(run_exact(args.rows, args.sample)))
        return
    if args.mode == "sweep":
        print(json.dumps(run_sweep(args.sweep_rows)))
        return
    results = {}
    for mode in ("clustered", "exact", "sweep"):
        cmd = [sys.executable, __file__, "--mode", mode, "--rows", str(args.rows), "--sample", str(args.sample)]
        cmd += ["--sweep-rows", str(args.sweep_rows)]
        line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        results[mode] = json.loads(line)
        print(mode, json.dumps(results[mode], indent=1), flush=True)
    c, e = results["clustered"], results["exact"]
    print(
        f"\nSemDeDup at {c['rows']:,} rows: {c['total_s']} s ({c['clusters']} clusters, largest {c['largest_cluster']})"
    )
    print(f"exact all pairs: {e['time_s']} s at {e['rows']:,} rows -> {e['extrapolated_s']} s at {c['rows']:,} (n^2)")
    print(
        f"speed-up: {e['extrapolated_s'] / c['total_s']:.0f}x; planted copies found {c['planted_found']}/{c['planted']}"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", "utf-8")


if __name__ == "__main__":
    main()
