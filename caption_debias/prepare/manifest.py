"""Build OUT/manifest.json from the per-input counts and the finished shards."""

from __future__ import annotations

from collections import Counter
from typing import Any

from caption_debias.runner import manifest_stamp, reconcile
from caption_debias.schema import SCHEMA_VERSION


def build(
    *,
    inputs: list[dict[str, Any]],
    shards: list[dict[str, Any]],
    rejects_by_reason: Counter,
    options: dict[str, Any],
    tokenizer: dict,
    segmenter: dict,
    summary: dict,
    elapsed_s: float,
    limit: int | None = None,
) -> dict[str, Any]:
    read = sum(i["read"] for i in inputs)
    written = sum(i["written"] for i in inputs)
    rejected = sum(i["rejected"] for i in inputs)
    for i in inputs:
        reconcile(f"prepare {i['path']}", read=i["read"], written=i["written"], rejected=i["rejected"])
    reconcile("prepare", read=read, written=written, rejected=rejected)
    return {
        "schema_version": SCHEMA_VERSION,
        "complete": all(i["complete"] for i in inputs),
        **({"limit": limit} if limit is not None else {}),  # --limit: only the first N records were read
        "counts": {
            "read": read,
            "written": written,
            "rejected": rejected,
            "duplicate_keys": sum(i.get("duplicate_keys", 0) for i in inputs),
            "rejects_by_reason": dict(sorted(rejects_by_reason.items(), key=lambda kv: (-kv[1], kv[0]))),
        },
        "inputs": inputs,
        "shards": shards,
        "options": options,
        "tokenizer": tokenizer,
        "segmenter": segmenter,
        "summary": summary,
        **manifest_stamp(elapsed_s),
    }
