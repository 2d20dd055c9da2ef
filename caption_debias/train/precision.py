"""--precision with open_clip_train's values and meanings.

amp / amp_bf16 (amp_bfloat16): autocast to fp16 (with a GradScaler) / bf16, weights in fp32.
bf16 / fp16: open_clip's "manual mixed precision" (OpenAI's): linear, conv and attention
weights and the projections in that type, LayerNorms computing in fp32; images cast to it.
pure_bf16 / pure_fp16: every parameter and buffer in that type. fp32: nothing changed.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable, ContextManager

import torch

ALIASES = {"amp_bfloat16": "amp_bf16"}  # open_clip_train accepts both spellings


def canonical(precision: str) -> str:
    return ALIASES.get(precision, precision)


def weight_dtype(precision: str) -> torch.dtype | None:
    """The type the model's weights are converted to (None: they stay fp32)."""
    precision = canonical(precision)
    if precision in ("bf16", "pure_bf16"):
        return torch.bfloat16
    if precision in ("fp16", "pure_fp16"):
        return torch.float16
    return None


def input_dtype(precision: str) -> torch.dtype | None:
    """open_clip.get_input_dtype: images go in at the weights' type."""
    return weight_dtype(precision)


def convert_model(model: torch.nn.Module, precision: str) -> None:
    """Put the weights in the precision's type, as open_clip builds a model for it."""
    precision = canonical(precision)
    dtype = weight_dtype(precision)
    if dtype is None:
        return
    if precision.startswith("pure_"):
        model.to(dtype=dtype)
        return
    from open_clip.model import convert_weights_to_lp
    from open_clip.transformer import LayerNorm, LayerNormFp32

    convert_weights_to_lp(model, dtype)
    # open_clip builds bf16/fp16 models with LayerNormFp32 (norms computed in fp32, cast back);
    # the model here was built in fp32, so its open_clip LayerNorms take that class.
    for module in model.modules():
        if type(module) is LayerNorm:
            module.__class__ = LayerNormFp32


def autocast_for(precision: str, device: torch.device) -> tuple[Callable[[], ContextManager], bool, str | None]:
    """(autocast context factory, whether a GradScaler is needed, a note for the user or None)."""
    precision = canonical(precision)
    if precision == "amp":
        if device.type == "cuda":
            return (lambda: torch.autocast("cuda", dtype=torch.float16)), True, None
        note = "--precision amp needs CUDA; training in fp32 on CPU (use --precision amp_bf16 for CPU autocast)"
        return nullcontext, False, note
    if precision == "amp_bf16":
        return (lambda: torch.autocast(device.type, dtype=torch.bfloat16)), False, None
    return nullcontext, False, None


def used(precision: str, device: torch.device) -> str:
    """The precision a run on `device` actually trains in (amp falls back to fp32 off CUDA)."""
    precision = canonical(precision)
    return "fp32" if precision == "amp" and device.type != "cuda" else precision
