"""`caption_debias.train(...)`: the Python form of `caption-debias train` (docs/api.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from caption_debias.api import Result, options_from


def train(data: str | Path, out: str | Path | None = None, *, quiet: bool = True, **options: Any) -> Result:
    """Train (or resume, with resume="latest") on a prepared or packed folder; the options are
    train's flags (TrainConfig: model, recipe, max_steps, batch_size, lr, ...).

    Returns the run folder as `out`; counts: steps, train_rows; paths: config, metrics, checkpoint
    (the last one); `data`: config.json and the last metrics line.
    """
    from caption_debias.model.load import latest_checkpoint
    from caption_debias.train.config import TrainConfig
    from caption_debias.train.loop import train as run

    given = {"data": str(data), **({"out": str(out)} if out is not None else {}), **options}
    cfg = options_from(TrainConfig, given, "train", quiet=quiet)
    folder = Path(run(cfg))
    config = json.loads((folder / "config.json").read_text("utf-8"))
    metrics_file = folder / "metrics.jsonl"
    lines = [ln for ln in metrics_file.read_text("utf-8").splitlines() if ln.strip()] if metrics_file.is_file() else []
    last = json.loads(lines[-1]) if lines else {}
    resolved = config.get("resolved", {})
    counts = {
        "steps": last.get("step", 0),
        "total_steps": resolved.get("total_steps"),
        "train_rows": resolved.get("train_rows"),
    }
    paths = {"config": folder / "config.json", "metrics": metrics_file, "checkpoint": latest_checkpoint(folder)}
    return Result("train", folder, counts, paths, {**config, "last_metrics": last})
