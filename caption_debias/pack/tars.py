"""One tar: a chunk of prepared rows -> samples (KEY.jpg, KEY.txt, KEY.json) in NNNNN.tar.

Written with webdataset's own TarWriter, with a fixed mtime so the same rows give the same
bytes in any process. A sample is named like img2dataset names its samples: the tar number
and the row's position in the chunk, zero padded (`000030012` = tar 3, row 12), so names are
unique, sort in input order and never hold the dots or slashes a prepared key may contain;
the prepared key travels in KEY.json.
"""

from __future__ import annotations

import json
import os
from typing import Any

from caption_debias import storage
from caption_debias.augment import kept_caption
from caption_debias.image_files import ImageProblem
from caption_debias.image_source import ImageCounts
from caption_debias.pack.images import ImageFailed, ImageReader
from caption_debias.pack.options import PackOptions
from caption_debias.runner import Task, WriteFailed, os_error_text, sha256_file, temp_path, write_json
from caption_debias.worker_life import exit_if_orphaned

# Columns of the prepared shards a sample is made from.
COLUMNS = ("key", "source", "split", "image", "caption", "sentences", "sentence_tokens", "summary_mask", "meta")
OPTIONAL_COLUMNS = ("sentence_keep",)  # read when the shards have them (curate --drop-ungrounded)
STATE_DIR = ".pack"
TAR_MTIME = 0  # reproducible bytes; webdataset's default is the wall clock
EXCERPT = 200
SAMPLE_VERSION = 2  # bump when what a sample holds changes: a tar made under another version is redone


def tar_name(index: int) -> str:
    return f"{index:05d}.tar"


def sidecar_name(index: int) -> str:
    return f"{STATE_DIR}/{index:05d}.json"


def sample_name(index: int, position: int, samples_per_shard: int) -> str:
    return f"{index:05d}{position:0{len(str(samples_per_shard - 1))}d}"


def sample_json(row: dict[str, Any], resized) -> bytes:
    """KEY.json: the row's identity and text (ids per sentence, summary flags) and the image's sizes."""
    try:
        meta = json.loads(row["meta"]) if row.get("meta") else {}
    except ValueError:
        meta = row["meta"]
    doc = {
        "key": row["key"],
        "source": row["source"],
        "split": row["split"],
        "image": row["image"],
        "sentences": row["sentences"],
        "sentence_tokens": row["sentence_tokens"],
        "summary_mask": row["summary_mask"],
        "width": resized.width,
        "height": resized.height,
        "original_width": resized.original_width,
        "original_height": resized.original_height,
        "meta": meta,
    }
    if row.get("sentence_keep") is not None:  # curate --drop-ungrounded; train applies it (packed_source), KEY.txt too
        doc["sentence_keep"] = row["sentence_keep"]
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def pack_tar(task: Task, options: PackOptions) -> dict[str, Any]:
    """Worker: resize every image of the chunk (`task.work`: its rows, COLUMNS of each, in input order),
    write the tar and its sidecar. Returns the sidecar."""
    from webdataset import TarWriter

    rows: list[dict[str, Any]] = task.work
    out = task.folder
    path = out / tar_name(task.index)
    tmp = temp_path(path)  # local; for a remote folder put under its name once complete
    assert options.image_root is not None  # PackOptions.check requires one
    reader = ImageReader(options.image_root, options)
    removed: list[dict[str, Any]] = []
    written, counts = 0, ImageCounts()
    try:
        with open(tmp, "wb") as fh:
            with TarWriter(fh, encoder=False, mtime=TAR_MTIME) as writer:
                images, keys = [row["image"] for row in rows], [row["key"] for row in rows]
                for position, (row, resized) in enumerate(zip(rows, reader.resized_rows(images, keys))):
                    counts.add(
                        ImageProblem(resized.reason, resized.detail) if isinstance(resized, ImageFailed) else resized,
                        row["image"],
                    )
                    if isinstance(resized, ImageFailed):
                        failed = resized
                        removed.append(
                            {
                                "key": row["key"],
                                "reason": failed.reason,
                                "detail": failed.detail,
                                "image": row["image"],
                                "caption": row["caption"][:EXCERPT],
                            }
                        )
                        continue
                    writer.write(
                        {
                            "__key__": sample_name(task.index, position, options.samples_per_shard),
                            "jpg": resized.jpg,
                            # open_clip_train reads only this: a sentence curate dropped is not in it
                            "txt": kept_caption(row["caption"], row["sentences"], row.get("sentence_keep")).encode(
                                "utf-8"
                            ),
                            "json": sample_json(row, resized),
                        }
                    )
                    written += 1
            fh.flush()
            os.fsync(fh.fileno())
        digest, size = sha256_file(tmp), tmp.stat().st_size
        exit_if_orphaned(tmp)  # a worker whose command died holds no lock: it must not publish
        if storage.is_remote(path):
            storage.put_local(tmp, path)
        else:
            os.replace(tmp, path)
    except OSError as exc:  # a full disk while writing the tar: its errors name no file
        raise WriteFailed(f"{path}: cannot write ({os_error_text(exc)})") from None
    finally:
        reader.close()
        tmp.unlink(missing_ok=True)
    side = {
        "index": task.index,
        "fingerprint": task.fingerprint,
        "path": path.name,
        "rows": len(rows),
        "samples": written,
        "sha256": digest,
        "bytes": size,
        "removed": removed,
        "images": counts.as_dict(),
    }
    write_json(side, task.sidecar_path)
    return side
