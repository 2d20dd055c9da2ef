"""A folder's lineage, read from the manifests: each pass that made it (prepare -> curate -> score ->
curate ...) and the image root they record.

A curated or scored folder's manifest names its input folders as they were given (`inputs[].path`,
relative to where the command ran) with the sha256 of each input's manifest. An input is followed
where it is found, tried as given, under the current folder, then under each folder above the one
that names it, and only when its manifest is still the one recorded; otherwise the walk stops there
and says why. Nothing here opens a shard: only the manifests are read.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator, Mapping

from caption_debias import storage

MANIFEST = "manifest.json"
MAX_DEPTH = 32  # a lineage deeper than this is cut (a loop of folders naming each other)
PACKED_KIND = "caption-debias packed"


def stage_of(manifest: Mapping[str, Any]) -> str:
    """Which command wrote a folder: prepare, curate, score or pack."""
    if manifest.get("kind") == PACKED_KIND:
        return "pack"
    if isinstance(manifest.get("curation"), dict):
        return "curate"
    if isinstance(manifest.get("scoring"), dict):
        return "score"
    return "prepare"


def read_manifest(folder: Any) -> tuple[dict[str, Any], bytes] | None:
    """(manifest, its bytes) of a folder, None when there is no readable one."""
    try:
        raw = (storage.as_path(folder) / MANIFEST).read_bytes()
        manifest = json.loads(raw)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return (manifest, raw) if isinstance(manifest, dict) else None


def candidates(recorded: str, named_by: Any) -> Iterator[Any]:
    """Where a path a manifest recorded may be now: as given, under the current folder, then under
    each folder above `named_by` (the folder whose manifest recorded it), nearest first."""
    if storage.is_url(recorded):
        yield storage.as_path(recorded)
        return
    path = Path(recorded)
    if path.is_absolute():
        yield path
        return
    yield Path.cwd() / path
    if not storage.is_url(str(named_by)):
        for above in Path(named_by).resolve().parents:
            yield above / path


def find_input(entry: dict[str, Any], named_by: Any) -> tuple[Any | None, dict[str, Any], str]:
    """(the input folder an `inputs[]` entry names, or None; its manifest as read there; why not)."""
    recorded = entry.get("path")
    if not isinstance(recorded, str) or not recorded:
        return None, {}, "no path recorded"
    changed = False
    for place in candidates(recorded, named_by):
        found = read_manifest(place)
        if found is None:
            continue
        want = entry.get("manifest_sha256")
        if want and hashlib.sha256(found[1]).hexdigest() != want:
            changed = True
            continue
        return place, found[0], ""
    return None, {}, "changed since (its manifest is not the one recorded)" if changed else "not found"


def _pass(folder: Any, manifest: dict[str, Any], missing: list[dict[str, str]]) -> dict[str, Any]:
    stage = stage_of(manifest)
    counts = manifest.get("counts") or {}
    by_reason = counts.get("rejects_by_reason" if stage == "prepare" else "removed_by_reason") or {}
    out = {
        "stage": stage,
        "folder": shown(folder),
        "read": counts.get("read"),
        "written": counts.get("written"),
        "removed": counts.get("rejected" if stage == "prepare" else "removed"),
        "steps": {r: int(n) for r, n in by_reason.items() if n},
        "inputs": [str(e.get("path")) for e in manifest.get("inputs") or []],
    }
    if missing:
        out["not_followed"] = missing
    if stage == "curate":
        out["thresholds"] = curate_thresholds(manifest)
    if stage == "score":
        out["model"] = ((manifest.get("scoring") or {}).get("model") or {}).get("name")
    return out


def curate_thresholds(manifest: dict[str, Any]) -> dict[str, Any]:
    """The model-score thresholds a curate pass used (None where not given), and where the top-P rule cut."""
    cur = manifest.get("curation") or {}
    given = cur.get("thresholds") or {}
    semantic = given.get("semantic_duplicate")
    return {
        "min_clip_score": given.get("min_clip_score"),
        "keep_top_alignment": given.get("keep_top_alignment_percent"),
        "keep_top_alignment_cutoff": (cur.get("low_alignment") or {}).get("cutoff"),
        "drop_ungrounded": given.get("drop_ungrounded"),
        "semantic_duplicate": semantic.get("cosine_min") if isinstance(semantic, dict) else semantic,
    }


def _input_entries(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The `inputs[]` entries that name folders (a prepare pass's inputs are dumps: none)."""
    stage = stage_of(manifest)
    if stage == "pack":
        return [manifest.get("input") or {}]
    return [e for e in manifest.get("inputs") or [] if isinstance(e, dict)] if stage != "prepare" else []


def shown(folder: Any) -> str:
    """A folder's path for a report: relative to the current folder when it lies inside it."""
    text = str(folder)
    if storage.is_url(text):
        return text
    try:
        return str(Path(text).resolve().relative_to(Path.cwd()))
    except ValueError:
        return text


def passes(folder: Any) -> list[dict[str, Any]]:
    """Every pass of a folder's lineage, oldest first (each input's own lineage before the pass that
    read it), the folder's own pass last; [] when the folder has no readable manifest."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()

    def visit(place: Any, manifest: dict[str, Any], depth: int) -> None:
        key = str(storage.as_path(place).resolve()) if not storage.is_url(str(place)) else str(place)
        if key in seen or depth > MAX_DEPTH:
            return
        seen.add(key)
        missing: list[dict[str, str]] = []
        scored_by = None
        for entry in _input_entries(manifest):
            found, inner, why = find_input(entry, place)
            if found is None:
                missing.append({"path": str(entry.get("path")), "why": why})
                continue
            if manifest.get("scored_from") and stage_of(inner) == "score":
                # curate --score-model: its scoring is part of this pass (and its removals are counted here)
                scored_by = ((inner.get("scoring") or {}).get("model") or {}).get("name")
                for entry_of_scored in _input_entries(inner):
                    got, got_manifest, why = find_input(entry_of_scored, found)
                    if got is None:
                        missing.append({"path": str(entry_of_scored.get("path")), "why": why})
                    else:
                        visit(got, got_manifest, depth + 1)
                continue
            visit(found, inner, depth + 1)
        step = _pass(place, manifest, missing)
        if scored_by:
            step["model"] = scored_by
        out.append(step)

    found = read_manifest(folder)
    if found is not None:
        visit(folder, found[0], 0)
    return out


def _local_dir(recorded: Any, named_by: Any) -> Path | None:
    if not isinstance(recorded, str) or not recorded or storage.is_url(recorded):
        return None
    return next((p for p in candidates(recorded, named_by) if Path(p).is_dir()), None)


def image_root(folder: Any, manifest: Mapping[str, Any] | None = None, depth: int = 0) -> Path | None:
    """The image root of a folder: the one its manifest records (`options.image_root`; score's per
    input `inputs[].image_root`), else the one its inputs' manifests record, followed back through its
    lineage; None when no manifest records one that is a folder here."""
    if manifest is None:
        found = read_manifest(folder)
        if found is None:
            return None
        manifest = found[0]
    own = [(manifest.get("options") or {}).get("image_root")]
    own += [e.get("image_root") for e in manifest.get("inputs") or [] if isinstance(e, dict)]
    for recorded in own:
        root = _local_dir(recorded, folder)
        if root is not None:
            return root
    if depth >= MAX_DEPTH or stage_of(manifest) == "prepare":
        return None
    for entry in manifest.get("inputs") or []:
        place, _, _ = find_input(entry, folder)
        if place is not None:
            root = image_root(place, None, depth + 1)
            if root is not None:
                return root
    return None
