"""A stage's image root, by the one rule (roots.py: given > recorded > lineage), resolved once before
any work, and recorded.

curate and pack call `stage_root` (score, whose inputs keep their own roots, roots.folder_root per
input): the resolved string is what the stage's workers read under and what its manifest records
for every later stage. `record` is the manifest's `images` entry: the root, whether images were
opened at all, and their counts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence, TypeVar

from caption_debias.image_source.counts import ImageCounts
from caption_debias.image_source.roots import Root, inputs_root
from caption_debias.options import ImageRootOptions

StageOpts = TypeVar("StageOpts", bound=ImageRootOptions)  # a stage's options (image_root, quiet)


def stage_root(options: StageOpts, folders: Sequence[str | Path]) -> tuple[StageOpts, Root | None]:
    """(the stage's options with image_root resolved, the Root or None), by the one rule
    (roots.inputs_root): every input's manifest read first (a folder that is not there is its own
    line), then the root given or recorded resolved (its failure is its own line). The options are
    not checked here: the runner's skeleton (runner.stage_run) checks them once, with the root
    resolved. No root at all: the stage says no_root_line when its work starts (after every
    one-line refusal)."""
    root = inputs_root(folders, options.image_root or None)
    return dataclasses.replace(options, image_root=None if root is None else root.resolved), root


def record(root: Root | None, counts: ImageCounts | None, max_missing: float) -> dict[str, Any]:
    """The manifest's `images` entry of a stage run."""
    counts = counts or ImageCounts()
    return {
        "root": None if root is None else root.resolved,
        "opened": root is not None,
        "checked": counts.checked,
        "missing": counts.missing,
        "unreadable": counts.unreadable,
        "max_missing_images": max_missing,
    }
