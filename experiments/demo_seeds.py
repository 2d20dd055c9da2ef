"""Per-seed table of the demo's target: run `caption-debias demo` for several seeds (or read
finished runs) and print the markdown table and the across-seed verdict that docs/demo.md shows.

    .venv/bin/python experiments/demo_seeds.py --seeds 0 1 2 --root demo-seeds
    .venv/bin/python experiments/demo_seeds.py --seeds 0 --preset full --set finetune_lr=5e-4 --root /tmp/lr
    .venv/bin/python experiments/demo_seeds.py --read demo-seeds/seed0 demo-seeds/seed1 ...

--set KEY=VALUE changes one DemoConfig field of the preset (a tuning run); the change is in
each run's results.json (config) and in the table's preset column.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MEAN_REMOVE_GAP_MIN = 5.0  # over the seeds (docs/demo.md)


def _gap(g: dict) -> str:
    return f"{g['gap']:+.1f} [{g['lo']:+.1f}, {g['hi']:+.1f}]"


def row(results: dict) -> str:
    s = results["summary"]
    r1 = s["t2i_r1"]
    cfg = results["config"]
    changed = cfg.get("changed") or {}
    cells = [
        str(cfg["seed"]),
        cfg["preset"] + "".join(f" {k}={v}" for k, v in changed.items()),
        f"{r1['start']['keep']:.1f} / {r1['start']['remove']:.1f}",
        *(f"{r1[m]['keep']:.1f} / {r1[m]['remove']:.1f} / {r1[m]['move']:.1f}" for m in ("longclip", "debias")),
        _gap(s["gaps"]["remove"]),
        _gap(s["gaps"]["keep"]),
        _gap(s["gaps"]["move"]),
        "yes" if s["target_met"] else ("no" if s.get("judged", True) else "not judged"),
        f"{results['total_s']:.0f}",
        f"{sum(results['cpu_s'].values()):.0f}" if "cpu_s" in results else "-",  # runs before cpu_s: not recorded
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| seed | preset | start keep / remove | longclip keep / remove / move | debias keep / remove / move "
    "| remove gap (>= 3) | keep gap (>= -1) | move gap | this seed's target | wall s | CPU s |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def across(all_results: list[dict]) -> str:
    """The target over the seeds: every seed's part, the mean remove gap, move no worse."""
    gaps = [r["summary"]["gaps"] for r in all_results]
    mean_remove = sum(g["remove"]["gap"] for g in gaps) / len(gaps)
    mean_move = sum(g["move"]["gap"] for g in gaps) / len(gaps)
    every = all(r["summary"]["target_met"] for r in all_results)
    met = every and mean_remove >= MEAN_REMOVE_GAP_MIN and mean_move >= 0
    return (
        f"every seed's part: {'yes' if every else 'no'}; mean remove gap {mean_remove:+.2f} "
        f"(>= {MEAN_REMOVE_GAP_MIN:g}: {'yes' if mean_remove >= MEAN_REMOVE_GAP_MIN else 'no'}); "
        f"mean move gap {mean_move:+.2f} (debias no worse: {'yes' if mean_move >= 0 else 'no'}); "
        f"target {'met' if met else 'not met'} over {len(gaps)} seeds"
    )


def _value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="*", default=[], help="seeds to run now")
    ap.add_argument("--preset", default="full", help="full | quick | v1")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="change one DemoConfig field")
    ap.add_argument("--root", type=Path, default=Path("demo-seeds"), help="where the runs go")
    ap.add_argument("--read", type=Path, nargs="*", default=[], help="finished demo folders to tabulate")
    args = ap.parse_args()
    folders = list(args.read)
    if args.seeds:
        import torch

        from caption_debias.demo import preset, run_demo

        torch.set_num_threads(1)  # two seeds side by side on two cores
        changes = dict(item.split("=", 1) for item in args.set)
        for seed in args.seeds:
            out = args.root / f"seed{seed}"
            cfg = preset(args.preset, out, seed)
            fields = {f.name for f in dataclasses.fields(cfg)}
            unknown = sorted(set(changes) - fields)
            if unknown:
                sys.exit(f"--set: DemoConfig has no field(s) {unknown}")
            cfg = dataclasses.replace(cfg, changed=changes, **{k: _value(v) for k, v in changes.items()})
            run_demo(cfg, quiet=True)
            folders.append(out)
    print(HEADER)
    results = [json.loads((folder / "results.json").read_text("utf-8")) for folder in folders]
    for r in results:
        print(row(r))
    if results:
        print()
        print(across(results))


if __name__ == "__main__":
    main()
