"""WiSE-FT weight-space interpolation of a fine-tuned run and the model it started from.

(1 - alpha) * start + alpha * fine-tuned, tensor by tensor (Wortsman et al., "Robust fine-tuning of
zero-shot models"). The start is what the run trained from: its config.json's model, stretched to
the run's context as `train` stretched it (knowledge-preserved for debias and longclip, uniform for
clip), so alpha 0 is the run's step-0 model and alpha 1 the run itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from caption_debias.errors import UserError

if TYPE_CHECKING:
    import torch

    from caption_debias.model.load import LoadedModel


def interpolate_states(
    start: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor], alpha: float
) -> dict[str, torch.Tensor]:
    """(1 - alpha) * start + alpha * tuned for every floating tensor; others (integer buffers) from tuned.
    Both must hold the same keys and shapes (one line naming the first that differs)."""
    import torch

    if not 0.0 <= alpha <= 1.0:
        raise UserError(f"--interpolate must be in [0, 1] (got {alpha})")
    if set(start) != set(tuned):
        differ = sorted(set(start) ^ set(tuned))
        raise UserError(f"the start and the fine-tuned model hold different weights ({differ[0]}, ...)")
    out = {}
    for key, value in tuned.items():
        other = start[key]
        if other.shape != value.shape:
            raise UserError(f"{key}: the start's shape {tuple(other.shape)} is not the fine-tuned {tuple(value.shape)}")
        if torch.is_floating_point(value):
            mixed = (1.0 - alpha) * other.to(torch.float32) + alpha * value.to(torch.float32)
            out[key] = mixed.to(value.dtype)
        else:
            out[key] = value
    return out


def run_start_spec(run: Path) -> dict[str, Any]:
    """The run's own start: its config.json's model, pretrained, recipe, context and kept positions."""
    config = run / "config.json"
    if not run.is_dir() or not config.is_file():
        raise UserError(
            f"{run}: --interpolate needs a run folder of `caption-debias train` (its config.json names the start)"
        )
    cfg = json.loads(config.read_text("utf-8")).get("config", {})  # the run's TrainConfig as it ran
    return {k: cfg.get(k) for k in ("model", "pretrained", "recipe", "context_length", "keep_positions")}


def start_state(
    spec: str, pretrained: str | None, recipe: str, context_length: int, keep_positions: int, device: str = "cpu"
) -> dict[str, torch.Tensor]:
    """The start's weights as the run began: loaded, stretched as `train` stretches for `recipe`, merged."""
    from caption_debias.model.load import load_model
    from caption_debias.model.names import random_weights
    from caption_debias.model.stretch import merged_state_dict, stretch_positional_embedding

    if random_weights(spec, pretrained):
        raise UserError(f"the run started from {spec} with random weights: there is no start to interpolate with")
    model = load_model(spec, pretrained, device=device).model
    if recipe in ("debias", "longclip"):
        stretch_positional_embedding(model, context_length, keep_positions, "knowledge", freeze_head=False)
    elif recipe == "clip":
        stretch_positional_embedding(model, context_length, mode="uniform")
    return merged_state_dict(model.state_dict())


def interpolate_run(run: str | Path, tuned: dict[str, torch.Tensor], alpha: float, device: str = "cpu") -> dict:
    """A run's merged state dict `tuned` interpolated with the run's own start."""
    start = run_start_spec(Path(run))
    state = start_state(
        str(start["model"]),
        start["pretrained"],
        str(start["recipe"]),
        int(start["context_length"] or 248),
        int(start["keep_positions"] or 20),
        device,
    )
    return interpolate_states(state, tuned, alpha)


def interpolated_model(tuned: LoadedModel, start: dict[str, torch.Tensor], alpha: float) -> LoadedModel:
    """A copy of the loaded fine-tuned model holding the interpolated weights (the tuned one untouched)."""
    import copy
    import dataclasses

    from caption_debias.model.stretch import merge_frozen_head, merged_state_dict

    model = copy.deepcopy(tuned.model)
    merge_frozen_head(model)
    model.load_state_dict(interpolate_states(start, merged_state_dict(model.state_dict()), alpha), strict=True)
    return dataclasses.replace(tuned, model=model, info={**tuned.info, "interpolate": alpha})
