"""SynthOptions: every option of `caption-debias synth`, the one source of defaults and help.

The CLI (cli/synth_cmd.py) reads each flag's default and help text from these fields, as
`train` reads TrainConfig's; synth/world.py `run_synth` writes the world they describe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caption_debias.errors import UserError
from caption_debias.options import OverwriteOptions, QuietOptions, option, required
from caption_debias.synth.plant import KINDS, PlantSpec

WORLDS = ("objects", "layouts")
FRACTION: dict[str, Any] = {"min": 0.0, "max": 1.0, "max_open": True}  # a --plant-KIND fraction: in [0, 1)


@dataclass
class SynthOptions(OverwriteOptions, QuietOptions):
    """Every option of `caption-debias synth` (the CLI reads defaults and --help from here)."""

    n: int = required("Number of images (scenes) to write.", min=1)
    seed: int = option(0, "Random seed; the same seed gives byte-identical output.")
    image_size: int = option(64, "Side of the square images in pixels.", min=16)
    split: str = option("train", "Split name stored in each record's id and extra fields.")
    group_size: int = option(4, "Scenes per hard-negative group (they share their summary); 1 = no groups.", min=1)
    world: str = option(
        "objects",
        "objects (group members differ in which colours and shapes appear) | layouts (only in where they sit).",
        choices=WORLDS,
    )
    plant: bool = option(
        False,
        "Plant faults (a swapped-in detail sentence of another scene, another image's caption, a re-drawn copy "
        "of a scene) and write the answer key to OUT/planted.json (docs/demo.md, 'Planted faults').",
    )
    # None: PlantSpec's default fraction (named in the help), so a fraction given without --plant is seen
    plant_hallucinated: float | None = option(
        None, "With --plant (0.20): fraction of captions with one detail sentence swapped.", **FRACTION
    )
    plant_mismatched: float | None = option(
        None, "With --plant (0.05): fraction of rows given the caption of another image.", **FRACTION
    )
    plant_redrawn: float | None = option(
        None, "With --plant (0.05): fraction of rows that are a re-drawn copy of an earlier scene.", **FRACTION
    )

    plant_curate_faults: bool = option(
        False,
        "With --plant: also plant the faults curate finds (duplicate and re-encoded images, duplicate and "
        "near-duplicate captions, repetition loops, cut-off captions, broken, tiny and missing images) at rates a "
        "raw dump has, each in the answer key.",
    )

    plant_eval_leaks: str | None = option(
        None,
        "With --plant: an evaluation world (a synth folder of another --split) some of whose rows this world "
        "copies (picture, caption or both), each in the answer key; curate --decontaminate "
        "sharegpt4v-1k=EVAL/sharegpt4v.json finds them.",
    )

    def fractions(self) -> dict[str, float]:
        """The --plant-KIND fractions given, by kind."""
        given = {kind: getattr(self, f"plant_{kind}") for kind in KINDS}
        return {kind: value for kind, value in given.items() if value is not None}

    def plant_spec(self) -> PlantSpec | None:
        """What to plant (None without --plant)."""
        if not self.plant:
            return None
        return PlantSpec.dump(**self.fractions()) if self.plant_curate_faults else PlantSpec(**self.fractions())

    def check(self) -> None:
        given = self.fractions()
        if self.plant_curate_faults and not self.plant:
            raise UserError("--plant-curate-faults goes with --plant")
        if self.plant_eval_leaks is not None and not self.plant:
            raise UserError("--plant-eval-leaks goes with --plant")
        if given and not self.plant:
            raise UserError(f"--plant-{next(iter(given))} goes with --plant")
