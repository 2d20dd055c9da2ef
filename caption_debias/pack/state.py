"""Output folder layout and resume state (the stage runner's): one small sidecar per finished tar.

OUT/NNNNN.tar are the tars; OUT/sizes.json (open_clip_train's per-tar sample counts),
OUT/removed.jsonl and OUT/manifest.json are written last; OUT/.pack/state.json holds the
options (and the input's manifest digest) that shape the output, OUT/.pack/NNNNN.json
each finished tar's counts, digest and removals.
"""

from __future__ import annotations

from pathlib import Path

from caption_debias.pack.tars import STATE_DIR
from caption_debias.runner import StageFolder

KIND = "caption-debias packed"  # manifest["kind"]: tells a packed folder from a prepared one
MANIFEST = "manifest.json"
SIZES = "sizes.json"  # open_clip_train's get_dataset_size reads it beside the tars
REMOVED = "removed.jsonl"
TAR_PATTERN = r"\d{5,}\.tar"
TAR_GLOB = "[0-9][0-9][0-9][0-9][0-9]*.tar"


def stage_folder(out: Path) -> StageFolder:
    """OUT as the stage runner sees it: what pack owns there (its tars among them), its state folder."""
    return StageFolder(
        out, "pack", state_dir=STATE_DIR, owned=(MANIFEST, SIZES, REMOVED), owned_pattern=TAR_PATTERN, verb="packed"
    )
