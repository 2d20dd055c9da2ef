"""TrainConfig: every option of `caption-debias train`, with the paper's / Long-CLIP's defaults.

A --config file (TOML or YAML) uses the same keys; command-line values given explicitly
win over the file. The resolved config is written to RUN/config.json.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from caption_debias.errors import UserError
from caption_debias.options import LOG_INTERVAL_HELP, QUIET_HELP, load_config_file, option

RECIPES = ("debias", "longclip", "clip", "short")
# open_clip_train's --precision values, with its meanings (see train/precision.py).
PRECISIONS = ("amp", "amp_bf16", "amp_bfloat16", "bf16", "fp16", "pure_bf16", "pure_fp16", "fp32")
DROP_RULES = ("first", "detected")
REPORTERS = ("tensorboard", "wandb")
# open_clip_train's spellings (and today's older ones) accepted as --config keys, mapped to the field.
KEY_ALIASES = {
    "wd": "weight_decay",
    "warmup": "warmup_steps",
    "grad_clip_norm": "grad_clip",
    "log_every_n_steps": "log_every",
}


@dataclass
class TrainConfig:
    data: str | None = option(
        None,
        "Prepared folder (output of `caption-debias prepare`) or packed folder (`caption-debias pack`); may come from --config.",
    )
    out: str | None = option(None, "Run folder: config.json, metrics.jsonl, checkpoints/, tensorboard/.")
    logs: str | None = option(None, "open_clip_train style: the run folder is LOGS/NAME (instead of --out).")
    name: str | None = option(
        None,
        "With --logs: the run's name (default: date, model, lr, batch, workers and precision, as open_clip_train).",
    )
    image_root: str | None = option(
        None, "Folder the shards' `image` paths are relative to (not used for a packed folder)."
    )
    model: str = option(
        "ViT-B-16",
        "open_clip model name (or `tiny`), demo-start (the shipped small model), local-dir:DIR, hf-hub:ORG/REPO, "
        "a checkpoint file, or a run folder.",
    )
    pretrained: str | None = option(
        None, "Pretrained tag (e.g. openai) or checkpoint file; for a checkpoint-file --model, its architecture name."
    )
    recipe: str = option("debias", f"{' | '.join(RECIPES)} (`short`: stage-1 one-sentence pretraining).")
    split: str | None = option(None, "Train only on rows of this split.")
    epochs: int | None = option(None, "Passes over the data (default 1 unless --max-steps is given).")
    max_steps: int | None = option(
        None, "Optimizer steps; 0 writes the starting (stretched, untrained) model as the checkpoint."
    )
    batch_size: int = option(
        256,
        "Batch size per process, as open_clip_train; global batch = this x processes x --accum-freq "
        "(the paper's 256: --batch-size 256 on one GPU, 64 on four).",
    )
    accum_freq: int = option(1, "Update the model every N batches (open_clip_train's feature-cache accumulation).")
    lr: float = option(1e-6, "Peak learning rate (AdamW).")
    weight_decay: float = option(0.01, "AdamW weight decay (not on gains, biases, logit scale); alias --weight-decay.")
    beta1: float = option(0.9, "AdamW beta1.")
    beta2: float = option(0.999, "AdamW beta2.")
    eps: float = option(1e-8, "AdamW epsilon.")
    warmup_steps: int = option(200, "Linear warm-up steps before the cosine decay to 0; alias --warmup-steps.")
    grad_clip: float | None = option(1.0, "Clip the global gradient norm to this (0 turns it off); alias --grad-clip.")
    lambda_short: float = option(
        0.1, "debias: weight of the augmented-caption loss (lambda_s * short + (1 - lambda_s) * long)."
    )
    pca_dim: int = option(32, "Primary components kept of the per-device batch of image features.")
    keep_positions: int = option(20, "Text positions kept as they are (and frozen) when stretching.")
    context_length: int = option(248, "Text context after stretching (248 = Long-CLIP).")
    drop_summary: str = option("first", "debias: drop the first sentence (paper) or the `detected` summary sentences.")
    no_drop_summary: bool = option(False, "Ablation: keep the summary in the augmented caption.")
    no_subsample: bool = option(False, "Ablation: keep every remaining sentence, in order.")
    no_pad: bool = option(False, "Ablation: no pads moved after the start token.")
    label_smoothing: float = option(0.1, "Label smoothing of the contrastive loss (not used by `short`).")
    precision: str = option(
        "amp",
        "amp (fp16 autocast + loss scaling, CUDA) | amp_bf16 (bf16 autocast) | bf16, fp16 (weights in that type, "
        "norms in fp32) | pure_bf16, pure_fp16 (everything in that type) | fp32; as open_clip_train.",
    )
    workers: int = option(0, "DataLoader worker processes (0: load in the main process).")
    seed: int = option(0, "Seed of the data order, the augmentations and random initialisation.")
    resume: str | None = option(
        None, "`latest`: continue the run from its newest readable checkpoint; or a checkpoint file to continue from."
    )
    strict: bool = option(False, "Stop at the first missing or corrupt image instead of skipping it.")
    checkpoint_every: int = option(1000, "Save a checkpoint every N steps (and at the end).")
    keep_checkpoints: int = option(2, "Most recent checkpoints kept (0 keeps all).")
    log_every: int = option(10, "Write a metrics.jsonl line every N steps; alias --log-every-n-steps.")
    log_interval: float = option(30.0, LOG_INTERVAL_HELP)
    group_key: str | None = option(
        None, "Key in each row's meta: batches hold whole groups sharing it (hard negatives)."
    )
    group_size: int = option(4, "Rows per group in a batch with --group-key.")
    cache_images: bool = option(False, "Keep decoded images in memory (small sets, --workers 0).")
    grad_checkpointing: bool = option(False, "Recompute activations in the backward pass (less memory, more compute).")
    lock_image: bool = option(False, "Freeze the image tower (LiT), as open_clip_train.")
    lock_image_unlocked_groups: int = option(0, "With --lock-image: leave the last N layer groups trainable.")
    lock_image_freeze_bn_stats: bool = option(False, "With --lock-image: freeze BatchNorm statistics of locked layers.")
    lock_text: bool = option(False, "Freeze the text tower, as open_clip_train.")
    lock_text_unlocked_layers: int = option(0, "With --lock-text: leave the last N layers trainable.")
    lock_text_freeze_layer_norm: bool = option(
        False, "With --lock-text: freeze LayerNorms of locked layers (always so for CLIP with a built-in text tower)."
    )
    torchcompile: bool = option(False, "torch.compile() the model (PyTorch 2).")
    val_data: str | None = option(None, "Prepared folder for retrieval recall during training (rank 0).")
    val_image_root: str | None = option(
        None, "Image root of --val-data (default: --image-root, else the one its manifest records)."
    )
    val_frequency: int = option(1, "Evaluate --val-data every N epochs, and at the end.")
    allow_incomplete: bool = option(
        False, "Train on a prepared folder whose manifest says complete: false (recorded in the run's config)."
    )
    trim_padding: bool = option(True, "Cut each text batch after its latest end token: same features, less compute.")
    device: str = option("auto", "auto | cpu | cuda | cuda:N (torchrun picks cuda:LOCAL_RANK).")
    report_to: str = option(
        "tensorboard",
        "Comma-separated: tensorboard (RUN/tensorboard), wandb (RUN/wandb; WANDB_MODE=offline works); '' for none.",
    )
    wandb_project_name: str = option("caption-debias", "Project of the wandb run (--report-to wandb).")
    quiet: bool = option(False, QUIET_HELP)

    @property
    def reporters(self) -> list[str]:
        return [r.strip() for r in (self.report_to or "").split(",") if r.strip()]

    def validate(self) -> "TrainConfig":
        if not self.data:
            raise UserError("no DATA folder given")
        if self.out and self.logs:
            raise UserError("give either --out RUN or --logs DIR [--name NAME], not both")
        if not self.out and not self.logs:
            raise UserError("no --out run folder given (or --logs DIR [--name NAME], as open_clip_train)")
        if self.name and not self.logs:
            raise UserError("--name names a run under --logs; with --out the folder is the name")
        if self.resume is not None and (not str(self.resume) or str(self.resume).startswith("-")):
            raise UserError("--resume takes `latest` or a checkpoint file")
        for r in self.reporters:
            if r not in REPORTERS and r != "all":
                raise UserError(f"--report-to {r!r}: choose from {', '.join(REPORTERS)} (comma-separated)")
        if self.recipe not in RECIPES:
            raise UserError(f"--recipe {self.recipe!r}: choose from {', '.join(RECIPES)}")
        if self.precision not in PRECISIONS:
            raise UserError(f"--precision {self.precision!r}: choose from {', '.join(PRECISIONS)}")
        if self.drop_summary not in DROP_RULES:
            raise UserError(f"--drop-summary {self.drop_summary!r}: choose from {', '.join(DROP_RULES)}")
        if self.max_steps is not None and self.max_steps < 0:
            raise UserError("--max-steps must be >= 0")
        if self.epochs is not None and self.epochs < 1:
            raise UserError("--epochs must be >= 1")
        if self.batch_size < 1:
            raise UserError("--batch-size must be >= 1")
        if self.accum_freq < 1 or self.val_frequency < 1:
            raise UserError("--accum-freq and --val-frequency must be >= 1")
        if self.log_interval <= 0:
            raise UserError("--log-interval must be > 0 seconds")
        if self.lock_image_unlocked_groups < 0 or self.lock_text_unlocked_layers < 0:
            raise UserError("--lock-image-unlocked-groups and --lock-text-unlocked-layers must be >= 0")
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
    """TOML or YAML (or JSON); keys as in TrainConfig, '-' or '_' both accepted."""
    raw = load_config_file(path)
    known = {f.name for f in fields(TrainConfig)}
    out = {}
    for key, value in older_keys(raw).items():
        name = KEY_ALIASES.get(str(key).replace("-", "_"), str(key).replace("-", "_"))
        if name not in known:
            raise UserError(f"--config {path}: unknown option {key!r}")
        out[name] = value
    return out


def older_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """Config keys of earlier releases as today's: `tensorboard = true|false`, `resume = true`."""
    out = {}
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        if name == "tensorboard":  # the older switch: report_to without or with tensorboard
            key, value = "report_to", "tensorboard" if value else ""
        if name == "resume" and isinstance(value, bool):  # the older switch: resume = true
            value = "latest" if value else None
        out[key] = value
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
    for name in ("data", "out", "image_root", "logs", "val_data", "val_image_root"):
        if values.get(name) is not None:
            values[name] = str(values[name])
    try:
        cfg = TrainConfig(**values)
    except TypeError as exc:
        raise UserError(f"bad training options: {exc}") from None
    return cfg.validate()
