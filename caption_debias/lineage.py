"""A folder's lineage, read from the manifests: each pass that made it (prepare -> curate -> score ->
curate ...). The image root they record is found by image_source.roots (`folder_root`), through here.

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

from caption_debias import storage, trust

MANIFEST = "manifest.json"
MAX_DEPTH = 32  # a lineage deeper than this is cut (a loop of folders naming each other)
PACKED_KIND = "caption-debias packed"


MAX_COUNT = 1 << 53  # more rows than any folder holds (and exact as a float): a larger "count" is not one
MAX_THRESHOLD = 1e6  # a score threshold (cosine, percent, grounding) beyond this is not one


class Fields:
    """A manifest's numbers as a report shows them: each a count or a finite threshold, or None
    where the manifest holds something else (a string, a list, NaN, a huge number), with one line
    per such field in `invalid` (a folder from elsewhere or hand-edited: never a traceback)."""

    def __init__(self, where: str):
        self.where = where
        self.invalid: list[str] = []

    def _bad(self, field: str, value: Any, what: str) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        self.invalid.append(f"{self.where}: manifest {field} is not {what} ({shown}): shown as not available")

    def count(self, value: Any, field: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
            if float(value).is_integer():
                return int(value)
        self._bad(field, value, "a count")
        return None

    def number(self, value: Any, field: str) -> float | None:
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= MAX_THRESHOLD:
            return float(value)  # NaN fails the comparison above
        self._bad(field, value, "a number")
        return None

    def mapping(self, value: Any, field: str) -> dict[str, Any]:
        if value is None or isinstance(value, dict):
            return value or {}
        self._bad(field, value, "a mapping")
        return {}

    def counts_by(self, value: Any, field: str) -> dict[str, int]:
        """A reason -> count mapping: the valid counts kept, each other one said."""
        out = {}
        for name, n in self.mapping(value, field).items():
            got = self.count(n, f"{field}.{name}")
            if got is not None:
                out[str(name)] = got
        return out


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
        if trust.recorded_path_problem(str(place)) is not None:
            continue  # a system or home folder is never an input a folder's files may name
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
    fields = Fields(shown(folder))
    counts = fields.mapping(manifest.get("counts"), "counts")
    by = "rejects_by_reason" if stage == "prepare" else "removed_by_reason"
    removed = "rejected" if stage == "prepare" else "removed"
    out: dict[str, Any] = {
        "stage": stage,
        "folder": shown(folder),
        "read": fields.count(counts.get("read"), "counts.read"),
        "written": fields.count(counts.get("written"), "counts.written"),
        "removed": fields.count(counts.get(removed), f"counts.{removed}"),
        "steps": {r: n for r, n in fields.counts_by(counts.get(by), f"counts.{by}").items() if n},
        "inputs": [str(e.get("path")) for e in manifest.get("inputs") or [] if isinstance(e, dict)],
    }
    if missing:
        out["not_followed"] = missing
    if stage == "curate":
        out["thresholds"] = curate_thresholds(manifest, fields)
    if stage == "score":
        model = fields.mapping(manifest.get("scoring"), "scoring").get("model")
        out["model"] = model.get("name") if isinstance(model, dict) else model
    if fields.invalid:
        out["invalid"] = fields.invalid
    return out


def curate_thresholds(manifest: dict[str, Any], fields: Fields | None = None) -> dict[str, Any]:
    """The model-score thresholds a curate pass used (None where not given or not a number, said in
    `fields`), and where the top-P rule cut."""
    fields = fields or Fields("")
    cur = fields.mapping(manifest.get("curation"), "curation")
    given = fields.mapping(cur.get("thresholds"), "curation.thresholds")
    semantic = given.get("semantic_duplicate")
    semantic = semantic.get("cosine_min") if isinstance(semantic, dict) else semantic
    cutoff = fields.mapping(cur.get("low_alignment"), "curation.low_alignment").get("cutoff")
    at = "curation.thresholds."
    return {
        "min_clip_score": fields.number(given.get("min_clip_score"), at + "min_clip_score"),
        "keep_top_alignment": fields.number(given.get("keep_top_alignment_percent"), at + "keep_top_alignment_percent"),
        "keep_top_alignment_cutoff": fields.number(cutoff, "curation.low_alignment.cutoff"),
        "drop_ungrounded": fields.number(given.get("drop_ungrounded"), at + "drop_ungrounded"),
        "semantic_duplicate": fields.number(semantic, at + "semantic_duplicate"),
    }


def input_entries(manifest: dict[str, Any]) -> list[dict[str, Any]]:
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
        for entry in input_entries(manifest):
            found, inner, why = find_input(entry, place)
            if found is None:
                missing.append({"path": str(entry.get("path")), "why": why})
                continue
            if manifest.get("scored_from") and stage_of(inner) == "score":
                # curate --score-model: its scoring is part of this pass (and its removals are counted here)
                scored_by = ((inner.get("scoring") or {}).get("model") or {}).get("name")
                for entry_of_scored in input_entries(inner):
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
