"""--val-data: retrieval recall on a prepared folder during training (rank 0), as open_clip_train's
`evaluate` reports image-text retrieval on its --val-data: every --val-frequency epochs and at the end.

The whole caption of each row is the text query (the `keep` variant of `caption-debias eval`),
scored with the same recall rule (caption_debias/evaluate/metrics.py).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from caption_debias import storage
from caption_debias.train import precision
from caption_debias.train.config import TrainConfig

if TYPE_CHECKING:
    from caption_debias.train.run_setup import RunSetup


class _CastTo:
    """The eval transform, then the precision's input type (bf16/fp16 weights take inputs of their type)."""

    def __init__(self, transform, dtype: torch.dtype):
        self.transform, self.dtype = transform, dtype

    def __call__(self, image):
        return self.transform(image).to(self.dtype)


class Validation:
    def __init__(self, cfg: TrainConfig, setup: "RunSetup", rank: int):
        from caption_debias.evaluate.benchmarks import load_prepared
        from caption_debias.image_source.roots import folder_root

        assert cfg.val_data is not None  # made only with --val-data (loop._train)
        self.cfg, self.setup = cfg, setup
        root = folder_root(cfg.val_data, cfg.val_image_root) or cfg.image_root  # its own, else the training root
        self.data = load_prepared(storage.as_path(cfg.val_data), root) if rank == 0 else None
        dtype = precision.input_dtype(cfg.precision)
        loaded = setup.loaded
        preprocess = _CastTo(loaded.preprocess, dtype) if dtype is not None else loaded.preprocess
        self.loaded = dataclasses.replace(loaded, model=setup.model, preprocess=preprocess)

    def due(self, done: int, steps_per_epoch: int, total: int) -> bool:
        """At the end of every --val-frequency-th epoch, and after the last step."""
        if done == total:
            return True
        return done % steps_per_epoch == 0 and (done // steps_per_epoch) % self.cfg.val_frequency == 0

    def run(self) -> dict[str, Any]:
        """{"t2i_r1": ..., "i2t_r10": ...} in percent, for the model as it is now."""
        from caption_debias.evaluate.retrieval import run_retrieval

        assert self.data is not None  # run on rank 0 only, which loads it
        model = self.setup.model
        was_training = model.training
        self.data.image_features.clear()  # the weights changed since the last validation
        try:
            with self.setup.autocast():
                result = run_retrieval(self.loaded, self.data, ("keep",), batch_size=max(self.cfg.batch_size, 16))
        finally:
            model.train(was_training)
        table = result.table["keep"]
        return {f"{direction}_{k}": v for direction, recalls in table.items() for k, v in recalls.items()}
