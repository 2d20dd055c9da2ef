"""`caption-debias synth`: write a synthetic long-caption world in the ShareGPT4V layout."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import config_option, out_option, quiet_option


def synth(
    out_arg: Optional[Path] = typer.Argument(None, hidden=True, show_default=False),
    out: Optional[Path] = out_option("Output folder: OUT/sharegpt4v.json and OUT/images/ are written there.", None),
    n: int = typer.Option(..., "--n", help="Number of images (scenes) to write."),
    seed: int = typer.Option(0, "--seed", help="Random seed; the same seed gives byte-identical output."),
    image_size: int = typer.Option(64, "--image-size", help="Side of the square images in pixels."),
    split: str = typer.Option("train", "--split", help="Split name stored in each record's id and extra fields."),
    group_size: int = typer.Option(
        4, "--group-size", help="Scenes per hard-negative group (they share their summary); 1 = no groups."
    ),
    world: str = typer.Option(
        "objects",
        "--world",
        help="objects (group members differ in which colours and shapes appear) | layouts (only in where they sit).",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing OUT/sharegpt4v.json."),
    plant: bool = typer.Option(
        False,
        "--plant",
        help="Plant faults (a swapped-in detail sentence of another scene, another image's caption, a re-drawn copy "
        "of a scene) and write the answer key to OUT/planted.json (docs/demo.md, 'Planted faults').",
    ),
    plant_hallucinated: Optional[float] = typer.Option(
        None, "--plant-hallucinated", help="With --plant (0.20): fraction of captions with one detail sentence swapped."
    ),
    plant_mismatched: Optional[float] = typer.Option(
        None, "--plant-mismatched", help="With --plant (0.05): fraction of rows given the caption of another image."
    ),
    plant_redrawn: Optional[float] = typer.Option(
        None,
        "--plant-redrawn",
        help="With --plant (0.05): fraction of rows that are a re-drawn copy of an earlier scene.",
    ),
    quiet: bool = quiet_option(),
    config: Optional[Path] = config_option(),
) -> None:
    """Write a synthetic long-caption dataset (shape scenes drawn with PIL) that `prepare` reads as ShareGPT4V."""
    from caption_debias.errors import UserError
    from caption_debias.synth.plant import PlantSpec
    from caption_debias.synth.world import write_world

    if out_arg is not None:  # the older spelling `synth OUT`
        if out is not None:
            raise UserError("give the output folder once: --out OUT")
        typer.echo("caption-debias synth: OUT as an argument is now --out OUT (the old spelling still works)", err=True)
        out = out_arg
    if out is None:
        raise UserError("missing --out OUT (the folder to write the world into)")
    fractions = {"hallucinated": plant_hallucinated, "mismatched": plant_mismatched, "redrawn": plant_redrawn}
    given = {kind: value for kind, value in fractions.items() if value is not None}
    if given and not plant:
        raise UserError(f"--plant-{next(iter(given))} goes with --plant")
    spec = PlantSpec(**given) if plant else None
    info = write_world(
        out,
        n,
        seed,
        image_size=image_size,
        split=split,
        group_size=group_size,
        overwrite=overwrite,
        world=world,
        plant=spec,
    )
    if not quiet:
        typer.echo(
            f"wrote {info['images']} images in {info['groups']} groups "
            f"({info['mean_sentences']:.1f} sentences a caption) to {info['path']}"
        )
        if "planted" in info:
            counts = ", ".join(f"{count} {kind}" for kind, count in info["planted"].items())
            typer.echo(f"planted {counts}; the key is in {info['planted_path']}")
