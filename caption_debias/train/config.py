"""TrainConfig: every option of `caption-debias train`, with the paper's / Long-CLIP's defaults.

The command line, a --config file (its keys are the flag names, read by cli/common.py) and
`caption_debias.train(...)` all build this one class. The resolved config is written to RUN/config.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caption_debias.errors import UserError
from caption_debias.options import ImageRootOptions, ProgressOptions, check_device_name, option

RECIPES = ("debias", "longclip", "clip", "short")
# open_clip_train's --precision values, with its meanings (see train/precision.py).
PRECISIONS = ("amp", "amp_bf16", "amp_bfloat16", "bf16", "fp16", "pure_bf16", "pure_fp16", "fp32")
DROP_RULES = ("first", "detected")
REPORTERS = ("tensorboard", "wandb")


@dataclass
class TrainConfig(ImageRootOptions, ProgressOptions):
    """Every option of `caption-debias train` (the CLI reads defaults and --help from here)."""

    data: str | None = option(
        None,
        "Prepared folder (output of `caption-debias prepare`) or packed folder (`caption-debias pack`); may come from --config.",
    )
    out: str | None = option(
        None, "Run folder: config.json, metrics.jsonl, checkpoints/, tensorboard/.", flags=("--out", "-o")
    )
    logs: str | None = option(None, "open_clip_train style: the run folder is LOGS/NAME (instead of --out).")
    name: str | None = option(
        None,
        "With --logs: the run's name (default: date, model, lr, batch, workers and precision, as open_clip_train).",
    )
    model: str = option(
        "ViT-B-16",
        "open_clip model name (or `tiny`), demo-start (the shipped small model), local-dir:DIR, hf-hub:ORG/REPO, "
        "a checkpoint file, or a run folder.",
    )
    pretrained: str | None = option(
        None, "Pretrained tag (e.g. openai) or checkpoint file; for a checkpoint-file --model, its architecture name."
    )
    recipe: str = option(
        "debias", f"{' | '.join(RECIPES)} (`short`: stage-1 one-sentence pretraining).", choices=RECIPES
    )
    split: str | None = option(None, "Train only on rows of this split.")
    epochs: int | None = option(None, "Passes over the data (default 1 unless --max-steps is given).", min=1)
    max_steps: int | None = option(
        None, "Optimizer steps; 0 writes the starting (stretched, untrained) model as the checkpoint.", min=0
    )
    batch_size: int = option(
        256,
        "Batch size per process, as open_clip_train; global batch = this x processes x --accum-freq "
        "(the paper's 256: --batch-size 256 on one GPU, 64 on four).",
        min=1,
    )
    accum_freq: int = option(
        1, "Update the model every N batches (open_clip_train's feature-cache accumulation).", min=1
    )
    lr: float = option(1e-6, "Peak learning rate (AdamW).", min=0.0)
    weight_decay: float = option(
        0.01,
        "AdamW weight decay (not on gains, biases, logit scale); alias --weight-decay.",
        flags=("--wd", "--weight-decay"),
        min=0.0,
    )
    beta1: float = option(0.9, "AdamW beta1.", min=0.0, max=1.0, max_open=True)
    beta2: float = option(0.999, "AdamW beta2.", min=0.0, max=1.0, max_open=True)
    eps: float = option(1e-8, "AdamW epsilon.", min=0.0)
    warmup_steps: int = option(
        200,
        "Linear warm-up steps before the cosine decay to 0; alias --warmup-steps.",
        flags=("--warmup", "--warmup-steps"),
        min=0,
    )
    grad_clip: float | None = option(
        1.0,
        "Clip the global gradient norm to this (0 turns it off); alias --grad-clip.",
        flags=("--grad-clip-norm", "--grad-clip"),
        min=0.0,
    )
    lambda_short: float = option(
        0.1,
        "debias: weight of the augmented-caption loss (lambda_s * short + (1 - lambda_s) * long).",
        min=0.0,
        max=1.0,
    )
    pca_dim: int = option(32, "Primary components kept of the per-device batch of image features.", min=1)
    keep_positions: int = option(20, "Text positions kept as they are (and frozen) when stretching.", min=1)
    context_length: int = option(248, "Text context after stretching (248 = Long-CLIP).", min=1)
    drop_summary: str = option(
        "first", "debias: drop the first sentence (paper) or the `detected` summary sentences.", choices=DROP_RULES
    )
    no_drop_summary: bool = option(False, "Ablation: keep the summary in the augmented caption.")
    no_subsample: bool = option(False, "Ablation: keep every remaining sentence, in order.")
    no_pad: bool = option(False, "Ablation: no pads moved after the start token.")
    label_smoothing: float = option(
        0.1, "Label smoothing of the contrastive loss (not used by `short`).", min=0.0, max=1.0
    )
    precision: str = option(
        "amp",
        "amp (fp16 autocast + loss scaling, CUDA) | amp_bf16 (bf16 autocast) | bf16, fp16 (weights in that type, "
        "norms in fp32) | pure_bf16, pure_fp16 (everything in that type) | fp32; as open_clip_train.",
        choices=PRECISIONS,
    )
    # DataLoader workers, not EngineOptions' stage workers: another default (0) and meaning.
    workers: int = option(
        0, "DataLoader worker processes (0: load in the main process).", flags=("--workers", "-j"), min=0
    )
    seed: int = option(0, "Seed of the data order, the augmentations and random initialisation.")
    resume: str | None = option(
        None, "`latest`: continue the run from its newest readable checkpoint; or a checkpoint file to continue from."
    )
    strict: bool = option(False, "Stop at the first missing or corrupt image instead of skipping it.")
    checkpoint_every: int = option(1000, "Save a checkpoint every N steps (and at the end).", min=1)
    keep_checkpoints: int = option(2, "Most recent checkpoints kept (0 keeps all).", min=0)
    log_every: int = option(
        10,
        "Write a metrics.jsonl line every N steps; alias --log-every-n-steps.",
        flags=("--log-every", "--log-every-n-steps"),
        min=1,
    )
    group_key: str | None = option(
        None, "Key in each row's meta: batches hold whole groups sharing it (hard negatives)."
    )
    group_size: int = option(4, "Rows per group in a batch with --group-key.", min=1)
    cache_images: bool = option(False, "Keep decoded images in memory (small sets, --workers 0).")
    grad_checkpointing: bool = option(False, "Recompute activations in the backward pass (less memory, more compute).")
    lock_image: bool = option(False, "Freeze the image tower (LiT), as open_clip_train.")
    lock_image_unlocked_groups: int = option(0, "With --lock-image: leave the last N layer groups trainable.", min=0)
    lock_image_freeze_bn_stats: bool = option(False, "With --lock-image: freeze BatchNorm statistics of locked layers.")
    lock_text: bool = option(False, "Freeze the text tower, as open_clip_train.")
    lock_text_unlocked_layers: int = option(0, "With --lock-text: leave the last N layers trainable.", min=0)
    lock_text_freeze_layer_norm: bool = option(
        False, "With --lock-text: freeze LayerNorms of locked layers (always so for CLIP with a built-in text tower)."
    )
    torchcompile: bool = option(False, "torch.compile() the model (PyTorch 2).")
    val_data: str | None = option(None, "Prepared folder for retrieval recall during training (rank 0).")
    val_image_root: str | None = option(
        None, "Image root of --val-data (default: --image-root, else the one its manifest records)."
    )
    val_frequency: int = option(1, "Evaluate --val-data every N epochs, and at the end.", min=1)
    allow_incomplete: bool = option(
        False, "Train on a prepared folder whose manifest says complete: false (recorded in the run's config)."
    )
    trim_padding: bool = option(
        True,
        "Cut each text batch after its latest end token: same features, less compute.",
        flags=("--trim-padding/--no-trim-padding",),
    )
    device: str = option("auto", "auto | cpu | cuda | cuda:N (torchrun picks cuda:LOCAL_RANK).")
    report_to: str = option(
        "tensorboard",
        "Comma-separated: tensorboard (RUN/tensorboard), wandb (RUN/wandb; WANDB_MODE=offline works); '' for none.",
    )
    wandb_project_name: str = option("caption-debias", "Project of the wandb run (--report-to wandb).")

    @property
    def reporters(self) -> list[str]:
        return [r.strip() for r in (self.report_to or "").split(",") if r.strip()]

    def check(self) -> None:
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
        check_device_name(self.device)
        self.check_image_root(urls=True)  # images on a store are read through image_source
        check_data(self.data)


def check_data(data: str) -> None:
    """DATA is a folder with a manifest, before any model loads (a missing, unfinished or
    not-yet-prepared folder: PreparedDataset's one line); the rest is checked where it is read."""
    from caption_debias import storage

    if storage.is_url(data) or (Path(data) / "manifest.json").is_file():
        return
    from caption_debias.dataset import PreparedDataset

    PreparedDataset.open(data)  # raises: no such folder, a file, unfinished by NAME, no manifest


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
