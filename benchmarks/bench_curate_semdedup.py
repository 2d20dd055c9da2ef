"""semantic_duplicate at scale: SemDeDup (seeded k-means, pairs within clusters) against exact all pairs.

Random unit embeddings (float16, the dtype `score --keep-embeddings` stores) with 1% of the
rows planted as re-drawn copies of an earlier row (the original plus noise: cosine 0.93-0.99).
Each mode runs in its own process, so its peak memory is its own:

  clustered  curate's path (semdedup.semantic_duplicates, default cluster size) on every row:
             time per stage, peak memory, sum of squared cluster sizes (the pair count)
  exact      the all-pairs rule (one cluster) on a sample of --sample rows, timed, and the
             time extrapolated to every row (n^2: the pairs grow with the square)
  sweep      clustered at several cluster sizes on --sweep-rows rows: time and the planted
             copies found, against the exact rule on those rows

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


def run_clustered(rows: int, cluster_size: int | None = None) -> dict:
    from caption_debias.curate import semdedup
    from caption_debias.curate.options import SEMDEDUP_CLUSTER_SIZE

    size = cluster_size or SEMDEDUP_CLUSTER_SIZE
    emb, copies = world(rows)
    orders = np.arange(rows, dtype=np.int64)
    base = peak_rss_mib()
    t0 = time.perf_counter()
    k = max(1, round(rows / size))
    centroids = semdedup.fit_centroids(emb, k) if k > 1 else None
    t1 = time.perf_counter()
    clusters = semdedup.assign(emb, centroids) if k > 1 else np.zeros(rows, np.int32)
    t2 = time.perf_counter()
    removed = semdedup.semantic_duplicates(emb, orders, THRESHOLD, clusters)
    t3 = time.perf_counter()
    sizes = np.bincount(clusters)
    return {
        "mode": "clustered",
        "rows": rows,
        "cluster_size": size,
        "clusters": int(k),
        "largest_cluster": int(sizes.max()),
        "pairs_compared": int((sizes.astype(np.int64) ** 2).sum() // 2),
        "fit_s": round(t1 - t0, 2),
        "assign_s": round(t2 - t1, 2),
        "pairs_s": round(t3 - t2, 2),
        "total_s": round(t3 - t0, 2),
        "removed": len(removed),
        "planted_found": int(np.isin(copies, np.fromiter(removed, np.int64)).sum()),
        "planted": len(copies),
        "data_mib": round(emb.nbytes / 2**20),
        "peak_rss_mib": round(peak_rss_mib()),
        "peak_over_data_mib": round(peak_rss_mib() - base),
    }


def run_exact(rows: int, sample: int) -> dict:
    from caption_debias.curate import semdedup

    emb, copies = world(rows)
    emb = emb[:sample]  # the first rows: copies among them point at earlier rows among them
    orders = np.arange(sample, dtype=np.int64)
    base = peak_rss_mib()
    t0 = time.perf_counter()
    removed = semdedup.semantic_duplicates(emb, orders, THRESHOLD, np.zeros(sample, np.int32))
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
    t0 = time.perf_counter()
    exact = semdedup.semantic_duplicates(emb, orders, THRESHOLD, np.zeros(rows, np.int32))
    out = [{"cluster_size": rows, "clusters": 1, "time_s": round(time.perf_counter() - t0, 2), "removed": len(exact)}]
    for size in (250, 1000, 4000):
        t0 = time.perf_counter()
        got = semdedup.semantic_duplicates(emb, orders, THRESHOLD, semdedup.clusters_of(emb, size))
        out.append(
            {
                "cluster_size": size,
                "clusters": max(1, round(rows / size)),
                "time_s": round(time.perf_counter() - t0, 2),
                "removed": len(got),
                "recall_vs_exact": round(len(set(got) & set(exact)) / max(len(exact), 1), 4),
                "not_in_exact": len(set(got) - set(exact)),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--sample", type=int, default=50_000, help="rows of the exact all-pairs baseline")
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
