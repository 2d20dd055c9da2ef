"""Output folder layout and resume state (the stage runner's): one small sidecar per finished shard.

OUT/manifest.json and OUT/rejects.jsonl are written last; OUT/shards/part-NNNNN.parquet are
the shards; OUT/.prepare/state.json holds the options that shape the output and
OUT/.prepare/part-NNNNN.json each finished chunk's rows, sha256, rejects and counts.
"""

from __future__ import annotations

from pathlib import Path

from caption_debias.dataset import MANIFEST, REJECTS, STATE_DIR
from caption_debias.runner import SHARDS_DIR, StageFolder, part_name


def sidecar_name(index: int) -> str:
    return part_name(STATE_DIR, index)


def stage_folder(out: Path) -> StageFolder:
    """OUT as the stage runner sees it: what prepare owns there, its state folder."""
    return StageFolder(
        out,
        "prepare",
        state_dir=STATE_DIR,
        owned=(MANIFEST, REJECTS, SHARDS_DIR),
        subdirs=(SHARDS_DIR,),
        work=(f"{SHARDS_DIR}/part-*.parquet",),  # a run whose every chunk was rejected holds nothing to keep
        verb="prepared",
    )
