"""What a model spec will load, in words, without importing torch or open_clip: the
"loading model ..." line a command prints before its heavy imports (model/load.py reads the
same specs)."""

from __future__ import annotations

from pathlib import Path

from caption_debias.model.names import check_model_name, is_shipped, random_weights, shipped_folder
from caption_debias.progress import format_bytes

CHECKPOINTS = "checkpoints"  # model/load.py: a run folder's checkpoints, step_*.pt


def _size(path: Path) -> str:
    """A file's size, or the sum of the files directly in a folder."""
    try:
        if path.is_dir():
            return format_bytes(sum(p.stat().st_size for p in path.iterdir() if p.is_file()))
        return format_bytes(path.stat().st_size)
    except OSError:
        return "size unknown"


def describe(spec: str, pretrained: str | None = None) -> str:
    """`local-dir:DIR (15.2 MB)`, `run RUN (step_00000300.pt, 15.2 MB)`, `ViT-B-16 (random weights)`, ...;
    a name no open_clip config holds is load_model's one line (UserError), not a "loading" line first."""
    spec = str(spec)
    check_model_name(spec)
    if is_shipped(spec):
        return f"{spec}, the shipped model ({_size(shipped_folder(spec))})"
    if spec.startswith("local-dir:"):
        return f"{spec} ({_size(Path(spec[len('local-dir:') :]))})"
    if spec.startswith("hf-hub:"):
        return f"{spec} (the Hugging Face hub, or its local cache)"
    path = Path(spec)
    if path.is_dir():
        found = sorted((path / CHECKPOINTS).glob("step_*.pt"))
        return f"run {spec} ({found[-1].name}, {_size(found[-1])})" if found else f"run {spec}"
    if path.is_file():
        return f"{spec} ({_size(path)}, architecture {pretrained})" if pretrained else f"{spec} ({_size(path)})"
    if pretrained and Path(pretrained).is_file():
        return f"{spec} with weights {pretrained} ({_size(Path(pretrained))})"
    if pretrained:
        return f"{spec} pretrained {pretrained}"
    if "/" in spec or spec.startswith((".", "~")) or not random_weights(spec, pretrained):
        return spec  # a path that is not there: load_model names the fault
    return f"{spec} (random weights)"


WEIGHT_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")  # what open_clip's local-dir: reads


def _file(path: Path) -> str:
    return f"{path} ({_size(path)})"


def weights_text(spec: str, pretrained: str | None = None) -> str | None:
    """What load_model reads once torch and open_clip are imported: `reading weights FILE (15.2 MB)`,
    `building tiny with random weights`; None where the load itself names a fault first."""
    spec = str(spec)
    folder = None
    if is_shipped(spec):
        folder = shipped_folder(spec)
    elif spec.startswith("local-dir:"):
        folder = Path(spec[len("local-dir:") :])
    if folder is not None:
        found = [folder / name for name in WEIGHT_FILES if (folder / name).is_file()]
        return f"reading weights {_file(found[0])}" if found else None
    if spec.startswith("hf-hub:"):
        return f"reading weights of {spec} (the Hugging Face hub, or its local cache)"
    path = Path(spec)
    if path.is_dir():
        found = sorted((path / CHECKPOINTS).glob("step_*.pt"))
        return f"reading weights {_file(found[-1])}" if found else None
    if path.is_file():
        return f"reading weights {_file(path)}"
    if pretrained and Path(pretrained).is_file():
        return f"reading weights {_file(Path(pretrained))}"
    if pretrained:
        return f"reading weights {spec} pretrained {pretrained} (downloaded once, then from the local cache)"
    if "/" in spec or spec.startswith((".", "~")):
        return None  # a path that is not there: load_model names the fault
    if random_weights(spec, pretrained):
        return f"building {spec} with random weights"
    return None


def stretch_note(name: str, info: dict) -> str | None:
    """One line for a model whose text positions were stretched (model/stretch.py) and not trained
    since, or only in warm-up (load_model's info: a run folder's checkpoint, or an export of one);
    None otherwise."""
    stretched, step = info.get("stretched"), info.get("step")
    if not isinstance(stretched, dict) or not isinstance(step, int):
        return None
    warmup = int(stretched.get("warmup_steps") or 0)
    if step > 0 and step >= warmup:
        return None
    start = stretched.get("from")
    span = f"{start} -> {stretched.get('to')}" if start else f"to {stretched.get('to')}"
    trained = "not trained since (step 0)" if step == 0 else f"trained only {step} steps, all in warm-up ({warmup})"
    return (
        f"note: {name}'s text positions were stretched {span} and {trained}: the likely cause of a lower "
        "short-text recall than its start's"
    )
