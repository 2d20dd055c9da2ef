"""The demo's sizes and budgets (`DemoConfig`, its presets), its stages and arms, the shipped start."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caption_debias.errors import UserError

ARMS = ("longclip", "debias")
VARIANTS = ("keep", "remove", "move", "filler:3")
GAP_VARIANTS = ("keep", "remove", "move")  # debias - longclip t2i R@1, each with an interval
STAGES = ("synth", "prepare", "stats", "start", "stretch", "longclip", "debias", "evaluate", "grounding", "report")
START = "start"  # the label of the shared start in results, tables and plots
SHIPPED_START = "shipped"
# The target on every seed (docs/demo.md): debias remove at least 3 points above longclip's,
# debias keep at least longclip keep minus 1.
REMOVE_GAP_MIN, KEEP_GAP_MIN = 3.0, -1.0


@dataclass
class DemoConfig:
    """Sizes and budgets of one demo run (`preset` picks them; tests shrink them further)."""

    out: Path
    seed: int = 0
    world: str = "objects"  # synth.world.WORLDS
    # "shipped": both arms start from the package's demo-start (experiments/demo_start.py);
    # "train": a stage-1 `short` run of `model` inside the demo (the v1 preset).
    start: str = SHIPPED_START
    model: str = "demo-small"
    image_size: int = 64
    train_images: int = 2000
    test_images: int = 800
    group_size: int = 4
    batch_size: int = 64
    stage1_steps: int = 0
    finetune_steps: int = 200
    stage1_lr: float = 5e-4
    finetune_lr: float = 1e-3
    # Fine-tune batches are random, as on a real dump, where the summary alone separates a
    # batch: that is how the shortcut is learned. The v1 stage 1 trained on whole groups.
    stage1_groups: bool = True
    finetune_groups: bool = False
    lambda_s: float = 0.1
    context_length: int = 248
    eval_batch_size: int = 256
    bootstrap_resamples: int = 2000
    workers: int = 1
    preset: str = "full"
    extra_train: dict[str, Any] = field(default_factory=dict)
    changed: dict[str, str] = field(default_factory=dict)  # a tuning run's fields changed from its preset


PRESETS = ("full", "quick", "v1")


def preset(name: str, out: Path, seed: int = 0) -> DemoConfig:
    """`full`: the measured demo (docs/demo.md); `quick`: half the worlds and half the steps, a
    result still (its remove gap's interval lies above zero on the seeds measured); `v1`: the first demo (the `layouts`
    world, its own stage 1), so its documented table can be reproduced."""
    if name == "full":
        return DemoConfig(out=Path(out), seed=seed, preset=name)
    if name == "quick":
        return DemoConfig(out=Path(out), seed=seed, preset=name, train_images=1000, test_images=400, finetune_steps=100)
    if name == "v1":
        return DemoConfig(
            out=Path(out),
            seed=seed,
            preset=name,
            world="layouts",
            start="train",
            stage1_steps=600,
            finetune_steps=300,
            finetune_lr=2e-3,
        )
    raise UserError(f"unknown demo preset {name!r} ({', '.join(PRESETS)})")


def shipped_start() -> Path:
    """The package's demo-start folder (an open_clip local-dir: export, fp16 weights)."""
    from importlib import resources

    folder = Path(str(resources.files("caption_debias").joinpath("assets").joinpath("demo-start")))
    if not (folder / "open_clip_config.json").is_file():
        raise UserError(f"{folder}: the shipped demo start is missing (reinstall caption-debias)")
    return folder
