"""Does `train` still compute the same thing? Digests of every checkpoint tensor and metrics line.

Runs a few CPU steps of each recipe (and the paths around them: detected summaries, grouped
batches, no clipping, untrimmed texts, bf16 autocast, a GradScaler, skipped images, resume,
--max-steps 0) on the shipped `tiny` model, and prints one sha256 per checkpoint tensor,
optimizer state, counter set and metrics.jsonl (minus the wall-clock `images_per_s`). To compare
two versions of the code, save the digests under one and compare under the other; PYTHONPATH
picks the code:

    mkdir -p /tmp/train-before && git archive main | tar -x -C /tmp/train-before
    PYTHONPATH=/tmp/train-before .venv/bin/python benchmarks/check_train_identity.py --save /tmp/before.json
    .venv/bin/python benchmarks/check_train_identity.py --compare /tmp/before.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

import _common  # noqa: F401  (train_fixtures importable)
import torch

ROOT = Path(__file__).resolve().parents[1]

BASE = dict(max_steps=3)  # over train_fixtures.tiny_config: a few fp32 CPU steps of `tiny`
# name -> (options over BASE, images: "good" or "missing", CPU GradScaler instead of none)
SCENARIOS: dict[str, tuple[dict, str, bool]] = {
    "debias": ({"recipe": "debias"}, "good", False),
    "debias-detected-grouped-noclip": (
        {"recipe": "debias", "drop_summary": "detected", "group_key": "group", "group_size": 2, "grad_clip": None},
        "good",
        False,
    ),
    "debias-ablations": ({"recipe": "debias", "no_subsample": True, "no_pad": True, "seed": 3}, "good", False),
    "longclip": ({"recipe": "longclip"}, "good", False),
    "clip": ({"recipe": "clip"}, "good", False),
    "clip-untrimmed": ({"recipe": "clip", "trim_padding": False}, "good", False),
    "short-missing-image": ({"recipe": "short"}, "missing", False),
    "debias-bf16": ({"recipe": "debias", "precision": "amp_bf16"}, "good", False),
    "debias-gradscaler": ({"recipe": "debias"}, "good", True),
    "longclip-max-steps-0": ({"recipe": "longclip", "max_steps": 0}, "good", False),
}


def digest(obj) -> str:
    """sha256 over a nested structure of tensors, numbers and strings, in a fixed order."""
    h = hashlib.sha256()

    def feed(x):
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(x, dict):
            h.update(b"{")
            for k in sorted(x, key=str):
                h.update(repr(k).encode())
                feed(x[k])
            h.update(b"}")
        elif isinstance(x, (list, tuple)):
            h.update(b"[")
            for v in x:
                feed(v)
            h.update(b"]")
        else:
            h.update(repr(x).encode())

    feed(obj)
    return h.hexdigest()


def run_digests(run: Path, tmp: Path) -> dict[str, str]:
    out = {}
    for ck in sorted((run / "checkpoints").glob("*.pt")):
        state = torch.load(ck, weights_only=True)
        for name, tensor in state["model"].items():
            out[f"{ck.stem}/model/{name}"] = digest(tensor)
        out[f"{ck.stem}/optimizer"] = digest(state["optimizer"])
        out[f"{ck.stem}/scaler"] = digest(state.get("scaler", {}))
        out[f"{ck.stem}/rng"] = digest(state["rng"])
        out[f"{ck.stem}/counters+step"] = digest([state["counters"], state["step"]])
    lines = []
    if (run / "metrics.jsonl").is_file():
        for line in (run / "metrics.jsonl").read_text().splitlines():
            d = json.loads(line)
            d.pop("images_per_s")
            lines.append(d)
    out["metrics.jsonl"] = digest(json.dumps(lines, sort_keys=True))
    out["config.json"] = digest((run / "config.json").read_text().replace(str(tmp), "TMP"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--save", type=Path, help="write the digests to this JSON file")
    group.add_argument("--compare", type=Path, help="compare with digests saved by --save; exit 1 on a difference")
    args = ap.parse_args()

    from train_fixtures import tiny_config, train_set

    from caption_debias.train import loop

    print(f"code: {Path(loop.__file__).resolve().parents[2]}", file=sys.stderr)
    torch.set_num_threads(1)
    now: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data, missing, good = train_set(tmp / "data")
        # where the precision set-up lives: train/precision.autocast_for, run_setup.precision, or loop._precision
        try:
            from caption_debias.train import precision as holder

            attr, cpu_scaler = "autocast_for", lambda *a: (nullcontext, True, None)
        except ImportError:
            try:
                from caption_debias.train import run_setup as holder

                attr = "precision"
            except ImportError:
                holder, attr = loop, "_precision"
            cpu_scaler = lambda *a: (nullcontext, torch.amp.GradScaler("cpu"))  # noqa: E731
        real_precision = getattr(holder, attr)
        for name, (options, images, scaler) in SCENARIOS.items():
            cfg = tiny_config(data, good if images == "good" else missing, tmp / name, **{**BASE, **options})
            if scaler:  # the CUDA amp path's scale/unscale/clip/step/update, on CPU
                setattr(holder, attr, cpu_scaler)
            try:
                loop.train(cfg)
            finally:
                setattr(holder, attr, real_precision)
            now.update({f"{name}/{k}": v for k, v in run_digests(tmp / name, tmp).items()})
        # resume: 2 steps of a 4-step run, then the rest with --resume
        loop.train(tiny_config(data, good, tmp / "resume", recipe="debias", max_steps=2))
        loop.train(tiny_config(data, good, tmp / "resume", recipe="debias", max_steps=4, resume="latest"))
        now.update({f"resume/{k}": v for k, v in run_digests(tmp / "resume", tmp).items()})

    print(f"{len(now)} digests over {len(SCENARIOS) + 1} runs", file=sys.stderr)
    if args.save:
        args.save.write_text(json.dumps(now, indent=1, sort_keys=True))
    if args.compare:
        old = json.loads(args.compare.read_text())
        differ = sorted(k for k in set(now) | set(old) if now.get(k) != old.get(k))
        for k in differ:
            print(f"DIFFERS {k}: now {str(now.get(k))[:16]} saved {str(old.get(k))[:16]}")
        print(f"{len(now) - len(differ)} of {len(set(now) | set(old))} digests identical")
        sys.exit(1 if differ else 0)
    if not args.save:
        for k, v in now.items():
            print(f"{v[:16]}  {k}")


if __name__ == "__main__":
    main()
