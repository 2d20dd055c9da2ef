"""Per-step overhead of each recipe's training loop against a plain open_clip contrastive step.

Ours: `caption_debias.train.loop.train` end to end (DataLoader, cached images, augment,
collate, loss with PCA and label smoothing, logging) on a synthetic world prepared by
`prepare`; the step time comes from metrics.jsonl windows after a warm-up window.
Baseline: a hand loop over fixed in-memory tensors (random pixels, one batch of the same
token ids) with the same model compute (the same stretched context and number of text
inputs) and open_clip.ClipLoss + AdamW.
Ours runs twice: at the full context (--no-trim-padding: the overhead figure) and with the
default --trim-padding (text batches cut after their latest EOT: a speed-up, not overhead).
Both alternate `--repeats` times; medians are reported. On a shared CPU the noise is
large: read the ratio, not the absolute times.

    .venv/bin/python benchmarks/bench_train_step_overhead.py [--model tiny --batch 64 --steps 30 --recipes debias,clip,short]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (this checkout on sys.path when it is not installed)

WINDOW = 10


def make_data(tmp: Path, n: int) -> tuple[Path, Path]:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.synth.world import write_world

    write_world(tmp / "world", n=n, seed=0, world="layouts")
    prepare(
        [tmp / "world" / "sharegpt4v.json"],
        tmp / "prepared",
        PrepareOptions(format="sharegpt4v", image_root=str(tmp / "world"), quiet=True),
    )
    return tmp / "prepared", tmp / "world"


def ours(recipe: str, data: Path, images: Path, out: Path, args, trim: bool) -> float:
    """Seconds per step (median over the windows after the first)."""
    from caption_debias.train.config import TrainConfig
    from caption_debias.train.loop import train

    run = train(
        TrainConfig(
            data=str(data),
            image_root=str(images),
            out=str(out),
            model=args.model,
            recipe=recipe,
            batch_size=args.batch,
            max_steps=args.steps,
            log_every=WINDOW,
            checkpoint_every=10**9,
            cache_images=True,
            report_to="",
            quiet=True,
            precision="fp32",
            lr=1e-5,
            warmup_steps=0,
            trim_padding=trim,
        )
    )
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    # The first window includes the image cache fill and DataLoader start.
    rates = [d["images_per_s"] for d in lines[1:]] or [lines[-1]["images_per_s"]]
    return args.batch / statistics.median(rates)


def plain(recipe: str, args, data: Path) -> float:
    import open_clip
    import torch

    from caption_debias.model.load import load_model
    from caption_debias.model.stretch import stretch_positional_embedding

    torch.manual_seed(0)
    loaded = load_model(args.model)
    model = loaded.model.train()
    if recipe != "short":
        stretch_positional_embedding(model, 248, 20, "knowledge" if recipe != "clip" else "uniform", freeze_head=False)
    ctx = model.context_length
    texts = 2 if recipe in ("debias", "longclip") else 1
    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    image = torch.randn(args.batch, 3, size, size)
    # The same token ids ours trains on (one batch of real texts), so the embedding work matches.
    from caption_debias.augment import DebiasOptions
    from caption_debias.train.data import TrainSamples, collate, load_rows

    samples = TrainSamples(load_rows(data, loaded.tokenizer), None, None, recipe, ctx, 0, DebiasOptions())
    batch = collate([samples.text_only((0, i)) for i in range(args.batch)])
    text = torch.cat([batch["long"], batch["short"]]) if texts == 2 else batch["long"]
    loss_fn = open_clip.ClipLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        img_f, txt_f, scale = model(image, text)
        loss = sum(loss_fn(img_f, txt_f[i * args.batch : (i + 1) * args.batch], scale) for i in range(texts))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t)
    windows = [sum(times[i : i + WINDOW]) / WINDOW for i in range(WINDOW, args.steps, WINDOW)]
    return statistics.median(windows or [statistics.median(times)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30, help="per run; the first window of 10 steps is not timed")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--recipes", default="debias,longclip,clip,short")
    ap.add_argument("--skip-trim", action="store_true", help="only the full-context overhead runs")
    args = ap.parse_args()
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        data, images = make_data(Path(tmp), max(args.batch * 4, 256))
        print(
            f"model {args.model}, batch {args.batch}, {args.steps} steps x {args.repeats}, "
            f"torch threads {torch.get_num_threads()}"
        )
        for recipe in args.recipes.split(","):
            o, p, t = [], [], []
            for r in range(args.repeats):
                # Alternate the order, so a load change on the shared machine does not favour one side.
                pair = [
                    lambda recipe=recipe, p=p: p.append(plain(recipe, args, data)),
                    lambda recipe=recipe, o=o, r=r: o.append(
                        ours(recipe, data, images, Path(tmp) / f"run_{recipe}_{r}", args, trim=False)
                    ),
                ]
                for run_one in pair if r % 2 == 0 else pair[::-1]:
                    run_one()
                if not args.skip_trim:
                    t.append(ours(recipe, data, images, Path(tmp) / f"trim_{recipe}_{r}", args, trim=True))
            po, pp = statistics.median(o), statistics.median(p)
            pt = statistics.median(t) if t else float("nan")
            print(
                f"{recipe:9s} plain open_clip {pp * 1e3:7.1f} ms/step {[round(x * 1e3) for x in p]} | ours, full context {po * 1e3:7.1f} ms/step "
                f"{[round(x * 1e3) for x in o]} (overhead {100 * (po / pp - 1):+.1f}%) | ours, --trim-padding {pt * 1e3:7.1f} ms/step "
                f"({pp / pt:.2f}x plain)",
                flush=True,
            )


if __name__ == "__main__":
    main()
