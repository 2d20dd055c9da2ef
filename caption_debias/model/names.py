"""Model names every model flag takes, decided without importing torch or open_clip.

`demo-start` is the small open_clip model shipped in `caption_debias/assets/demo-start/` (an
open_clip `local-dir:` folder; docs/demo.md has its model card): trained weights, so a score,
eval or probe with it means something, unlike `tiny`, `demo-small` or any open_clip name
without `--pretrained`, which are random initialisations.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from caption_debias.errors import UserError

SHIPPED = {"demo-start": "demo-start"}  # name -> folder under caption_debias/assets/
PREFIXES = ("local-dir:", "hf-hub:")


def shipped_folder(name: str) -> Path:
    """The folder of a shipped model (its open_clip_config.json and weights)."""
    folder = Path(str(resources.files("caption_debias").joinpath("assets", SHIPPED[name])))
    if not (folder / "open_clip_config.json").is_file():
        raise UserError(f"{folder}: the shipped model {name} is missing (reinstall caption-debias)")
    return folder


def is_shipped(spec: str) -> bool:
    return str(spec) in SHIPPED


def random_weights(spec: str, pretrained: str | None) -> bool:
    """True when `spec` loads as a random initialisation: an open_clip architecture name (tiny,
    demo-small, ViT-B-16, ...) without --pretrained; not a shipped model, a folder, a file or a
    local-dir:/hf-hub: spec."""
    spec = str(spec)
    if pretrained or is_shipped(spec) or spec.startswith(PREFIXES):
        return False
    return not Path(spec).exists()


def random_weights_warning(command: str, spec: str) -> str:
    """One line for a command that scores or evaluates with a randomly initialised model."""
    return (
        f"caption-debias: warning: {command} with {spec} without --pretrained: random weights, so its "
        "scores say nothing about the data; give --pretrained (e.g. openai for ViT-B-16) or use the "
        "shipped small model demo-start"
    )


def warn_random_weights(command: str, spec: str, pretrained: str | None, quiet: bool = False) -> bool:
    """Print the warning line on stderr when `spec` has random weights (not with -q); True when it has."""
    import sys

    random = random_weights(spec, pretrained)
    if random and not quiet:
        print(random_weights_warning(command, spec), file=sys.stderr, flush=True)
    return random
