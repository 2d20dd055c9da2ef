"""`export-captions`: captions from a prepared folder, summary-stripped or DeBias-augmented, as text.

For users who train with open_clip_train, HF or their own code: open_clip's tab-separated
`filepath`/`title` CSV, JSON lines or Parquet. Rows stream batch by batch; memory stays flat.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from caption_debias import storage
from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError
from caption_debias.export.options import FORMATS, ExportCaptionsOptions, check_augment, check_strip
from caption_debias.progress import Progress, add_work, advance

_SUFFIX_FORMAT = {".csv": "open_clip-csv", ".tsv": "open_clip-csv", ".jsonl": "jsonl", ".parquet": "parquet"}
_MARK_SOT, _MARK_EOT = -1, -2  # markers no sentence index can take


@contextmanager
def partial_file(to: Path) -> Iterator[Path]:
    """A temp name of this process next to `to`, renamed to `to` when the block ends, removed on failure.

    A half-written file never looks finished, and two runs writing one file leave one whole
    file (the later rename wins), so these single-file commands need no folder lock. A remote
    `to` is written locally and put under its name when complete (an object appears whole).
    """
    if storage.is_remote(to):
        try:
            with storage.staged(to) as tmp:
                yield tmp
        except OSError as exc:
            raise UserError(f"{to}: cannot write ({exc.strerror or exc})") from None
        return
    tmp = to.with_name(f".{to.name}.partial-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, to)
    except OSError as exc:
        raise UserError(f"{to}: cannot write ({exc.strerror or exc})") from None
    finally:
        tmp.unlink(missing_ok=True)


def format_for(path: Path, fmt: str | None) -> str:
    if fmt is None:
        try:
            return _SUFFIX_FORMAT[path.suffix.lower()]
        except KeyError:
            raise UserError(
                f"{path}: cannot tell the format from the name; pass --format ({', '.join(FORMATS)})"
            ) from None
    if fmt not in FORMATS:
        raise UserError(f"unknown --format {fmt!r} (choose from {', '.join(FORMATS)})")
    return fmt


def debias_options(strip: str, subsample: bool):
    """The training augmentation's options for --strip: summary -> detected flags, opening -> s1, none -> keep all."""
    from caption_debias.augment import DebiasOptions

    return DebiasOptions(
        drop_summary="detected" if strip == "summary" else "first",
        no_drop_summary=strip == "none",
        no_subsample=not subsample,
        no_pad=True,
    )


def chosen_sentences(k: int, summary_mask: Sequence[bool], rng: np.random.Generator, opts) -> list[int] | None:
    """Sentence indices augment.debias_text, as training calls it, would keep (in its order); None = full-caption fallback.

    The selection is the training code's own: it runs on one-token "sentences" holding each
    sentence's index + 1, and the indices are read back from the token layout it returns.
    """
    from caption_debias.augment import debias_text

    ids = [np.array([i + 1], dtype=np.int64) for i in range(k)]
    out, fallback = debias_text(ids, summary_mask, rng, k + 2, opts, sot=_MARK_SOT, eot=_MARK_EOT)
    if fallback:
        return None
    end = int(np.flatnonzero(out == _MARK_EOT)[0])
    return [int(i) - 1 for i in out[1:end]]


def row_rng(seed: int, key: str) -> np.random.Generator:
    """Per-row generator from (seed, key): the same variants whatever the shard layout or row order."""
    digest = hashlib.blake2b(f"{seed}\x00{key}".encode("utf-8"), digest_size=8).digest()
    return np.random.default_rng([seed, int.from_bytes(digest, "big")])


def caption_texts(
    row: dict[str, Any], strip: str, augment: str, copies: int, seed: int, counts: dict[str, int]
) -> list[str]:
    """The texts export-captions writes for one prepared row (one, or `copies` with augment=debias)."""
    from caption_debias.augment import kept_caption, kept_sentences

    keep = row.get("sentence_keep")  # curate --drop-ungrounded: a dropped sentence is in no exported text
    sentences, mask = kept_sentences(row["sentences"], keep), kept_sentences(row["summary_mask"], keep)
    full = kept_caption(row["caption"], row["sentences"], keep)
    if strip == "none" and augment == "none":
        return [full]
    opts = debias_options(strip, subsample=augment == "debias")
    rng = row_rng(seed, row["key"])
    n = copies if augment == "debias" else 1
    texts = []
    for _ in range(n):
        picked = chosen_sentences(len(sentences), mask, rng, opts)
        if picked is None:
            # Nothing left once the summary goes (one-sentence captions): the full caption, counted.
            counts["fallback_full_caption"] += 1
            texts.append(full)
        else:
            texts.append(" ".join(sentences[i] for i in picked))
    return texts


def _rows(data: PreparedDataset, strip, augment, copies, seed, image_root, counts) -> Iterator[dict[str, Any]]:
    columns = ["key", "image", "caption", "sentences", "summary_mask"]
    if "sentence_keep" in data.columns():
        columns.append("sentence_keep")
    for batch in data.iter_batches(columns, batch_size=2048):
        for row in batch.to_pylist():
            counts["images"] += 1
            image = row["image"]
            if image_root is not None and not storage.is_url(image):
                image = str(Path(image_root) / image)
            for copy, text in enumerate(caption_texts(row, strip, augment, copies, seed, counts)):
                counts["rows"] += 1
                yield {"key": row["key"], "filepath": image, "title": text, "copy": copy}
        advance(batch.num_rows)


def export_captions(
    prepared: str | Path,
    to: str | Path,
    *,
    fmt: str | None = None,
    strip: str = "summary",
    augment: str = "none",
    copies: int = 1,
    seed: int = 0,
    image_root: str | Path | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write one row per image (or `copies` rows with --augment debias); returns counts for the CLI."""
    dest: Path = storage.as_path(to)
    fmt = format_for(dest, fmt)
    check_strip(strip)
    check_augment(augment, copies)
    if dest.exists() and not overwrite:
        raise UserError(f"{dest}: already exists (pass --overwrite to replace it)")
    data = PreparedDataset.open(prepared)
    storage.refuse_overlap([prepared], dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    counts = {"images": 0, "rows": 0, "fallback_full_caption": 0}
    rows = _rows(data, strip, augment, copies, seed, image_root, counts)
    add_work(data.rows)
    with partial_file(dest) as tmp:
        {"open_clip-csv": _write_csv, "jsonl": _write_jsonl, "parquet": _write_parquet}[fmt](tmp, rows)
    return {
        "path": str(dest),
        "format": fmt,
        "strip": strip,
        "augment": augment,
        "copies": copies,
        "seed": seed,
        **counts,
    }


def run_export_captions(prepared: str | Path, to: str | Path, options: ExportCaptionsOptions) -> dict[str, Any]:
    """`caption-debias export-captions`: the options checked (every field's limits), then export_captions
    with the rows counted on the progress display."""
    options.validate()
    with Progress("export-captions", "rows", quiet=options.quiet, interval=options.log_interval):
        return export_captions(
            prepared,
            to,
            fmt=options.format,
            strip=options.strip,
            augment=options.augment,
            copies=options.copies,
            seed=options.seed,
            image_root=options.image_root,
            overwrite=options.overwrite,
        )


def _write_csv(path: Path, rows: Iterator[dict[str, Any]]) -> None:
    # open_clip reads this with pandas.read_csv(sep="\t"): quoting keeps tabs and newlines inside a title.
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(["filepath", "title"])
        for row in rows:
            writer.writerow([row["filepath"], row["title"]])


def _write_jsonl(path: Path, rows: Iterator[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(
                json.dumps(
                    {"key": row["key"], "image": row["filepath"], "caption": row["title"], "copy": row["copy"]},
                    ensure_ascii=False,
                )
                + "\n"
            )


def _write_parquet(path: Path, rows: Iterator[dict[str, Any]], chunk: int = 8192) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("key", pa.string()), ("image", pa.string()), ("caption", pa.string()), ("copy", pa.int32())])
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        buf: list[dict[str, Any]] = []
        for row in rows:
            buf.append({"key": row["key"], "image": row["filepath"], "caption": row["title"], "copy": row["copy"]})
            if len(buf) >= chunk:
                writer.write_table(pa.Table.from_pylist(buf, schema=schema))
                buf.clear()
        writer.write_table(pa.Table.from_pylist(buf, schema=schema))
