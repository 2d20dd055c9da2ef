"""`urls`: an img2dataset-ready URL list from prepared shards, and the exact img2dataset command.

The list's columns, and why the key travels as `caption_key`: caption_debias/img2dataset_columns.py.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from caption_debias import storage
from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError
from caption_debias.export.options import UrlsOptions, check_strip
from caption_debias.img2dataset_columns import CAPTION_COLUMN, KEY_COLUMN, URL_COLUMN
from caption_debias.progress import Progress, add_work, advance


def img2dataset_command(
    url_list: Path,
    images: Path,
    *,
    image_size: int = 256,
    processes: int = 8,
    threads: int = 64,
    samples_per_shard: int = 10000,
) -> str:
    """The img2dataset call that downloads `url_list` into webdataset tars `train` can read."""
    args = [
        "img2dataset",
        "--url_list",
        str(url_list),
        "--input_format",
        "parquet",
        "--url_col",
        URL_COLUMN,
        "--caption_col",
        CAPTION_COLUMN,
        "--save_additional_columns",
        f'["{KEY_COLUMN}"]',
        "--output_format",
        "webdataset",
        "--output_folder",
        str(images),
        "--image_size",
        str(image_size),
        "--resize_mode",
        "keep_ratio",
        "--processes_count",
        str(processes),
        "--thread_count",
        str(threads),
        "--number_sample_per_shard",
        str(samples_per_shard),
    ]
    return shlex.join(args)


def write_url_list(
    prepared: str | Path,
    to: str | Path,
    *,
    images: str | Path | None = None,
    image_size: int = 256,
    processes: int = 8,
    threads: int = 64,
    strip: str = "none",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write (caption_key, url, caption) for every row whose image is a URL; count the rows that are not.

    `strip` (export-captions' --strip) decides the caption img2dataset stores as KEY.txt, so a
    webdataset trainer (open_clip_train) reads summary-stripped captions straight from the tars.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from caption_debias.export.captions import caption_texts, partial_file

    check_strip(strip)
    data = PreparedDataset.open(prepared)
    dest: Path = storage.as_path(to)
    storage.refuse_overlap([prepared], dest)
    if dest.suffix.lower() not in (".parquet", ".pq"):
        raise UserError(f"{dest}: the URL list is written as Parquet; name it LIST.parquet")
    if dest.exists() and not overwrite:
        raise UserError(f"{dest}: already exists (pass --overwrite to replace it)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([(KEY_COLUMN, pa.string()), (URL_COLUMN, pa.string()), (CAPTION_COLUMN, pa.string())])
    written = not_url = 0
    counts = {"fallback_full_caption": 0}
    columns = ["key", "image", "caption"] + (["sentences", "summary_mask"] if strip != "none" else [])
    # Streamed batch by batch: a billion-row set never sits in memory; written under a name of
    # this process and renamed at the end, so a half-written list is never mistaken for a
    # finished one and two runs writing the same LIST leave one whole list.
    add_work(data.rows)
    with partial_file(dest) as tmp:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for batch in data.iter_batches(columns):
                advance(batch.num_rows)
                is_url = pc.match_substring_regex(batch.column("image"), storage.URL_PATTERN)
                kept = batch.filter(is_url)
                not_url += batch.num_rows - kept.num_rows
                if kept.num_rows:
                    captions = kept.column("caption")
                    if strip != "none":
                        captions = pa.array(
                            [caption_texts(row, strip, "none", 1, 0, counts)[0] for row in kept.to_pylist()],
                            pa.string(),
                        )
                    writer.write_table(
                        pa.table(
                            {
                                KEY_COLUMN: kept.column("key"),
                                URL_COLUMN: kept.column("image"),
                                CAPTION_COLUMN: captions,
                            },
                            schema=schema,
                        )
                    )
                    written += kept.num_rows
        if written == 0:
            raise UserError(f"{prepared}: no row has a URL image ({not_url} rows hold file paths); nothing to download")
    images = storage.as_path(images) if images is not None else dest.with_name(dest.stem + "_images")
    return {
        "path": str(dest),
        "rows": written,
        "skipped_not_url": not_url,
        "strip": strip,
        "fallback_full_caption": counts["fallback_full_caption"],
        "images": str(images),
        "command": img2dataset_command(dest, images, image_size=image_size, processes=processes, threads=threads),
    }


def run_urls(prepared: str | Path, to: str | Path, options: UrlsOptions) -> dict[str, Any]:
    """`caption-debias urls`: write_url_list with the rows counted on the progress display."""
    options.validate()
    with Progress("urls", "rows", quiet=options.quiet, interval=options.log_interval):
        return write_url_list(
            prepared,
            to,
            images=options.images,
            image_size=options.image_size,
            processes=options.processes,
            threads=options.threads,
            strip=options.strip,
            overwrite=options.overwrite,
        )
