"""`caption_debias.train(...)`: the Python form of `caption-debias train`, and its one front door (docs/api.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from caption_debias.api import Result, options_from, quiet_logs

if TYPE_CHECKING:
    from caption_debias.train.config import TrainConfig


def train(
    data: str | Path | None = None,
    out: str | Path | None = None,
    *,
    options: TrainConfig | None = None,
    **kwargs: Any,
) -> Result:
    """Train (or resume, with resume="latest") on a prepared or packed folder; the options are
    train's flags (TrainConfig: model, recipe, max_steps, batch_size, lr, ...), as keyword arguments
    (`quiet` defaults to True) or as one TrainConfig in `options` (which holds data and out).

    Returns the run folder as `out`; counts: steps, train_rows; paths: config, metrics, checkpoint
    (the last one); `data`: config.json and the last metrics line.
    """
    from caption_debias.train.config import TrainConfig

    if options is None:
        kwargs = {**({"data": str(data)} if data is not None else {}), **kwargs}
        kwargs.update({"out": str(out)} if out is not None else {})
    elif data is not None or out is not None:
        raise TypeError("train(): give the options as one TrainConfig or as keyword arguments, not both")
    cfg = options_from(TrainConfig, kwargs, "train", options).validate()  # flags and DATA before torch loads
    from caption_debias.train.start import announce, import_packages

    announce(cfg)  # the run's first line, before torch is imported
    import_packages(cfg)
    from caption_debias.model.load import latest_checkpoint
    from caption_debias.train.loop import train as run

    with quiet_logs(cfg.quiet):
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
