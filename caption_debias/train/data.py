"""Prepared shards + images -> training samples, from the stored sentence_tokens.

The token ids live in three flat numpy arrays (tokens, sentence lengths, sentences per
row) so a 1M-row set costs a few hundred MB, not millions of Python lists. Every sample's
randomness comes from its own generator seeded by (seed, epoch, index): the texts do not
depend on worker count, rank or where a run was resumed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from caption_debias import augment
from caption_debias.errors import UserError
from caption_debias.image_files import MISSING, ImageProblem, decode_rgb
from caption_debias.train.config import RECIPES
from caption_debias.train.stored_ids import uses_stored_ids

if TYPE_CHECKING:
    from caption_debias.train.packed_source import PackedRows

log = logging.getLogger(__name__)


class RowImages(Protocol):
    """Where images come from, by row key and the shard's `image` value (FolderImages reads files, tar members
    and img2dataset downloads)."""

    def open(self, key: str, image: str):  # -> PIL.Image.Image (RGB)
        ...


class FolderImages:
    """Images under a root (a local folder or a URL such as s3://), named by the shard's `image` column,
    read through caption_debias.image_source: a file, a member `SHARD.tar#MEMBER` (img2dataset's
    webdataset output, pack's tars), a sample `SHARD.parquet#KEY`, or a URL row's download found by
    its key. Each process indexes a tar once and keeps it open (image_source/lookup.py: a row is one
    seek and one read, never a tar reopened per row); every picture is decoded by
    image_files.decode_rgb, as in pack. A missing image is FileNotFoundError, any other OSError.
    """

    def __init__(self, root: str | Path):
        from caption_debias.image_source import ImageSource
        from caption_debias.image_source.lookup import ImageLookup

        self.lookup = ImageLookup(ImageSource(str(root)))  # UserError naming the root when there is none
        self.root = self.lookup.root.resolved

    def open(self, key: str, image: str):
        try:
            data = self.lookup.read(image, key)
        except ImageProblem as exc:
            if exc.reason == MISSING:
                raise FileNotFoundError(exc.detail) from None
            raise
        return decode_rgb(data, image)


@dataclass
class TokenTable:
    """Per-row sentence token ids in flat arrays."""

    tokens: np.ndarray  # int64, all sentences of all rows back to back
    sent_start: np.ndarray  # start of each sentence in `tokens` (len = sentences + 1)
    row_start: np.ndarray  # first sentence of each row (len = rows + 1)
    summary: np.ndarray  # bool per sentence

    @classmethod
    def from_lists(
        cls, sentence_tokens: pa.Array, summary_mask: pa.Array, sentence_keep: pa.Array | None = None
    ) -> "TokenTable":
        """The rows' sentences; with `sentence_keep`, only the kept ones (augment.kept_sentences, batched)."""
        flat = pc.list_flatten(sentence_tokens)
        row_len = pc.list_value_length(sentence_tokens).to_numpy(zero_copy_only=False)
        sent_len = pc.list_value_length(flat).to_numpy(zero_copy_only=False)
        summary = pc.list_flatten(summary_mask).to_numpy(zero_copy_only=False).astype(bool)
        if len(summary) != len(sent_len):
            raise UserError("prepared shards: summary_mask and sentence_tokens disagree in length")
        tokens = pc.list_flatten(flat).to_numpy(zero_copy_only=False).astype(np.int64)
        if sentence_keep is not None and sentence_keep.null_count < len(sentence_keep):
            keep = sentence_flags(sentence_keep, row_len)
            tokens = tokens[np.repeat(keep, sent_len)]
            row_of = np.repeat(np.arange(len(row_len)), row_len)
            row_len = np.bincount(row_of[keep], minlength=len(row_len))
            sent_len, summary = sent_len[keep], summary[keep]
        return cls(
            tokens=tokens,
            sent_start=np.concatenate([[0], np.cumsum(sent_len)]).astype(np.int64),
            row_start=np.concatenate([[0], np.cumsum(row_len)]).astype(np.int64),
            summary=summary,
        )

    @classmethod
    def from_sentences(cls, sentences: list[list[str]], encode_batch, summary: np.ndarray) -> "TokenTable":
        """Re-tokenize once (the model's tokenizer differs from the shards')."""
        flat = [s for row in sentences for s in row]
        ids = encode_batch(flat)
        sent_len = np.array([len(x) for x in ids], dtype=np.int64)
        return cls(
            tokens=np.fromiter((t for x in ids for t in x), dtype=np.int64, count=int(sent_len.sum())),
            sent_start=np.concatenate([[0], np.cumsum(sent_len)]).astype(np.int64),
            row_start=np.concatenate([[0], np.cumsum([len(r) for r in sentences])]).astype(np.int64),
            summary=summary,
        )

    def __len__(self) -> int:
        return len(self.row_start) - 1

    def sentences(self, row: int) -> list[np.ndarray]:
        a, b = self.row_start[row], self.row_start[row + 1]
        return [self.tokens[self.sent_start[s] : self.sent_start[s + 1]] for s in range(a, b)]

    def summary_mask(self, row: int) -> np.ndarray:
        return self.summary[self.row_start[row] : self.row_start[row + 1]]


def sentence_flags(sentence_keep: pa.Array, row_len: np.ndarray) -> np.ndarray:
    """One bool per sentence of every row from a list<bool> column (a null row keeps every sentence)."""
    keep = np.ones(int(row_len.sum()), bool)
    valid = sentence_keep.is_valid().to_numpy(zero_copy_only=False)
    lengths = pc.list_value_length(sentence_keep).to_numpy(zero_copy_only=False)
    if (lengths[valid] != row_len[valid]).any():
        raise UserError("shards: sentence_keep and sentence_tokens disagree in length")
    keep[np.repeat(valid, row_len)] = pc.list_flatten(sentence_keep.filter(pa.array(valid))).to_numpy(
        zero_copy_only=False
    )
    return keep


@dataclass
class TrainRows:
    """Everything the loop needs from a prepared folder, loaded once."""

    keys: list[str]
    images: list[str]
    tokens: TokenTable
    groups: list[str | None] | None
    retokenized: bool
    complete: bool = True  # False: the prepared folder's manifest says an input was cut off (--allow-incomplete)

    def __len__(self) -> int:
        return len(self.keys)


def open_prepared(data: str | Path, allow_incomplete: bool = False):
    """The prepared folder; one whose manifest says complete: false only with `allow_incomplete`."""
    from caption_debias.dataset import PreparedDataset

    return PreparedDataset.open(data, allow_incomplete=allow_incomplete)


def load_rows(
    data: str | Path,
    tokenizer=None,
    split: str | None = None,
    group_key: str | None = None,
    allow_incomplete: bool = False,
) -> TrainRows:
    ds = open_prepared(data, allow_incomplete)
    columns = ["key", "image", "split", "sentence_tokens", "summary_mask"]
    has_keep = "sentence_keep" in ds.columns()
    if has_keep:
        columns.append("sentence_keep")
    if group_key:
        columns.append("meta")
    retok = tokenizer is not None and not uses_stored_ids(tokenizer, ds.manifest)
    if retok:
        columns.append("sentences")
    table = ds.read(columns)
    if split is not None:
        table = table.filter(pc.equal(table["split"], split))
    if table.num_rows == 0:
        raise UserError(f"{data}: no rows to train on" + (f" in split {split!r}" if split else ""))
    st = table["sentence_tokens"].combine_chunks()
    sm = table["summary_mask"].combine_chunks()
    if retok:
        if not hasattr(tokenizer, "encode"):
            raise UserError("the model's tokenizer cannot encode single sentences; CLIP-BPE style tokenizers only")
        summary = pc.list_flatten(sm).to_numpy(zero_copy_only=False).astype(bool)
        sentences = table["sentences"].to_pylist()
        if has_keep:
            keep = table["sentence_keep"].to_pylist()
            summary = np.fromiter(
                (f for row, k in zip(sm.to_pylist(), keep) for f in augment.kept_sentences(row, k)), bool
            )
            sentences = [augment.kept_sentences(s, k) for s, k in zip(sentences, keep)]
        tokens = TokenTable.from_sentences(sentences, lambda xs: [tokenizer.encode(x) for x in xs], summary)
        log.warning(
            "the model's tokenizer differs from the shards' CLIP BPE: re-tokenized %d captions once at load",
            table.num_rows,
        )
    else:
        tokens = TokenTable.from_lists(st, sm, table["sentence_keep"].combine_chunks() if has_keep else None)
    groups = None
    if group_key:
        groups = []
        for m in table["meta"].to_pylist():
            try:
                value = json.loads(m or "{}").get(group_key)
            except ValueError:
                value = None
            groups.append(None if value is None else str(value))
    complete = ds.manifest.get("complete") is not False
    return TrainRows(table["key"].to_pylist(), table["image"].to_pylist(), tokens, groups, retok, complete)


class BatchPlan:
    """Deterministic global batches per epoch (full batches only); rank r takes its slice of each."""

    def __init__(self, n: int, batch_size: int, seed: int, groups: list[str | None] | None = None, group_size: int = 1):
        if batch_size > n:
            raise UserError(f"--batch-size {batch_size} is larger than the {n} training rows")
        if groups is not None and batch_size % group_size:
            raise UserError(f"--batch-size {batch_size} must be a multiple of --group-size {group_size}")
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.groups, self.group_size = groups, group_size
        self.steps_per_epoch = n // batch_size

    def order(self, epoch: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, epoch, 7])
        if self.groups is None:
            return rng.permutation(self.n)
        by_group: dict[str, list[int]] = {}
        loose: list[int] = []
        for i, g in enumerate(self.groups):
            (loose if g is None else by_group.setdefault(g, [])).append(i)
        chunks: list[np.ndarray] = []
        for g in sorted(by_group):  # sorted: dict order must not decide the run
            rows = rng.permutation(by_group[g])
            full = len(rows) // self.group_size * self.group_size
            chunks += [rows[i : i + self.group_size] for i in range(0, full, self.group_size)]
            loose += rows[full:].tolist()
        # Remainders and rows without a group fill mixed chunks: no row is left out.
        loose_arr = rng.permutation(np.array(loose, dtype=np.int64))
        cut = len(loose_arr) // self.group_size * self.group_size
        chunks += [loose_arr[i : i + self.group_size] for i in range(0, cut, self.group_size)]
        # The one short chunk goes last, so every batch starts on a chunk boundary.
        parts = [chunks[i] for i in rng.permutation(len(chunks))] + [loose_arr[cut:]]
        return np.concatenate(parts)

    def batches(
        self, start_step: int, total_steps: int, rank: int = 0, world: int = 1, accum: int = 1
    ) -> Iterator[list[tuple[int, int]]]:
        """(epoch, row) lists for steps start_step..total_steps-1: this rank's share of each
        global batch, as `accum` micro-batches in order (a run with `accum` times the per-process
        batch and no accumulation sees the same rows on the same rank)."""
        per = self.batch_size // world
        micro = per // accum
        epoch, cached = -1, np.zeros(0, np.int64)  # replaced at the first step (epoch -1 is none)
        for step in range(start_step, total_steps):
            e, b = divmod(step, self.steps_per_epoch)
            if e != epoch:
                epoch, cached = e, self.order(e)
            batch = cached[b * self.batch_size : (b + 1) * self.batch_size]
            share = batch[rank * per : (rank + 1) * per]
            for m in range(accum):
                yield [(e, int(i)) for i in share[m * micro : (m + 1) * micro]]


class TrainSamples:
    """Map-style dataset: (epoch, row) -> image tensor + the recipe's token tensors."""

    def __init__(
        self,
        rows: TrainRows | PackedRows,
        images: RowImages,
        transform,
        recipe: str,
        context: int,
        seed: int,
        debias: augment.DebiasOptions,
        cache_images: bool = False,
        sot: int = augment.SOT,
        eot: int = augment.EOT,
    ):
        if recipe not in RECIPES:
            raise UserError(f"unknown recipe {recipe!r} (choose from {', '.join(RECIPES)})")
        self.rows, self.images, self.transform = rows, images, transform
        self.recipe, self.context, self.seed, self.debias = recipe, context, seed, debias
        self.sot, self.eot = sot, eot
        self.cache: dict[int, Any] | None = {} if cache_images else None

    def __len__(self) -> int:
        return len(self.rows)

    def _image(self, row: int):
        if self.cache is not None and row in self.cache:
            return self.cache[row]
        pixels = self.transform(self.images.open(self.rows.keys[row], self.rows.images[row]))
        if self.cache is not None:
            self.cache[row] = pixels
        return pixels

    def __getitem__(self, item: tuple[int, int]) -> dict[str, Any]:
        row = item[1]
        try:
            pixels = self._image(row)
        except Exception as exc:  # any unreadable image is skipped (or fatal with --strict) by the loop
            return {
                "row": row,
                "fallback": False,
                "error": f"image {self.rows.images[row]!r} (key {self.rows.keys[row]}): {type(exc).__name__}: {exc}",
            }
        out = self.text_only(item)
        out["image"] = pixels
        return out

    def text_only(self, item: tuple[int, int]) -> dict[str, Any]:
        """The recipe's token arrays for (epoch, row), without the image."""
        epoch, row = item
        out: dict[str, Any] = {"row": row, "error": None, "fallback": False}
        rng = np.random.default_rng([self.seed, epoch, row])
        sents = self.rows.tokens.sentences(row)
        ctx, sot, eot = self.context, self.sot, self.eot
        if self.recipe == "short":
            out["long"] = augment.one_sentence_text(sents, rng, ctx, sot, eot)
            return out
        out["long"] = augment.long_text(sents, ctx, sot, eot)
        if self.recipe == "longclip":
            out["short"] = augment.first_sentence_text(sents, ctx, sot, eot)
        elif self.recipe == "debias":
            out["short"], out["fallback"] = augment.debias_text(
                sents, self.rows.tokens.summary_mask(row), rng, ctx, self.debias, sot, eot
            )
        return out


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack the good samples; keep the errors (skipped images) for the loop to count and report."""
    import torch

    good = [s for s in samples if s["error"] is None]
    batch: dict[str, Any] = {
        "errors": [s["error"] for s in samples if s["error"] is not None],
        "fallback": sum(bool(s["fallback"]) for s in good),
        "rows": torch.tensor([s["row"] for s in good], dtype=torch.long),
    }
    if good:
        if "image" in good[0]:
            batch["image"] = torch.stack([s["image"] for s in good])
        for name in ("long", "short"):
            if name in good[0]:
                batch[name] = torch.from_numpy(np.stack([s[name] for s in good]))
    return batch
