"""`score --engine ray`: the map step in a Ray Data actor pool, each actor holding the model once.

One block per input shard; `map_batches` with a callable class (`ShardScorer`) keeps
`--workers` actors alive (`concurrency`), each loading the model in its constructor (with
`num_gpus=1` per actor under --device cuda), and runs the local engine's own step
(`shard.score_shard`) on each shard task: same batches, same bits, same sidecars. Results
come back as sidecars and are yielded in shard order, as the local pool yields them.
On a cluster --out must be on a filesystem every node sees (NFS, a mounted bucket).
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any, Iterable, Iterator

from caption_debias.errors import UserError
from caption_debias.prepare.distributor import Ready
from caption_debias.score.options import ScoreOptions

_ERROR = "error"  # a sidecar holding only this: the task's UserError message


class ShardScorer:
    """The actor: the model loaded once (the driver's weights, checked by digest), then one shard per call."""

    def __init__(self, model: str, pretrained: str | None, device: str, precision: str, sha256: str, cwd: str):
        import caption_debias.score  # noqa: F401  (MKL's reproducibility mode, before torch runs)
        from caption_debias.score import encode

        if os.getcwd() != cwd and os.path.isdir(cwd):  # relative paths mean the driver's folder
            os.chdir(cwd)
        self.error = None
        try:
            encode.cached(model, pretrained, device, precision, sha256)
        except UserError as exc:  # reported with the first shard, as one line on the driver
            self.error = str(exc)

    def __call__(self, batch: dict) -> dict:
        import numpy as np

        from caption_debias.score.shard import score_shard

        sides = []
        for raw in batch["task"]:
            if self.error is not None:
                sides.append(json.dumps({_ERROR: self.error}))
                continue
            try:
                side = score_shard(pickle.loads(raw))
            except UserError as exc:
                side = {_ERROR: str(exc)}
            sides.append(json.dumps(side, ensure_ascii=False))
        return {"i": np.asarray(batch["i"]), "side": np.asarray(sides, dtype=object)}


def ray_score_map(items: Iterable[Any], options: ScoreOptions) -> Iterator[dict[str, Any]]:
    """score_shard per task in a Ray Data actor pool of --workers actors; sidecars in task order."""
    import ray
    import ray.data

    items = list(items)  # small dicts, one per shard
    todo = [
        {"i": i, "task": pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)}
        for i, item in enumerate(items)
        if not isinstance(item, Ready)
    ]
    done: dict[int, dict[str, Any]] = {}
    results: Iterator[dict] = iter(())
    if todo:
        first = next(item for item in items if not isinstance(item, Ready))
        cuda = options.device == "cuda"
        cpus = float(ray.cluster_resources().get("CPU", 1))
        ds = ray.data.from_items(todo, override_num_blocks=len(todo))
        ds = ds.map_batches(
            ShardScorer,
            fn_constructor_kwargs={
                "model": options.model,
                "pretrained": options.pretrained,
                "device": options.device,
                "precision": options.precision,
                "sha256": first["weights_sha256"],
                "cwd": os.getcwd(),
            },
            batch_size=1,
            batch_format="numpy",
            concurrency=options.workers,
            num_gpus=1 if cuda else 0,
            num_cpus=max(1.0, min(cpus / options.workers, cpus)) if not cuda else 1,
        )
        results = iter(ds.iter_rows())
    for i, item in enumerate(items):
        if isinstance(item, Ready):
            yield item.value
            continue
        while i not in done:
            row = next(results)
            side = json.loads(row["side"])
            if _ERROR in side:
                raise UserError(side[_ERROR])
            done[int(row["i"])] = side
        yield done.pop(i)
