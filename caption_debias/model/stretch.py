"""Long-CLIP positional-embedding stretching (77 -> 248) and the frozen/trainable split.

Long-CLIP's knowledge-preserved stretching: positions 0..keep-1 are copied; each old
position i in keep..n-2 becomes 4 new positions, blends of i and i+1 with weights
1, 3/4, 1/2, 1/4 on i; the last 4 new positions are extrapolated from n-2 and n-1.
A frozen copy serves positions < keep, a trainable copy positions >= keep: done with a
torch parametrization, so open_clip's own `encode_text` keeps working unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from caption_debias.errors import UserError

POS_KEY = "positional_embedding"
# State-dict keys of the split table (torch.nn.utils.parametrize naming).
TAIL_KEY = "parametrizations.positional_embedding.original"
HEAD_KEY = "parametrizations.positional_embedding.0.head"


def stretched_length(n: int, keep: int) -> int:
    """Positions after knowledge-preserved stretching: keep + 4 * (n - keep)  (77, 20 -> 248)."""
    return keep + 4 * (n - keep)


def knowledge_preserved_stretch(pos: torch.Tensor, keep: int = 20) -> torch.Tensor:
    """[n, d] -> [keep + 4 (n - keep), d], exactly Long-CLIP's formula."""
    n = pos.shape[0]
    if not 0 < keep < n - 1:
        raise UserError(f"--keep-positions must be between 1 and {n - 2} for a {n}-position model")
    a, b = pos[keep : n - 1], pos[keep + 1 : n]  # old i and i + 1 for i in keep..n-2
    w = torch.tensor([1.0, 0.75, 0.5, 0.25], dtype=pos.dtype, device=pos.device).view(1, 4, 1)
    blends = (w * a.unsqueeze(1) + (1 - w) * b.unsqueeze(1)).reshape(-1, pos.shape[1])
    d = pos[n - 1] - pos[n - 2]
    tail = torch.stack([pos[n - 1] + (j / 4) * d for j in range(4)])
    return torch.cat([pos[:keep], blends, tail])


def uniform_stretch(pos: torch.Tensor, length: int) -> torch.Tensor:
    """Plain linear interpolation to `length` positions (the `clip` baseline; open_clip's own resize rule)."""
    x = pos.T.unsqueeze(0)
    return F.interpolate(x, size=length, mode="linear", align_corners=False)[0].T.contiguous()


def causal_mask(n: int) -> torch.Tensor:
    """open_clip's text attention mask: -inf above the diagonal."""
    return torch.empty(n, n).fill_(float("-inf")).triu_(1)


class FrozenHead(nn.Module):
    """Parametrization: positions < keep come from a frozen buffer, the rest from the trainable parameter."""

    def __init__(self, head: torch.Tensor):
        super().__init__()
        self.register_buffer("head", head.detach().clone())

    def forward(self, tail: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.head.to(tail.dtype), tail])

    def right_inverse(self, full: torch.Tensor) -> torch.Tensor:
        return full[self.head.shape[0] :]


def _set_table(model: nn.Module, table: torch.Tensor) -> None:
    old = model.positional_embedding
    model.positional_embedding = nn.Parameter(table.to(old.dtype).to(old.device), requires_grad=old.requires_grad)
    model.register_buffer("attn_mask", causal_mask(table.shape[0]).to(old.device), persistent=False)
    model.context_length = table.shape[0]


def is_split(model: nn.Module) -> bool:
    return parametrize.is_parametrized(model, POS_KEY)


def split_frozen_head(model: nn.Module, keep: int) -> None:
    """Serve positions < keep from a frozen copy and the rest from a trainable copy."""
    if is_split(model):
        return
    full = model.positional_embedding.detach()
    parametrize.register_parametrization(model, POS_KEY, FrozenHead(full[:keep]), unsafe=True)


def merge_frozen_head(model: nn.Module) -> None:
    """Back to one plain positional table (for eval/export)."""
    if is_split(model):
        parametrize.remove_parametrizations(model, POS_KEY, leave_parametrized=True)


def merged_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A split model's state dict with the positional table merged back under its open_clip key."""
    if TAIL_KEY not in state:
        return dict(state)
    out = {k: v for k, v in state.items() if k not in (TAIL_KEY, HEAD_KEY)}
    out[POS_KEY] = torch.cat([state[HEAD_KEY].to(state[TAIL_KEY].dtype), state[TAIL_KEY]])
    return out


def stretch_positional_embedding(
    model: nn.Module,
    context_length: int = 248,
    keep_positions: int = 20,
    mode: str = "knowledge",
    freeze_head: bool = True,
) -> bool:
    """Stretch an open_clip CLIP's text positions in place; returns False when already at the context.

    mode "knowledge": Long-CLIP's rule (context must be keep + 4 (n - keep)), and with
    freeze_head the first keep positions become a frozen copy. mode "uniform": linear
    interpolation (the plain `clip` baseline), all positions trainable.
    """
    if not hasattr(model, POS_KEY):
        raise UserError("this model has no open_clip text positional table to stretch (custom text tower)")
    n = model.positional_embedding.shape[0]
    if n == context_length:
        return False
    if context_length < n:
        raise UserError(f"--context-length {context_length} is shorter than the model's {n} positions")
    pos = model.positional_embedding.detach().float()
    if mode == "knowledge":
        want = stretched_length(n, keep_positions)
        if context_length != want:
            raise UserError(
                f"knowledge-preserved stretching of {n} positions keeping {keep_positions} gives {want}, "
                f"not --context-length {context_length}"
            )
        _set_table(model, knowledge_preserved_stretch(pos, keep_positions))
        if freeze_head:
            split_frozen_head(model, keep_positions)
    elif mode == "uniform":
        _set_table(model, uniform_stretch(pos, context_length))
    else:
        raise UserError(f"unknown stretch mode {mode!r} (knowledge or uniform)")
    return True
