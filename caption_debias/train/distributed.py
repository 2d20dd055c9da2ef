"""The process group and this process's device, as torchrun describes them."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from caption_debias.errors import UserError
from caption_debias.train.config import TrainConfig


def init_distributed() -> tuple[int, int, int, bool]:
    """(rank, world size, local rank, whether this call created the process group).

    torchrun sets WORLD_SIZE/RANK/LOCAL_RANK; gloo on CPU, nccl on GPUs.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, 0, False
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)), False
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)), True


def device_for(cfg: TrainConfig, local_rank: int) -> torch.device:
    if cfg.device == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {cfg.device}: no CUDA device on this machine")
    return torch.device(cfg.device)


def all_sum(values: list[float], device: torch.device, world: int) -> list[float]:
    """Element-wise sum over every rank (float64); the values themselves on one process."""
    if world == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()
