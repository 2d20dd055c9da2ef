"""Every model spec -> LoadedModel (open_clip CLIP + transforms + tokenizer).

Specs: `demo-start` (the shipped small model with trained weights, model/names.py); an open_clip
model name (incl. the shipped configs `tiny` and `demo-small`) with an optional pretrained tag
or checkpoint file; `local-dir:DIR` / `hf-hub:ORG/REPO`; a checkpoint file path with the
architecture name given as `pretrained`; or a training run folder (RUN/config.json +
RUN/checkpoints/, the latest checkpoint is loaded). Files are read weights-only
(torch.load(weights_only=True) or safetensors): nothing is ever unpickled.
"""

from __future__ import annotations

import json
import logging
import pickle
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from caption_debias.errors import UserError
from caption_debias.model.names import is_shipped, shipped_folder, unknown_model_text

log = logging.getLogger(__name__)

# open_clip's warnings for a model built without weights ("no CLIP weights found", "initialized randomly")
NO_WEIGHTS_WARNINGS = ("no CLIP weights found", "Model initialized randomly")


class _NoWeightsWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(text in record.getMessage() for text in NO_WEIGHTS_WARNINGS)


@contextmanager
def no_weights_warnings() -> Iterator[None]:
    """Silence open_clip's "no weights" warnings: while building a model whose weights load right after,
    and around score, eval and probe's loads, which say "random weights" in their own line (model/names.py)."""
    quiet = _NoWeightsWarning()
    root = logging.getLogger()  # open_clip warns through logging.warning, the root logger
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)


RUN_CONFIG = "config.json"
RUN_MODEL_CONFIG = "open_clip_config.json"  # same file name open_clip's local-dir: reads
CHECKPOINT_DIR = "checkpoints"


@dataclass
class LoadedModel:
    model: Any  # open_clip CLIP
    preprocess: Callable  # eval image transform
    train_preprocess: Callable
    tokenizer: Any  # open_clip's: list[str] -> LongTensor [N, context_length]; has sot_token_id, eot_token_id
    context_length: int
    name: str  # open_clip architecture name (or the spec for local-dir/hf-hub)
    spec: str
    info: dict = field(default_factory=dict)  # where the weights came from
    model_cfg: dict | None = None  # open_clip model config of the architecture (as loaded)

    def open_clip_config(self) -> dict:
        """{"model_cfg", "preprocess_cfg"} at the model's current context: what local-dir: reads."""
        import copy

        import open_clip

        if self.model_cfg is None:
            raise UserError(f"no open_clip config known for {self.spec}")
        cfg = copy.deepcopy(self.model_cfg)
        cfg["text_cfg"]["context_length"] = int(self.model.context_length)
        return {"model_cfg": cfg, "preprocess_cfg": open_clip.get_model_preprocess_cfg(self.model)}

    def set_context(self, context_length: int) -> None:
        """After stretching: a tokenizer for the new context."""
        self.context_length = int(context_length)
        self.tokenizer = tokenizer_for(self.info.get("tokenizer", self.name), self.context_length)


@lru_cache(maxsize=1)
def register_shipped_configs() -> None:
    """Make the package's model configs (e.g. `tiny`) known to open_clip by name."""
    import open_clip

    for entry in resources.files("caption_debias").joinpath("assets").iterdir():
        if entry.name.endswith(".json"):
            with resources.as_file(entry) as path:
                open_clip.add_model_config(Path(path))


def tokenizer_for(tok_name: str, context: int) -> Any:
    """open_clip's tokenizer for a model name or local-dir spec. Where open_clip would build its plain CLIP
    BPE tokenizer, one per context is built and shared: each build reads and indexes the whole BPE file,
    and a run's train, eval, export and score load the same model several times."""
    import open_clip

    if _plain_clip_bpe(tok_name):
        return _clip_bpe(context)
    return open_clip.get_tokenizer(tok_name, context_length=context)


def _plain_clip_bpe(tok_name: str) -> bool:
    """Whether open_clip.get_tokenizer(tok_name) gives SimpleTokenizer with no options (its own rule)."""
    import open_clip

    if tok_name.startswith("local-dir:"):
        path = Path(tok_name.removeprefix("local-dir:")) / "open_clip_config.json"
        try:
            cfg = json.loads(path.read_text("utf-8")).get("model_cfg")
        except (OSError, ValueError):
            return False  # open_clip's own call says what is wrong
    elif ":" in tok_name or "siglip" in tok_name.lower():
        return False
    else:
        cfg = open_clip.get_model_config(tok_name)
    if not isinstance(cfg, dict):
        return False
    text = cfg.get("text_cfg") or {}
    return not text.get("hf_tokenizer_name") and not text.get("tokenizer_kwargs")


@lru_cache(maxsize=8)
def _clip_bpe(context: int) -> Any:
    from open_clip.tokenizer import SimpleTokenizer

    return SimpleTokenizer(context_length=context)


# Lines of torch's weights-only refusal that explain torch, not the file.
_TORCH_BOILERPLATE = ("Weights only load failed", "Please file an issue", "Check the documentation")


def unreadable(what: str, exc: BaseException) -> UserError:
    """One line for a model file that cannot be read weights-only: Python objects in it, or torn / foreign."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if isinstance(exc, pickle.UnpicklingError) and any("GLOBAL" in line for line in lines):
        detail = next(line for line in lines if "GLOBAL" in line)
        return UserError(
            f"{what}: refusing to unpickle it: it holds Python objects, not only tensors ({detail}); "
            "save the weights as a state dict of tensors or as safetensors"
        )
    detail = " ".join(line for line in lines if not line.startswith(_TORCH_BOILERPLATE))[:200]
    detail = f"{type(exc).__name__}: {detail}" if detail and isinstance(exc, KeyError) else detail
    return UserError(
        f"{what}: not a readable checkpoint: cut off, or not a torch or safetensors file ({detail or type(exc).__name__})"
    )


def _read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Weights-only read of a checkpoint file (safetensors or torch zip), 'module.' prefixes removed."""
    from open_clip.factory import load_state_dict

    try:
        return load_state_dict(str(path), device="cpu", weights_only=True)
    except Exception as exc:  # a file of any shape: whatever the parser trips on is one line
        raise unreadable(str(path), exc) from None


def _context_in(state: dict[str, torch.Tensor]) -> int | None:
    for key in ("positional_embedding", "text.positional_embedding"):
        if key in state:
            return int(state[key].shape[0])
    return None


LONGCLIP_RES = "positional_embedding_res"


def merge_longclip_positions(state: dict[str, torch.Tensor], keep: int = 20) -> dict[str, torch.Tensor]:
    """Long-CLIP's released files keep two 248-row tables (frozen `positional_embedding` used for
    positions < 20, `positional_embedding_res` for the rest): merge them into open_clip's one."""
    out = {k: v for k, v in state.items() if k != LONGCLIP_RES}
    out["positional_embedding"] = torch.cat([state["positional_embedding"][:keep], state[LONGCLIP_RES][keep:]])
    return out


def _finish(model, pre_train, pre_val, tok_name: str, name: str, spec: str, device: str, info: dict) -> LoadedModel:
    import open_clip

    model.to(device).eval()
    context = int(getattr(model, "context_length", None) or model.text.context_length)
    tokenizer = tokenizer_for(tok_name, context)
    model_cfg = open_clip.get_model_config(tok_name)
    info = {**info, "tokenizer": tok_name}
    return LoadedModel(model, pre_val, pre_train, tokenizer, context, name, spec, info, model_cfg)


def _load_file_checkpoint(arch: str, path: Path, device: str, spec: str) -> LoadedModel:
    """A checkpoint file for a named architecture; a Long-CLIP file keeps its own context (e.g. 248)."""
    import open_clip

    state = _read_state_dict(path)
    context = _context_in(state)
    longclip = LONGCLIP_RES in state
    try:
        with no_weights_warnings():
            model, pre_train, pre_val = open_clip.create_model_and_transforms(arch, force_context_length=context)
        if longclip:
            model.load_state_dict(merge_longclip_positions(state), strict=True)
        else:
            open_clip.load_checkpoint(model, str(path), strict=True, weights_only=True)
    except RuntimeError as exc:
        raise UserError(f"{path}: does not fit model {arch!r} ({str(exc).splitlines()[0]})") from None
    log.info("loaded %s weights from %s (context %s)", arch, path, context)
    return _finish(model, pre_train, pre_val, arch, arch, spec, device, {"checkpoint": str(path)})


def latest_checkpoint(run: Path) -> Path | None:
    found = sorted((run / CHECKPOINT_DIR).glob("step_*.pt"))
    return found[-1] if found else None


def read_run_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint written by `caption-debias train`, read weights-only; raises on a torn or foreign file."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or not isinstance(payload.get("model"), dict) or "step" not in payload:
        raise ValueError("no model state and step in it")
    return payload


def newest_readable_checkpoint(
    run: Path, skipped: Callable[[Path, UserError], None] | None = None
) -> tuple[Path, dict[str, Any]] | None:
    """(path, payload) of the newest checkpoint of `run` that reads whole, weights-only; each
    newer one that does not (cut off by a full disk, a half-copied file, Python objects in it)
    is passed to `skipped` with its one-line reason."""
    for path in sorted((run / CHECKPOINT_DIR).glob("step_*.pt"), reverse=True):
        try:
            return path, read_run_checkpoint(path)
        except Exception as exc:  # any damage: this file is passed over, an older one may be whole
            if skipped is not None:
                skipped(path, unreadable(str(path), exc))
    return None


def _load_run(run: Path, device: str, spec: str) -> LoadedModel:
    """A training run folder: its model config plus the latest checkpoint's weights, positions merged."""
    import open_clip

    from caption_debias.model.stretch import merged_state_dict

    if not (run / RUN_MODEL_CONFIG).is_file():
        raise UserError(f"{run}: run folder has no {RUN_MODEL_CONFIG} (was it written by `caption-debias train`?)")
    if latest_checkpoint(run) is None:
        raise UserError(f"{run}: no checkpoint in {run / CHECKPOINT_DIR} yet")

    skipped: list[UserError] = []

    def skip(path: Path, error: UserError) -> None:
        skipped.append(error)
        print(f"caption-debias: skipping damaged checkpoint {error}", file=sys.stderr, flush=True)

    found = newest_readable_checkpoint(run, skip)
    if found is None:
        raise skipped[0]  # every checkpoint unreadable: the newest one's reason, in one line
    ckpt, payload = found
    with no_weights_warnings():
        model, pre_train, pre_val = open_clip.create_model_and_transforms(f"local-dir:{run}", load_weights=False)
    model.load_state_dict(merged_state_dict(payload["model"]), strict=True)
    cfg = json.loads((run / RUN_CONFIG).read_text("utf-8")) if (run / RUN_CONFIG).is_file() else {}
    name = str(cfg.get("model", spec))
    log.info("loaded run %s step %s", run, int(payload.get("step", -1)))
    info = {"run": str(run), "checkpoint": str(ckpt), "step": int(payload.get("step", -1)), **_stretched(cfg)}
    return _finish(model, pre_train, pre_val, f"local-dir:{run}", name, spec, device, info)


def _stretched(cfg: dict) -> dict:
    """{"stretched": {"from", "to", "warmup_steps"}} when the run stretched its start's positions (an
    export carries it on, model/describe.stretch_note says it); {} otherwise."""
    resolved, options = cfg.get("resolved") or {}, cfg.get("config") or {}
    if not resolved.get("stretched"):
        return {}
    to, keep = int(resolved.get("context_length") or 0), int(options.get("keep_positions") or 0)
    knowledge = options.get("recipe") in ("debias", "longclip") and to > keep  # keep + 4 (n - keep) positions
    start = keep + (to - keep) // 4 if knowledge else None
    return {"stretched": {"from": start, "to": to, "warmup_steps": int(options.get("warmup_steps") or 0)}}


def _exported_facts(spec: str) -> dict:
    """What an export of a run recorded of it (model/export.py's `caption_debias` entry): its step and stretching."""
    try:
        cfg = json.loads((Path(spec[len("local-dir:") :]) / RUN_MODEL_CONFIG).read_text("utf-8"))
        facts = cfg.get("caption_debias") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {k: facts[k] for k in ("step", "stretched") if k in facts}


def _load_shipped(name: str, pretrained: str | None, device: str) -> LoadedModel:
    """A model shipped with the package (model/names.py), loaded as the open_clip local-dir: folder it is."""
    import open_clip

    if pretrained:
        raise UserError(f"{name} is a shipped model with its own weights: drop --pretrained {pretrained}")
    spec = f"local-dir:{shipped_folder(name)}"
    model, pre_train, pre_val = open_clip.create_model_and_transforms(spec)
    return _finish(model, pre_train, pre_val, spec, name, name, device, {"shipped": name})


def load_model(
    spec: str,
    pretrained: str | None = None,
    context_length: int | None = None,
    device: str = "cpu",
    tell: Callable[[str], None] | None = None,
) -> LoadedModel:
    """Load any supported spec. `context_length` only picks the tokenizer/table length for
    open_clip names (no stretching here: see caption_debias.model.stretch). `tell` (a command's
    `say` or `note`) hears "importing torch and open_clip" when they are not imported yet, then
    which weights are read."""
    from caption_debias.model.describe import weights_text
    from caption_debias.model.imports import import_open_clip

    open_clip = import_open_clip([(spec, pretrained)], tell)
    reading = weights_text(spec, pretrained)
    if reading and tell is not None:
        tell(reading)
    register_shipped_configs()
    spec = str(spec)
    path = Path(spec)
    if is_shipped(spec):
        return _load_shipped(spec, pretrained, device)
    if spec.startswith(("local-dir:", "hf-hub:")):
        try:
            model, pre_train, pre_val = open_clip.create_model_and_transforms(spec)
        except (FileNotFoundError, ValueError, RuntimeError) as exc:
            raise UserError(f"cannot load {spec}: {str(exc).splitlines()[0]}") from None
        except Exception as exc:  # its weights file: Python objects in a .bin, torn safetensors, ...
            raise unreadable(f"cannot load {spec}", exc) from None
        info = {"source": spec, **(_exported_facts(spec) if spec.startswith("local-dir:") else {})}
        return _finish(model, pre_train, pre_val, spec, spec, spec, device, info)
    if path.is_dir():
        return _load_run(path, device, spec)
    if path.is_file():
        if not pretrained:
            raise UserError(f"{spec}: a checkpoint file needs its architecture name as --pretrained (e.g. ViT-B-16)")
        if pretrained not in open_clip.list_models():
            raise UserError(f"unknown open_clip model {pretrained!r} for checkpoint {spec}")
        return _load_file_checkpoint(pretrained, path, device, spec)
    if spec not in open_clip.list_models():
        raise UserError(unknown_model_text(spec))
    if pretrained and Path(pretrained).is_file():
        return _load_file_checkpoint(spec, Path(pretrained), device, spec)
    if pretrained and pretrained not in open_clip.list_pretrained_tags_by_model(spec):
        raise UserError(
            f"--pretrained {pretrained!r} is neither a file nor a known tag of {spec} "
            f"(tags: {', '.join(open_clip.list_pretrained_tags_by_model(spec)) or 'none'})"
        )
    try:
        model, pre_train, pre_val = open_clip.create_model_and_transforms(
            spec, pretrained=pretrained, force_context_length=context_length
        )
    except RuntimeError as exc:
        raise UserError(f"cannot load {spec} ({pretrained or 'random init'}): {str(exc).splitlines()[0]}") from None
    return _finish(model, pre_train, pre_val, spec, spec, spec, device, {"pretrained": pretrained})
