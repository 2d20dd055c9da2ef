"""score_folder(): input folders -> reference sample (driver) -> scored shards (parallel) -> manifest.

Resumable like curate: the reference sample and every finished shard leave a sidecar with a
fingerprint of what they were made from (input shard, model weights, options); a rerun with
the same inputs, model and options reuses each one that matches.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from caption_debias import engines, runner, storage
from caption_debias.dataset import MANIFEST
from caption_debias.errors import UserError
from caption_debias.image_source import ImageCounts, carries_images, check_missing, no_root_line
from caption_debias.image_source.stage import record
from caption_debias.input_folders import Inputs, InputShard, Tally, open_inputs
from caption_debias.model.describe import describe
from caption_debias.model.imports import import_open_clip
from caption_debias.model.names import warn_random_weights
from caption_debias.progress import Progress, say
from caption_debias.runner import (
    SHARDS_DIR,
    StageFolder,
    Summary,
    Task,
    load_sidecar,
    run_tasks,
    stage_run,
    write_json,
    write_shard,
)
from caption_debias.score import encode, shard
from caption_debias.score.options import ScoreOptions

REMOVED = "removed.jsonl"
STATE_DIR = ".score"
REFERENCE_SIDECAR = ".score/reference.json"


def _clip_bpe_only(name: str, tok: str, first: str) -> None:
    """The model's tokenizer reads the stored ids as they are: only CLIP BPE ones."""
    if tok != "clip-bpe":
        raise UserError(f"{name}: made with tokenizer {tok!r}; score reads CLIP BPE ids (prepare's default)")


def reference_candidates(total: int, size: int, seed: int) -> np.ndarray:
    """Global orders to try, in order, for a reference sample of `size` readable images.

    A seeded draw without replacement over every row of the input; twice the size plus a
    margin, so a few unreadable images still leave `size` (fewer only when the input is small
    or mostly unreadable; the manifest records how many were used).
    """
    rng = np.random.default_rng(seed)
    want = min(total, 2 * size + 16)
    return rng.choice(total, size=want, replace=False).astype(np.int64) if want else np.zeros(0, np.int64)


def _check_image_roots(inputs: Inputs) -> None:
    """A folder with no image root (given or recorded) must carry its images (curate --embed-images)."""
    for f, manifest in zip(inputs.folders, inputs.manifests):
        if f["image_root"] is None and not carries_images(f["path"], manifest):
            raise UserError(
                f"{f['path']}: give --image-root (its manifest records no image root and its rows carry no image_bytes)"
            )


def _has_bytes(path: str) -> bool:
    return "image_bytes" in storage.parquet_file(path).schema_arrow.names


Facts = dict[int, tuple[str, str, bytes | None, str | None]]  # order -> key, image, stored bytes, image root


def _candidate_facts(inputs: Inputs, candidates: list[int]) -> Facts:
    """Key, image path, stored bytes and image root of each candidate row, read shard by shard."""
    import pyarrow as pa

    by_shard: dict[int, list[int]] = {}
    for o in candidates:
        by_shard.setdefault(inputs.shard_of(o).index, []).append(o)
    facts: Facts = {}
    for index, orders in by_shard.items():
        s = inputs.shards[index]
        cols = ["key", "image"] + (["image_bytes"] if _has_bytes(s.path) else [])
        t = storage.read_table(s.path, columns=cols)
        local = [o - s.start for o in orders]
        part = t.take(pa.array(local))
        blobs = part.column("image_bytes").to_pylist() if "image_bytes" in cols else [None] * len(local)
        for o, k, im, b in zip(orders, part.column("key").to_pylist(), part.column("image").to_pylist(), blobs):
            facts[o] = (k, im, b, s.image_root)
    return facts


def _encode_reference(
    candidates: list[int], facts: Facts, want: int, options: ScoreOptions, sm: encode.ScoreModel
) -> tuple[list[int], list[np.ndarray], int]:
    """The first `want` readable candidates in draw order: (their orders, their embeddings, unreadable ones tried)."""
    chosen: list[int] = []
    embs: list[np.ndarray] = []
    unreadable = 0
    pos = 0
    while len(chosen) < want and pos < len(candidates):
        take = candidates[pos : pos + want - len(chosen)]
        pos += len(take)
        # rows of different folders may have different roots: decode each with its own
        for root in dict.fromkeys(facts[o][3] for o in take):
            group = [o for o in take if facts[o][3] == root]
            emb, status, _ = encode.encode_images(
                sm,
                [facts[o][1] for o in group],
                [facts[o][2] for o in group],
                root or None,
                options.batch_size,
                options.decode_threads,
                options.draft_decode,
                keys=[facts[o][0] for o in group],
            )
            for o, e, st in zip(group, emb, status):
                if st == encode.OK:
                    chosen.append(o)
                    embs.append(e)
                else:
                    unreadable += 1
    return chosen, embs, unreadable


def _reference(inputs: Inputs, out: Path, options: ScoreOptions, sm: encode.ScoreModel, fp: str, resumed: bool):
    """The reference sample: the first `reference_images` readable images of a seeded draw, encoded.

    Returns (file path or None, its sha256, the manifest's description of it).
    """
    import pyarrow as pa

    side_path = out / REFERENCE_SIDECAR
    path = out / shard.REFERENCE_FILE
    side = load_sidecar(side_path, fp, out, output=path, verify_digest=True) if resumed else None
    if side is not None:
        return str(path), side["sha256"], side["info"]
    want = options.reference_images
    candidates = reference_candidates(inputs.rows, want, options.seed).tolist()
    facts = _candidate_facts(inputs, candidates)
    chosen, embs, unreadable = _encode_reference(candidates, facts, want, options, sm)
    info = {
        "size": len(chosen),
        "asked": want,
        "seed": options.seed,
        "candidates_unreadable": unreadable,
        "rule": "seeded draw without replacement over the input's rows (numpy default_rng(seed).choice), "
        "the first readable images in draw order",
    }
    if not chosen:
        return None, None, info
    dim = sm.identity["embed_dim"]
    table = pa.table(
        {
            "order": pa.array(chosen, pa.int64()),
            "key": pa.array([facts[o][0] for o in chosen], pa.string()),
            "image": pa.array([facts[o][1] for o in chosen], pa.string()),
            "embedding": pa.FixedSizeListArray.from_arrays(
                pa.array(np.stack(embs).astype(np.float32).reshape(-1), pa.float32()), dim
            ),
        }
    )
    digest = write_shard(table, path)
    write_json({"fingerprint": fp, "sha256": digest, "info": info}, side_path)
    return str(path), digest, info


def _shard_params(
    options: ScoreOptions, sm: encode.ScoreModel, reference: tuple[str | None, str | None], shaping: dict[str, Any]
) -> shard.ShardParams:
    return shard.ShardParams(
        model=options.model,
        pretrained=options.pretrained,
        device=options.device,
        precision=options.precision,
        weights_sha256=sm.identity["weights_sha256"],
        batch_size=options.batch_size,
        decode_threads=options.decode_threads,
        draft_decode=options.draft_decode,
        keep_embeddings=options.keep_embeddings,
        reference=reference[0],
        reference_sha256=reference[1],
        threads_for_workers=options.workers if options.workers > 1 and options.engine == "local" else None,
        shaping=shaping,
    )


class ScoreTally(Tally):
    """The input tally (rows per folder, removals, shards) plus what score's sidecars add: images and context."""

    def __init__(self, inputs: Inputs) -> None:
        super().__init__(inputs)
        self.images = ImageCounts()
        self.context: Counter[str] = Counter()

    def add(self, shard: InputShard, side: dict[str, Any]) -> None:
        super().add(shard, side)
        for key in ("captions_over_context", "sentences_over_context", "sentences"):
            self.context[key] += side[key]
        if side.get("images"):  # a sidecar of an older run has none
            self.images = self.images.merge(ImageCounts.from_dict(side["images"]))


def _tasks(inputs: Inputs, out: Path, params: shard.ShardParams) -> Iterator[Task]:
    for s in inputs.shards:
        fp = shard.fingerprint(s, params)
        yield Task(s.index, str(out), fp, shard.sidecar_name(s.index), work=s)


def score_folder(
    inputs: Sequence[str | Path] | str | Path, out: str | Path, options: ScoreOptions | None = None
) -> dict[str, Any]:
    """Score the prepared (or curated) folders `inputs` with `options.model` into `out`; returns the manifest.

    `out` is a folder of the prepared-folder contract (every reader of prepared folders reads
    it) whose rows carry clip_score, sentence_scores, sentence_grounding (and with
    keep_embeddings the embeddings); a row whose image cannot be read is a removed.jsonl line.
    """
    options = options or ScoreOptions()
    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    folder = StageFolder(
        storage.as_path(out),
        "score",
        state_dir=STATE_DIR,
        owned=(MANIFEST, REMOVED, SHARDS_DIR),
        subdirs=(SHARDS_DIR, shard.WRITE_DIR),
        verb="scored",
    )
    with stage_run(folder, options, inputs):
        return _score(inputs, folder, options)


def _score(given: Sequence[str | Path], folder: StageFolder, options: ScoreOptions) -> dict[str, Any]:
    from caption_debias.score import manifest as manifest_mod

    started = time.monotonic()
    out = folder.out
    inputs = open_inputs(given, out, tokenizer_rule=_clip_bpe_only, image_roots=True, image_root=options.image_root)
    _check_image_roots(inputs)  # each input's root by the one rule (image_source.roots), resolved in open_inputs
    roots = inputs.roots
    if not roots:
        say(no_root_line("score"), options.quiet)
    shared_root = next(iter(roots.values())) if len(roots) == 1 else None
    options = dataclasses.replace(options, image_root=None if shared_root is None else shared_root.resolved)
    say(f"loading model {describe(options.model, options.pretrained)}", options.quiet)
    tell = partial(say, quiet=options.quiet)
    import_open_clip([(options.model, options.pretrained)], tell)
    sm = encode.cached(options.model, options.pretrained, options.device, options.precision, None, tell)
    warn_random_weights("score", options.model, options.pretrained, options.quiet)
    shaping = {
        "inputs": [f["path"] for f in inputs.folders],
        "input_manifests": [f["manifest_sha256"] for f in inputs.folders],
        "image_roots": [f["image_root"] for f in inputs.folders],
        "weights_sha256": sm.identity["weights_sha256"],
        **options.output_shaping(),
    }
    resumed = folder.start(shaping, options.overwrite)
    fp = runner.fingerprint({"v": shard.STEP_VERSION, **shaping})
    say(f"reference sample: up to {options.reference_images:,} images of {inputs.rows:,} rows", options.quiet)
    with Progress("score reference", "images", quiet=options.quiet, interval=options.log_interval):
        ref_path, ref_sha, ref_info = _reference(inputs, out, options, sm, fp, resumed)
    params = _shard_params(options, sm, (ref_path, ref_sha), shaping)
    mapper = engines.mapper(options, engines.Actors(setup=params.load_model, gpu=options.device == "cuda"))
    progress = Progress(
        "score",
        "rows",
        total=inputs.rows,
        quiet=options.quiet,
        interval=options.log_interval,
        phases=True,  # an in-process shard's rows move batch by batch: encoding images, then texts
        heartbeat=True,  # worker processes report per shard: a line every interval all the same
    )
    tally = ScoreTally(inputs)
    with progress, folder.partial_lines(REMOVED) as removed:

        def on_side(task: Task, side: dict[str, Any]) -> None:
            tally.add(task.work, side)
            removed.write_all(side["removed"])
            progress.update(tally.read, extra=f"{len(tally.shards)} shards")

        fn = partial(shard.score_shard, params=params)
        reused = run_tasks(folder, _tasks(inputs, out, params), fn, mapper, on_side, progress)
    if roots:  # the first root tried names the run's (several inputs: the first input's)
        check_missing("score", tally.images, next(iter(roots.values())), options.max_missing_images)
    folder.prune(
        {f"{SHARDS_DIR}/part-*.parquet": [s["path"] for s in tally.shards]},
        n_tasks=len(inputs.shards),
        sidecar_dirs=(shard.WRITE_DIR,),
    )
    manifest = manifest_mod.build(
        tally=tally,
        options=options,
        model=sm.identity,
        reference=ref_info,
        context=tally.context,
        elapsed_s=time.monotonic() - started,
    )
    manifest["images"] = record(shared_root, tally.images, options.max_missing_images)
    if roots and shared_root is None:  # inputs read under different roots: each input entry names its own
        manifest["images"]["opened"] = True
    write_json(manifest, out / MANIFEST)
    if not options.quiet:
        print_summary(manifest, str(out), Counter(shards=reused))
    return manifest


def print_summary(manifest: dict[str, Any], out: str, reused: Counter) -> None:
    c, sc = manifest["counts"], manifest["scoring"]
    model = sc["model"]
    Summary(
        "score",
        out,
        {"read": c["read"], "written": c["written"], "removed": c["removed"]},
        outputs=len(manifest["shards"]),
        reused=reused.get("shards", 0),
        elapsed_s=manifest.get("elapsed_s") or 0.0,
        reasons={r: n for r, n in c["removed_by_reason"].items() if n},
        details=f"{out}/removed.jsonl" if c["removed"] else None,
        notes=[
            f"  model {model['name']} ({model['spec']}), weights sha256 {model['weights_sha256'][:12]}, "
            f"context {model['context_length']} tokens",
            f"  captions longer than the context: {sc['captions_over_context']:,} (sentences: "
            f"{sc['sentences_over_context']:,}); reference images: {sc['reference']['size']}",
        ],
    ).print()
