"""TrainConfig: every option of `caption-debias train`, with the paper's / Long-CLIP's defaults.

A --config file (TOML or YAML) uses the same keys; command-line values given explicitly
win over the file. The resolved config is written to RUN/config.json.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from caption_debias.errors import UserError

RECIPES = ("debias", "longclip", "clip", "short")
PRECISIONS = ("amp", "bf16", "fp32")


@dataclass
class TrainConfig:
    data: str = ""  # prepared folder
    out: str = ""  # run folder
    image_root: str | None = None
    model: str = "ViT-B-16"
    pretrained: str | None = None
    recipe: str = "debias"
    split: str | None = None  # train only on rows of this split
    epochs: int | None = None  # default 1 when max_steps is not given
    max_steps: int | None = None
    batch_size: int = 256  # global (all ranks together), as in the paper
    lr: float = 1e-6
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    warmup_steps: int = 200
    grad_clip: float | None = 1.0  # max global grad norm; None or 0 turns it off
    lambda_short: float = 0.1  # debias: lambda_s * short + (1 - lambda_s) * long
    pca_dim: int = 32
    keep_positions: int = 20
    context_length: int = 248
    drop_summary: str = "first"  # first | detected
    no_drop_summary: bool = False
    no_subsample: bool = False
    no_pad: bool = False
    label_smoothing: float = 0.1
    precision: str = "amp"
    workers: int = 0
    seed: int = 0
    resume: bool = False
    strict: bool = False  # stop on a missing/corrupt image instead of skipping it
    checkpoint_every: int = 1000
    keep_checkpoints: int = 2  # most recent checkpoints kept (0 keeps all)
    log_every: int = 10
    group_key: str | None = None  # meta key: batches made of whole groups sharing it
    group_size: int = 4
    cache_images: bool = False  # keep decoded images in memory (small sets, workers=0)
    trim_padding: bool = True  # cut each text batch after its latest EOT (same features, less compute)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    tensorboard: bool = True
    quiet: bool = False

    def validate(self) -> "TrainConfig":
        if not self.data:
            raise UserError("no DATA folder given")
        if not self.out:
            raise UserError("no --out run folder given")
        if self.recipe not in RECIPES:
            raise UserError(f"--recipe {self.recipe!r}: choose from {', '.join(RECIPES)}")
        if self.precision not in PRECISIONS:
            raise UserError(f"--precision {self.precision!r}: choose from {', '.join(PRECISIONS)}")
        if self.drop_summary not in ("first", "detected"):
            raise UserError(f"--drop-summary {self.drop_summary!r}: choose first or detected")
        if self.max_steps is not None and self.max_steps < 0:
            raise UserError("--max-steps must be >= 0")
        if self.epochs is not None and self.epochs < 1:
            raise UserError("--epochs must be >= 1")
        if self.batch_size < 2:
            raise UserError("--batch-size must be >= 2 (a contrastive loss needs negatives)")
        if not 0.0 <= self.lambda_short <= 1.0:
            raise UserError("--lambda-short must be in [0, 1]")
        for name in ("pca_dim", "keep_positions", "context_length", "checkpoint_every", "log_every", "group_size"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1")
        if self.workers < 0 or self.warmup_steps < 0 or self.keep_checkpoints < 0:
            raise UserError("--workers, --warmup-steps and --keep-checkpoints must be >= 0")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """TOML (tomllib) or YAML; keys as in TrainConfig, '-' or '_' both accepted."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--config {path}: no such file")
    text = path.read_text("utf-8")
    try:
        if path.suffix.lower() == ".toml":
            import tomllib

            raw = tomllib.loads(text)
        elif path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            raw = yaml.safe_load(text) or {}
        elif path.suffix.lower() == ".json":
            raw = json.loads(text)
        else:
            raise UserError(f"--config {path}: use a .toml, .yaml/.yml or .json file")
    except UserError:
        raise
    except Exception as exc:  # parser errors name line and column: one line is enough
        raise UserError(f"--config {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise UserError(f"--config {path}: expected a table of options at the top level")
    known = {f.name for f in fields(TrainConfig)}
    out = {}
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise UserError(f"--config {path}: unknown option {key!r}")
        out[name] = value
    return out


def resolve(cli_values: dict[str, Any], explicit: set[str], config_file: str | None) -> TrainConfig:
    """Defaults < config file < options given on the command line."""
    values: dict[str, Any] = {}
    if config_file:
        values.update(read_config_file(config_file))
    for name, value in cli_values.items():
        if name in explicit or name not in values:
            values[name] = value
    types = {f.name: type(f.default) for f in fields(TrainConfig) if f.default is not None}
    for name, value in values.items():
        want = types.get(name)
        if value is not None and want in (int, float) and not isinstance(value, bool):
            try:
                values[name] = want(value)  # YAML reads 1e-6 as a string
            except (TypeError, ValueError):
                raise UserError(f"option {name}: {value!r} is not a number") from None
    if values.get("grad_clip") is not None:
        values["grad_clip"] = float(values["grad_clip"]) or None
    for name in ("data", "out", "image_root"):
        if values.get(name) is not None:
            values[name] = str(values[name])
    try:
        cfg = TrainConfig(**values)
    except TypeError as exc:
        raise UserError(f"bad training options: {exc}") from None
    return cfg.validate()
