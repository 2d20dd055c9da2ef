"""Images downloaded by img2dataset (webdataset output), joined to prepared rows on the carried key.

`caption-debias urls` writes the prepared key as `caption_key` and has img2dataset save it
(--save_additional_columns); img2dataset names each sample by its own 9-digit key, so the join
goes through img2dataset's per-shard metadata (NNNNN.parquet: caption_key, key, status) or,
when only the tars were kept, through the KEY.json members inside NNNNN.tar.
The training loop draws rows by index (map-style, exactly resumable), so members are read by
random access with tarfile, not through webdataset's sequential streaming pipeline.
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from caption_debias.img2dataset_columns import KEY_COLUMN


@dataclass
class DownloadIndex:
    """caption_key -> 'NNNNN.tar#KEY.jpg' for downloaded samples, and why the others are missing."""

    members: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def member(self, key: str) -> str:
        """The tar member path (FolderImages reads 'SHARD.tar#MEMBER'), or OSError saying why there is none."""
        try:
            return self.members[key]
        except KeyError:
            if not self.members and not self.failed:
                raise OSError(
                    f"no downloaded image for key {key}: the img2dataset output carries no {KEY_COLUMN} "
                    "(download from the list `caption-debias urls` writes)"
                ) from None
            why = self.failed.get(key, "not in the img2dataset output")
            raise OSError(f"no downloaded image for key {key}: {why}") from None


def is_img2dataset_webdataset(root: Path) -> bool:
    return any(root.glob("*.tar")) and (any(root.glob("*_stats.json")) or any(root.glob("*.parquet")))


def build_index(root: str | Path) -> DownloadIndex:
    """Index every NNNNN.tar under `root`, from its NNNNN.parquet when present, else from its JSON members."""
    import pyarrow.parquet as pq

    root = Path(root)
    index = DownloadIndex()
    for tar in sorted(root.glob("*.tar")):
        if not tar.is_file():  # a FIFO or device named *.tar would block tarfile.open
            continue
        meta = tar.with_suffix(".parquet")
        if meta.is_file() and KEY_COLUMN in pq.ParquetFile(meta).schema_arrow.names:
            table = pq.read_table(meta, columns=[KEY_COLUMN, "key", "status", "error_message"]).to_pylist()
            rows = ((r[KEY_COLUMN], r["key"], r["status"], r["error_message"]) for r in table)
            _add(index, tar.name, rows)
        else:
            _add(index, tar.name, _json_members(tar))
    return index


def _json_members(tar_path: Path):
    """(caption_key, key, status, error) from the KEY.json members (only successes are in the tar)."""
    with tarfile.open(tar_path) as tar:
        for info in tar:
            if info.name.endswith(".json"):
                meta = json.loads(tar.extractfile(info).read())
                yield meta.get(KEY_COLUMN), meta.get("key") or info.name[:-5], meta.get("status", "success"), None


def _add(index: DownloadIndex, tar_name: str, rows) -> None:
    for caption_key, key, status, error in rows:
        if caption_key is None or caption_key in index.members:
            continue  # first download wins when a key was fetched twice
        if status == "success":
            index.members[caption_key] = f"{tar_name}#{key}.jpg"  # FolderImages also tries .png/.webp
            index.failed.pop(caption_key, None)
        else:
            index.failed[caption_key] = f"img2dataset status {status}" + (f": {error}" if error else "")
