"""`caption-debias synth`: write a synthetic long-caption world in the ShareGPT4V layout."""

from __future__ import annotations

from pathlib import Path

import typer


def synth(
    out: Path = typer.Argument(..., help="Output folder: OUT/sharegpt4v.json and OUT/images/ are written there."),
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
) -> None:
    """Write a synthetic long-caption dataset (shape scenes drawn with PIL) that `prepare` reads as ShareGPT4V."""
    from caption_debias.synth.world import write_world

    info = write_world(
        out, n, seed, image_size=image_size, split=split, group_size=group_size, overwrite=overwrite, world=world
    )
    typer.echo(
        f"wrote {info['images']} images in {info['groups']} groups "
        f"({info['mean_sentences']:.1f} sentences a caption) to {info['path']}"
    )
