"""torch and open_clip imported once per process, with only the open_clip integrations a model uses.

`import open_clip` runs its package `__init__`, which imports every adapter whatever the model:
`open_clip.hf_model` imports transformers, `open_clip.timm_model` imports timm (and timm imports
wandb). Importing a submodule (`open_clip.factory`) runs that `__init__` too. A plain CLIP config
(tiny, demo-small, demo-start, ViT-B-16) uses neither adapter, so while open_clip is imported the
packages no model of the command names are made unimportable: each adapter catches the
ImportError and sets its module to None (its own "not installed" path). They are importable again
right after (train's --wandb imports wandb itself). A spec whose config is not on disk before the
load (hf-hub:) imports them all. A later model that needs one gets its adapter imported again.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable

# package -> (the config section and key that use it, the open_clip module that imports it)
INTEGRATIONS = {
    "timm": ("vision_cfg", "timm_model_name", "open_clip.timm_model"),
    "transformers": ("text_cfg", "hf_model_name", "open_clip.hf_model"),
}
CONFIG_FILE = "open_clip_config.json"


def _named_config(name: str) -> dict | None:
    """An architecture's model config from the package's or open_clip's config files, read without open_clip."""
    folders = [Path(str(resources.files("caption_debias").joinpath("assets")))]
    found = importlib.util.find_spec("open_clip")
    if found is not None and found.submodule_search_locations:
        folders += [Path(p) / "model_configs" for p in found.submodule_search_locations]
    for folder in folders:
        path = folder / f"{name}.json"
        if path.is_file():
            return json.loads(path.read_text("utf-8"))
    return None


def _folder_config(folder: Path) -> dict | None:
    path = folder / CONFIG_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text("utf-8")).get("model_cfg")


def model_config(spec: str, pretrained: str | None = None) -> dict | None:
    """The open_clip model config `spec` will build, read from disk; None where it is not known before the load."""
    from caption_debias.model.names import is_shipped, shipped_folder

    spec = str(spec)
    try:
        if is_shipped(spec):
            return _folder_config(shipped_folder(spec))
        if spec.startswith("local-dir:"):
            return _folder_config(Path(spec[len("local-dir:") :]))
        if spec.startswith("hf-hub:"):
            return None
        path = Path(spec)
        if path.is_dir():
            return _folder_config(path)
        if path.is_file():
            return _named_config(pretrained) if pretrained else None
        return _named_config(spec)
    except (OSError, ValueError, AttributeError):  # an unreadable config: load_model names the fault
        return None


def integrations(models: Iterable[tuple[str, str | None]]) -> set[str]:
    """The integration packages the models' configs use; all of them when one config is not known."""
    needed: set[str] = set()
    for spec, pretrained in models:
        cfg = model_config(spec, pretrained)
        if cfg is None:
            return set(INTEGRATIONS)
        for package, (section, key, _) in INTEGRATIONS.items():
            if (cfg.get(section) or {}).get(key):
                needed.add(package)
        if cfg.get("multimodal_cfg"):  # CoCa's generation helpers come from transformers
            needed.add("transformers")
    return needed


def import_open_clip(models: Iterable[tuple[str, str | None]] = (), tell: Callable[[str], None] | None = None):
    """torch and open_clip, imported with only the integrations `models` (spec, pretrained) use.
    `tell` (a command's `say` or `note`) hears it first when they are not imported yet: seconds,
    tens on a loaded machine, that would otherwise pass in silence."""
    models = list(models)
    needed = integrations(models)
    if "open_clip" in sys.modules:
        _reimport_adapters(needed)
        return sys.modules["open_clip"]
    if tell is not None:
        tell("importing torch and open_clip")
    import torch  # noqa: F401  (first, on its own: open_clip's import is then open_clip's)

    hidden = [p for p in INTEGRATIONS if p not in needed and p not in sys.modules]
    for package in hidden:
        sys.modules[package] = None  # type: ignore[assignment]  # `import` raises ImportError
    try:
        import open_clip
    finally:
        for package in hidden:
            if sys.modules.get(package, 0) is None:
                del sys.modules[package]
    return open_clip


def _reimport_adapters(needed: set[str]) -> None:
    """An adapter imported without its package, for a model that needs it: imported again, now with it."""
    for package in needed:
        adapter = sys.modules.get(INTEGRATIONS[package][2])
        if adapter is not None and getattr(adapter, package, True) is None and importlib.util.find_spec(package):
            importlib.reload(adapter)  # the module's classes read the package from its globals, refilled here
