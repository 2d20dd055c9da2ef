"""The demo world's check: its hard negatives can be told apart from the detail sentences, not
from the summary.

Two `clip` runs of `demo-small` from random init on the same `objects` train world, one on
its detail sentences alone (summary and closing dropped), one on its summaries alone; each is
evaluated on the test world with the matching text (details, or the summary) by t2i R@1 over
the whole gallery and inside each hard-negative group (chance 25% for groups of 4; identical
summaries inside a group leave only the images to choose by). The figures are in docs/demo.md.

    .venv/bin/python experiments/demo_world_check.py --work /tmp/world-check
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TEXTS = {"details": "remove", "summary": "first"}  # training text -> the eval variant that matches it


def derived_world(src: Path, dst: Path, text: str) -> None:
    """A copy of a world's ShareGPT4V file whose captions are the details or the summary alone."""
    records = json.loads((src / "sharegpt4v.json").read_text("utf-8"))
    for r in records:
        sentences = r["conversations"][1]["value"].split(". ")  # the world's sentences end in ". " only
        sentences = [s if s.endswith(".") else s + "." for s in sentences]
        details = [s for s in sentences[1:] if not s.startswith("Overall,")]
        r["conversations"][1]["value"] = " ".join(details if text == "details" else sentences[:1])
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "sharegpt4v.json").write_text(json.dumps(records), "utf-8")


def image_groups(world: Path, images) -> list[str]:
    """Each gallery image's hard-negative group, from the world's own records."""
    records = json.loads((world / "sharegpt4v.json").read_text("utf-8"))
    by_path = {(world / r["image"]).resolve(): r["group"] for r in records}
    return [by_path[Path(p).resolve()] for p in images]


def in_group_r1(sim, text_image, groups) -> float:
    """Share of texts whose own image scores above every other image of its group (ties miss)."""
    import torch

    members: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    hits = 0
    for t, own in enumerate(text_image):
        idx = torch.as_tensor(members[groups[own]])
        scores = sim[t, idx]
        hits += int((scores >= sim[t, own]).sum()) == 1
    return 100.0 * hits / len(text_image)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--train-images", type=int, default=2000)
    p.add_argument("--test-images", type=int, default=800)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--context-length", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--text", choices=tuple(TEXTS), action="append", help="default: both")
    a = p.parse_args()

    import torch

    torch.set_num_threads(1)
    from caption_debias.demo.run import CPU_RUN, budget, train_config
    from caption_debias.evaluate.retrieval import as_data, encode_images, encode_texts
    from caption_debias.evaluate.variants import make_variant
    from caption_debias.model.load import load_model
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.synth.world import write_world
    from caption_debias.train.loop import train

    w = a.work
    for split, n in (("train", a.train_images), ("test", a.test_images)):
        if not (w / "world" / split / "sharegpt4v.json").is_file():
            write_world(w / "world" / split, n, a.seed, split=split, world="objects", overwrite=True)
    test_prepared = w / "prepared" / "test"
    if not (test_prepared / "manifest.json").is_file():
        prepare(
            [w / "world" / "test" / "sharegpt4v.json"],
            test_prepared,
            PrepareOptions(format="sharegpt4v", image_root=str(w / "world" / "test"), overwrite=True, quiet=True),
        )
    results = {}
    for text in a.text or TEXTS:
        started = time.perf_counter()
        derived = w / "world" / f"train-{text}"
        derived_world(w / "world" / "train", derived, text)
        prepared = w / "prepared" / f"train-{text}"
        opts = PrepareOptions(format="sharegpt4v", image_root=str(w / "world" / "train"), overwrite=True, quiet=True)
        prepare([derived / "sharegpt4v.json"], prepared, opts)
        run = w / "runs" / text
        cfg = train_config(
            recipe="clip",
            model="demo-small",
            data=str(prepared),
            image_root=str(w / "world" / "train"),
            out=str(run),
            context_length=a.context_length,
            batch_size=64,
            seed=a.seed,
            **CPU_RUN,
            **budget(a.steps, a.lr),
        )
        train(cfg.validate())
        loaded = load_model(str(run))
        data = as_data(test_prepared, w / "world" / "test")
        images = encode_images(loaded, data.images, 256, 0)
        texts = [make_variant(s, TEXTS[text]) for s in data.captions]
        sim = encode_texts(loaded, texts, 256) @ images.t()
        groups = image_groups(w / "world" / "test", data.images)
        own = torch.as_tensor(data.text_image)
        global_r1 = 100.0 * float((sim.argmax(dim=1) == own).float().mean())
        results[text] = {
            "t2i_r1": round(global_r1, 2),
            "in_group_r1": round(in_group_r1(sim, data.text_image, groups), 2),
            "steps": a.steps,
            "seconds": round(time.perf_counter() - started, 1),
        }
        print(text, results[text], flush=True)
    (w / "world_check.json").write_text(json.dumps(results, indent=2), "utf-8")


if __name__ == "__main__":
    main()
