"""Loud failure: how many of a run's images were found, and the one line that stops a run.

A stage adds every row's result (ImageSource.stream/map) to an ImageCounts (one per task,
merged in task order: `as_dict`/`from_dict` travel in sidecars); at the end `check_missing`
stops the run when more than --max-missing-images of the images it tried were not found,
naming the resolved root, one path it tried and the counts. `no_root_line` is the line of a
run given no image root at all.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from caption_debias.errors import UserError
from caption_debias.image_files import MISSING, ImageProblem
from caption_debias.image_source.roots import Root

DEFAULT_MAX_MISSING = 0.5
MAX_MISSING_FLAG = "--max-missing-images"


@dataclass
class ImageCounts:
    checked: int = 0  # rows whose image was looked for
    missing: int = 0  # image_missing: no file, member, sample or download
    unreadable: int = 0  # image_unreadable: there, but not an image this toolkit reads
    tried: str | None = None  # the first missing image, as its row names it
    why: str | None = None  # and the reason it was not found

    @property
    def found(self) -> int:
        return self.checked - self.missing

    def add(self, result: object, image: str | None = None) -> None:
        """Count one row's result (anything but an ImageProblem counts as found and readable)."""
        self.checked += 1
        if not isinstance(result, ImageProblem):
            return
        if result.reason != MISSING:
            self.unreadable += 1
            return
        self.missing += 1
        if self.tried is None:
            self.tried, self.why = image, result.detail

    def merge(self, other: ImageCounts) -> ImageCounts:
        """Both counts together; the first missing image stays this one's (merge in task order)."""
        return ImageCounts(
            self.checked + other.checked,
            self.missing + other.missing,
            self.unreadable + other.unreadable,
            self.tried if self.tried is not None else other.tried,
            self.why if self.tried is not None else other.why,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ImageCounts:
        return cls(**{k: d[k] for k in ("checked", "missing", "unreadable", "tried", "why") if k in d})


def check_max_missing(value: float, flag: str = MAX_MISSING_FLAG) -> float:
    """A share between 0 and 1 (NaN and infinities refused), or UserError."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise UserError(f"{flag} {value}: must be a number between 0 and 1")
    if not 0 <= value <= 1:
        raise UserError(f"{flag} {value}: must be between 0 and 1 (a share of the rows' images)")
    return float(value)


def missing_line(stage: str, counts: ImageCounts, root: Root, max_missing: float) -> str:
    share = counts.missing / counts.checked if counts.checked else 0.0
    tried = f"; tried {root.where(counts.tried)} ({counts.why})" if counts.tried is not None else ""
    return (
        f"{stage}: {counts.missing:,} of {counts.checked:,} images not found ({share:.1%}) under {root.named()}, "
        f"more than {MAX_MISSING_FLAG} {max_missing:g} allows{tried}"
    )


def check_missing(stage: str, counts: ImageCounts, root: Root, max_missing: float = DEFAULT_MAX_MISSING) -> None:
    """UserError (one line) when more than `max_missing` of the images looked for were not found."""
    if counts.checked and counts.missing > max_missing * counts.checked:
        raise UserError(missing_line(stage, counts, root, max_missing))


def no_root_line(stage: str) -> str:
    """The line of a run that opens no images because it was given no image root."""
    return f"{stage}: no --image-root given (and none recorded in the input's manifest): images were not opened"
