"""Per-seed table of the demo's target: run `caption-debias demo` for several seeds (or read
finished runs) and print the markdown table that docs/demo.md shows.

    .venv/bin/python experiments/demo_seeds.py --seeds 0 1 2 --quick --root demo-seeds
    .venv/bin/python experiments/demo_seeds.py --read demo-seeds/seed0 demo-seeds/seed1 ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def row(results: dict) -> str:
    s = results["summary"]
    r1 = s["t2i_r1"]
    cells = [
        str(results["config"]["seed"]),
        results["config"]["preset"],
        *(f"{r1[m]['keep']:.1f} / {r1[m]['remove']:.1f}" for m in ("stage1", "longclip", "debias")),
        f"{s['remove_drop']['longclip']:.1f}",
        f"{s['remove_drop']['debias']:.1f}",
        f"{s['drop_gap']:+.1f}",
        f"{s['keep_gap']:+.1f}",
        "yes" if s["target_met"] else "no",
        f"{results['total_s']:.0f}",
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| seed | preset | stage1 keep / remove | longclip keep / remove | debias keep / remove "
    "| longclip drop | debias drop | drop gap (>= 5) | keep gap (>= -2) | target met | wall s |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="*", default=[], help="seeds to run now")
    ap.add_argument("--quick", action="store_true", help="run the --quick preset")
    ap.add_argument("--root", type=Path, default=Path("demo-seeds"), help="where the runs go")
    ap.add_argument("--read", type=Path, nargs="*", default=[], help="finished demo folders to tabulate")
    args = ap.parse_args()
    folders = list(args.read)
    if args.seeds:
        from caption_debias.demo import preset, run_demo

        for seed in args.seeds:
            out = args.root / f"seed{seed}"
            run_demo(preset("quick" if args.quick else "full", out, seed), quiet=True)
            folders.append(out)
    print(HEADER)
    for folder in folders:
        print(row(json.loads((folder / "results.json").read_text("utf-8"))))


if __name__ == "__main__":
    main()
