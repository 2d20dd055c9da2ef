"""Recall@K on a COCO-sized similarity matrix (25,014 captions x 5,000 images): the one-pass
row-chunk implementation (metrics.retrieval_recall) against a transposed, masked baseline
(the first version: per image chunk, an own-caption mask and a masked copy of the columns).

Usage: .venv/bin/python benchmarks/bench_eval_metric.py
Each implementation runs in a fresh subprocess; memory is the peak RSS above the matrix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent  # for the child's `import _common`

CHILD = r"""
import json, sys, time, torch
from _common import peak_rss_mib
from caption_debias.evaluate.metrics import recall_from_ranks, retrieval_recall, text_to_image_ranks
torch.set_num_threads(1)
torch.manual_seed(0)
n_img = 5000
ti = torch.cat([torch.arange(n_img).repeat_interleave(5), torch.arange(14)])
sim = torch.rand(len(ti), n_img)

def baseline(sim, ti, chunk=4096):
    t2i = torch.cat([text_to_image_ranks(sim[s:s + chunk], ti[s:s + chunk]) for s in range(0, len(ti), chunk)])
    parts = []
    for s in range(0, n_img, chunk):
        cols_t = sim[:, s:s + chunk].t()
        own = (ti - s).view(1, -1) == torch.arange(cols_t.shape[0]).view(-1, 1)
        best = cols_t.masked_fill(~own, float("-inf")).max(dim=1, keepdim=True).values
        parts.append(((cols_t >= best) & ~own).sum(dim=1))
    return {"t2i": recall_from_ranks(t2i), "i2t": recall_from_ranks(torch.cat(parts))}

fn = baseline if sys.argv[1] == "baseline" else retrieval_recall
before = peak_rss_mib()
t = time.perf_counter()
result = fn(sim, ti)
print(json.dumps({"s": time.perf_counter() - t, "extra_mib": peak_rss_mib() - before, "result": result}))
"""


def run(which: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", CHILD, which], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)


def main() -> None:
    base, ours = run("baseline"), run("ours")
    assert base["result"] == ours["result"], "implementations disagree"
    print(
        json.dumps(
            {
                "baseline_s": round(base["s"], 2),
                "ours_s": round(ours["s"], 2),
                "speedup": round(base["s"] / ours["s"], 2),
                "baseline_extra_mib": round(base["extra_mib"]),
                "ours_extra_mib": round(ours["extra_mib"]),
                "memory_ratio": round(base["extra_mib"] / max(ours["extra_mib"], 1), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
