"""OUT/manifest.json of a packed folder, and the tally of the tars' sidecars it is built from."""

from __future__ import annotations

from collections import Counter
from typing import Any

from caption_debias.dataset import PreparedDataset
from caption_debias.image_source import ImageCounts
from caption_debias.pack import state
from caption_debias.pack.images import resizer_version
from caption_debias.pack.options import PackOptions
from caption_debias.pack.tars import tar_name
from caption_debias.runner import manifest_stamp, reconcile


class PackTally:
    """What the tars' sidecars add up to, gathered in task order: rows read, removals by reason, the tars, images."""

    def __init__(self) -> None:
        self.read = 0
        self.reasons: Counter[str] = Counter()
        self.tars: list[dict[str, Any]] = []
        self.images = ImageCounts()

    def add(self, side: dict[str, Any]) -> None:
        self.read += side["rows"]
        if side.get("images"):  # a sidecar of an older run has none
            self.images = self.images.merge(ImageCounts.from_dict(side["images"]))
        for entry in side["removed"]:
            self.reasons[entry["reason"]] += 1
        self.tars.append({k: side[k] for k in ("path", "samples", "rows", "sha256", "bytes")})

    @property
    def written(self) -> int:
        return sum(t["samples"] for t in self.tars)

    @property
    def removed(self) -> int:
        return sum(self.reasons.values())

    def sizes(self) -> dict[str, int]:
        """sizes.json: open_clip_train's samples per tar."""
        return {t["path"]: t["samples"] for t in self.tars}


def train_data_pattern(n_tars: int) -> str:
    """The brace pattern open_clip_train's --train-data expands to every tar (relative to the folder)."""
    return f"{{{tar_name(0)[:-4]}..{tar_name(n_tars - 1)[:-4]}}}.tar"


def build(
    *, tally: PackTally, ds: PreparedDataset, given: str, options: PackOptions, input_digest: str, elapsed_s: float
) -> dict[str, Any]:
    """The manifest (its counts reconciled first): counts, tars, the input, the image and sample layout."""
    reconcile("pack", read=tally.read, written=tally.written, removed=tally.removed)
    reasons = tally.reasons
    return {
        "kind": state.KIND,
        "format": "webdataset",
        "complete": True,
        "counts": {
            "read": tally.read,
            "written": tally.written,
            "removed": tally.read - tally.written,
            "removed_by_reason": {r: reasons[r] for r in sorted(reasons, key=lambda r: (-reasons[r], r))},
        },
        "tars": tally.tars,
        "train_data": train_data_pattern(len(tally.tars)),
        "input": {"path": given, "manifest_sha256": input_digest, "rows": ds.rows},
        "image": {
            "format": "jpg",
            "image_size": options.image_size,
            "resize_mode": options.resize_mode,
            "encode_quality": options.encode_quality,
            "resizer": resizer_version(),
        },
        "sample": {"names": "NNNNN + row position in the tar's chunk", "members": ["jpg", "json", "txt"]},
        "options": options.to_dict(),
        # What made the token ids in KEY.json (train checks it against the model's tokenizer).
        "tokenizer": ds.manifest.get("tokenizer"),
        "segmenter": ds.manifest.get("segmenter"),
        "summary": ds.manifest.get("summary"),
        **manifest_stamp(elapsed_s),
    }
