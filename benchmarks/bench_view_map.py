"""The view's embedding map at 1M rows: time and peak memory to place every row, against a plain baseline.

Generates (once, reused with --reuse) a folder of --rows rows with --dim-d float16 image embeddings
(SYNTHETIC: random unit vectors around 12 centres, the width of ViT-B-16's embeddings; the rows'
text columns are copied from a small really prepared folder), then in fresh subprocesses:

  view     : view/embedding_map.py as the server runs it: a seeded sample of 100,000 rows fitted
             (scikit-learn PCA, randomized), every row placed shard by shard, and the page's points
             (a seeded sample of 100,000) with their labels; then a box filter over every row
  baseline : the plain way: the whole image_embedding column read into memory as one float32 matrix,
             PCA fitted on every row and every row transformed

    nice .venv/bin/python benchmarks/bench_view_map.py --work /tmp/view-map-bench --reuse
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, time
from _common import peak_rss_mib
mode, folder = sys.argv[1], sys.argv[2]
out = {}
def timed(name, fn):
    t0 = time.perf_counter(); r = fn(); out[name] = round(time.perf_counter() - t0, 2); return r
if mode == "view":
    from caption_debias.view.data import ViewData
    from caption_debias.folder_rows.query import Query
    gen = timed("open", lambda: ViewData([folder]).current())
    timed("index", gen.index.index)
    timed("map (fit on the sample, every row placed)", lambda: (gen.map.start(), gen.map.wait()))
    page = timed("page's points and labels", gen.map_page)
    out["points"] = page["shown"]; out["rows placed"] = page["rows"]
    timed("box filter over every row", lambda: gen.page(Query(box=(-0.05, -0.05, 0.05, 0.05))))
else:
    import numpy as np, pyarrow.compute as pc, pyarrow.parquet as pq
    from sklearn.decomposition import PCA
    def read():
        col = pq.read_table(folder + "/shards", columns=["image_embedding"]).column(0).combine_chunks()
        dim = pc.list_value_length(col)[0].as_py()
        return pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, dim)
    x = timed("read every embedding", read)
    model = timed("PCA fit on every row", lambda: PCA(n_components=2, svd_solver="randomized", random_state=0).fit(x))
    timed("transform every row", lambda: model.transform(x))
    out["rows placed"] = len(x)
out["peak_rss_mib"] = round(peak_rss_mib())
print(json.dumps(out))
"""


def run_child(mode: str, folder: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(folder)], capture_output=True, text=True, env=env)
    if proc.returncode:
        sys.exit(f"{mode} run failed:\n{proc.stderr}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    return result


def build(work: Path, rows: int, dim: int) -> Path:
    import numpy as np
    from curate_fixtures import make_world
    from view_fixtures import embedding_folder

    small = work / "small"
    if not (small / "prepared" / "manifest.json").is_file():
        make_world(small)
    return embedding_folder(small / "prepared", work / "big", rows=rows, dim=dim, rng=np.random.default_rng(0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--work", type=Path, default=Path("/tmp/view-map-bench"))
    parser.add_argument("--reuse", action="store_true", help="reuse WORK/big when it has --rows rows")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    big, manifest = args.work / "big", args.work / "big" / "manifest.json"
    t0 = time.perf_counter()
    if not (args.reuse and manifest.is_file() and json.loads(manifest.read_text())["counts"]["written"] == args.rows):
        big = build(args.work, args.rows, args.dim)
    size = sum(p.stat().st_size for p in (big / "shards").iterdir())
    print(
        f"folder: {args.rows:,} rows, {args.dim}-d synthetic embeddings, {size / 2**20:,.0f} MiB of shards "
        f"({time.perf_counter() - t0:.0f} s to make); load average {os.getloadavg()[0]:.1f} (2 cores)"
    )
    view, base = run_child("view", big), run_child("baseline", big)
    print("| run | step | seconds |")
    print("|---|---|---|")
    for name, r in (("view", view), ("baseline", base)):
        for step, v in r.items():
            print(f"| {name} | {step} | {v} |")
    print(
        f"ratio (baseline / view): wall {base['wall_s'] / view['wall_s']:.2f}x, peak memory "
        f"{base['peak_rss_mib'] / view['peak_rss_mib']:.2f}x"
    )
    print(json.dumps({"view": view, "baseline": base}))


if __name__ == "__main__":
    main()
