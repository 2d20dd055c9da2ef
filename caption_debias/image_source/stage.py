"""A stage's image root: given or recorded, resolved once, said in one line when absent, and recorded.

curate, score and pack call `stage_root` before any work: the --image-root typed (or, without
one, the root the inputs' manifests record) is resolved here once (image_source.resolve_root:
absolute, symlinks followed, a URL kept), and the resolved string is what the stage's workers
read under and what its manifest records for every later stage. A recorded root that is no
longer there is one line naming it, not a run that silently finds no image. `record` is the
manifest's `images` entry: the root, whether images were opened at all, and their counts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence, TypeVar

from caption_debias.errors import UserError
from caption_debias.image_source.counts import ImageCounts
from caption_debias.image_source.roots import Root, resolve_root
from caption_debias.options import ImageRootOptions

StageOpts = TypeVar("StageOpts", bound=ImageRootOptions)  # a stage's options (image_root, quiet, validate())


def typed_root(given: str | None, folders: Sequence[str | Path]) -> str | None:
    """The root as typed: `given`, else the one the folders' manifests record (read_manifest each
    first, so a folder that is not there is its own one line), else None."""
    from caption_debias.dataset import default_image_root, read_manifest

    for folder in folders:
        read_manifest(folder)
    return default_image_root(given or None, folders)


def stage_root(options: StageOpts, folders: Sequence[str | Path]) -> tuple[StageOpts, Root | None]:
    """(the stage's validated options with image_root resolved, the Root or None).

    A recorded root is resolved before the options are checked (its failure says it was
    recorded); a given one after (an option's own error comes first). No root at all: the
    stage says no_root_line when its work starts (after every one-line refusal)."""
    given = bool(options.image_root)
    typed = typed_root(options.image_root, folders)
    root = None if given or typed is None else resolve_recorded(typed)
    options = dataclasses.replace(options, image_root=typed if root is None else root.resolved)
    options = options.validate() or options
    if given and typed is not None:
        root = resolve_recorded(typed, given_by_user=True)
    return dataclasses.replace(options, image_root=None if root is None else root.resolved), root


def resolve_recorded(typed: str, given_by_user: bool = False, folder: str | None = None) -> Root:
    """resolve_root of a root the user typed, or of one a manifest records (its failure says so)."""
    if given_by_user:
        return resolve_root(typed)
    try:
        return resolve_root(typed, "the image root")
    except UserError as exc:
        where = f"{folder}'s manifest" if folder else "the input's manifest"
        raise UserError(f"{exc} (recorded in {where}; give --image-root)") from None


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
