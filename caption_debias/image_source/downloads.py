"""URL rows: their images in img2dataset's output under the root, found by the carried key.

`caption-debias urls` writes each row's prepared key as `caption_key` and has img2dataset save
it (--save_additional_columns); img2dataset names samples by its own key. So the join reads
every shard's NNNNN.parquet (caption_key, key, status, error_message) once and maps each
caption_key to where its sample is, in the output format that shard was written in:
`NNNNN.tar#KEY.jpg` (webdataset), `NNNNN.parquet#KEY` (parquet: the images in that same file),
`NNNNN/KEY.ext` (files). Tars whose NNNNN.parquet was not kept are indexed from their KEY.json
members (one pass each). The first successful download of a key wins.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from caption_debias.image_files import MISSING, ImageProblem, read_member
from caption_debias.image_source import parquet_samples, tars
from caption_debias.image_source.parquet_samples import image_column
from caption_debias.image_source.refs import IMAGE_EXTS
from caption_debias.img2dataset_columns import KEY_COLUMN

SHARD = re.compile(r"^(\d+)\.(parquet|tar)$")
MAX_JSON_BYTES = 1 << 20  # a KEY.json member is metadata: a few hundred bytes
MAX_KEY = 1 << 16  # characters of a key: prepare's keys and img2dataset's are far shorter


@dataclass
class Downloads:
    """caption_key -> the row's image reference under the root, and why the others have none."""

    found: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    shards: int = 0  # img2dataset shards seen under the root
    broken: list[str] = field(default_factory=list)  # why a shard's keys could not be read

    def image(self, key: object, url: str) -> str:
        """The image reference of a URL row with prepared key `key`, or ImageProblem(MISSING) saying why none."""
        if self.shards == 0:
            raise ImageProblem(
                MISSING,
                f"{url} is a URL and the image root holds no img2dataset output; download it first "
                "(caption-debias urls, img2dataset) and give that folder as the image root",
            )
        if not self.found and not self.failed:
            raise ImageProblem(
                MISSING,
                f"{url} is a URL, and the img2dataset output under the image root carries no {KEY_COLUMN} "
                "(download from the list `caption-debias urls` writes)",
            )
        key = str(key)
        if key in self.found:
            return self.found[key]
        unread = f"; {len(self.broken)} shard(s) unreadable: {self.broken[0]}" if self.broken else ""
        why = self.failed.get(key, f"not in the img2dataset output{unread}")
        raise ImageProblem(MISSING, f"no downloaded image for key {key} ({url}): {why}")

    def add(self, caption_key, ref: str, status, error) -> None:
        if caption_key is None or caption_key in self.found:
            return
        if status == "success":
            self.found[caption_key] = ref
            self.failed.pop(caption_key, None)
        else:
            self.failed[caption_key] = f"img2dataset status {status}" + (f": {error}" if error else "")


def build(files) -> Downloads:
    """The index of every img2dataset shard at the top of the root (`files`: roots.LocalFiles or RemoteFiles)."""
    entries = files.entries()
    index = Downloads()
    stems = sorted({m.group(1) for name in entries if (m := SHARD.match(name)) and not entries[name]})
    for stem in stems:
        index.shards += 1
        try:
            if f"{stem}.parquet" in entries:
                _add_parquet(files, entries, stem, index)
            elif f"{stem}.tar" in entries:
                _add_tar_json(files, f"{stem}.tar", index)
        except ImageProblem as exc:  # a shard that cannot be read: its keys stay unknown, and say why
            index.broken.append(exc.detail)
    return index


def _add_parquet(files, entries: dict[str, bool], stem: str, index: Downloads) -> None:
    """One shard's metadata, row group by row group (each size-checked as parquet_samples reads them):
    a group that cannot be read costs its own keys, named in `broken`."""
    import pyarrow as pa

    name = f"{stem}.parquet"
    try:
        with files.open(name, buffer_size=1 << 16) as fh:
            pf = parquet_samples.open_bounded(fh, name, [KEY_COLUMN, "key", "status", "error_message"])
            if KEY_COLUMN not in pf.schema_arrow.names or "key" not in pf.schema_arrow.names:
                return
            layout = _layout(files, entries, stem, pf.schema_arrow)
            columns = [c for c in (KEY_COLUMN, "key", "status", "error_message") if c in pf.schema_arrow.names]
            for group in range(pf.metadata.num_row_groups):
                try:
                    table = parquet_samples.read_group(pf, group, columns, name)
                except ImageProblem as exc:
                    index.broken.append(exc.detail)
                    continue
                for row in range(table.num_rows):
                    caption_key, key = (parquet_samples.text(table, c, row, MAX_KEY + 1) for c in (KEY_COLUMN, "key"))
                    if max(len(caption_key or ""), len(key or "")) > MAX_KEY:
                        continue  # no row of ours has such a key: never matched
                    status, error = (parquet_samples.text(table, c, row) for c in ("status", "error_message"))
                    index.add(caption_key, layout(str(key)), status, error)
    except (pa.ArrowException, OSError) as exc:
        if isinstance(exc, ImageProblem):
            raise
        raise ImageProblem(MISSING, f"{name}: unreadable img2dataset metadata ({exc})") from None


def _layout(files, entries: dict[str, bool], stem: str, schema):
    """KEY -> its reference, for the output format shard `stem` was written in."""
    if f"{stem}.tar" in entries:
        return lambda key: f"{stem}.tar#{key}.jpg"  # refs.candidates also finds .png/.webp
    if image_column(schema) is not None:
        return lambda key: f"{stem}.parquet#{key}"
    if entries.get(stem):  # files: one listing of the shard's folder
        names: dict[str, str] = {}
        for n in sorted(files.entries(stem)):
            if n.rpartition(".")[2].lower() in IMAGE_EXTS:
                names.setdefault(n.rpartition(".")[0], n)
        return lambda key: f"{stem}/{names.get(key, key + '.jpg')}"
    return lambda key: f"{stem}.tfrecord#{key}"  # refused by refs.parse in one line


def _add_tar_json(files, tar_name: str, index: Downloads) -> None:
    """Index one tar from its KEY.json members (only successes are in a tar)."""
    with files.open(tar_name) as fh:
        tar = tars.open_tar(fh, tar_name)
        last = None
        while (info := tars.next_member(tar, tar_name, last)) is not None:
            last = info.name
            if not info.name.endswith(".json") or not info.isfile():
                continue
            try:
                meta = json.loads(read_member(tar, info, f"{tar_name}#{info.name}", MAX_JSON_BYTES))
            except (ImageProblem, ValueError):
                continue
            if isinstance(meta, dict):
                key = meta.get("key") or info.name[: -len(".json")]
                index.add(meta.get(KEY_COLUMN), f"{tar_name}#{key}.jpg", meta.get("status", "success"), None)
