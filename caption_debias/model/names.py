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
    folder = Path(str(resources.files("caption_debias").joinpath("assets").joinpath(SHIPPED[name])))
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


def unknown_model_text(spec: str) -> str:
    return (
        f"unknown model {spec!r}: not an open_clip model name, run folder, checkpoint file, local-dir: or hf-hub: spec"
    )


def architecture_names() -> set[str] | None:
    """open_clip's model names as its config files list them, and the configs shipped here (tiny,
    demo-small), read without importing open_clip (which imports torch); None without open_clip."""
    import importlib.util

    found = importlib.util.find_spec("open_clip")
    if found is None or not found.submodule_search_locations:
        return None
    import json

    folders = [Path(p) / "model_configs" for p in found.submodule_search_locations]
    names = {f.stem for folder in folders if folder.is_dir() for f in folder.glob("*.json")}
    shipped = Path(str(resources.files("caption_debias").joinpath("assets")))
    for f in shipped.glob("*.json"):  # the configs load.py registers: open_clip's own test for a model config
        if {"embed_dim", "vision_cfg", "text_cfg"} <= set(json.loads(f.read_text("utf-8"))):
            names.add(f.stem)
    return names


def check_model_name(spec: str) -> None:
    """A bare name (no path, no prefix) that no open_clip config holds: the one line load_model says,
    before torch is imported."""
    spec = str(spec)
    if is_shipped(spec) or spec.startswith(PREFIXES) or "/" in spec or spec.startswith((".", "~")):
        return
    if Path(spec).exists():
        return
    names = architecture_names()
    if names is not None and spec not in names:
        raise UserError(unknown_model_text(spec))


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
