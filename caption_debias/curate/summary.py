"""The end-of-run summary: the removal funnel and, with --image-root, image coverage per folder."""

from __future__ import annotations

from typing import Any


def mask_line(m: dict[str, Any]) -> str:
    """What --drop-ungrounded masked, in one line (the manifest's curation.sentence_keep)."""
    how = f"--drop-ungrounded {m['threshold']:g}" if m["threshold"] is not None else "the input's mask, kept"
    return (
        f"  sentences masked ({how}): {m['sentences_masked']:,} of {m['sentences']:,} in {m['rows_masked']:,} of "
        f"{m['rows']:,} rows (never trained on, packed or exported); {m['rows_removed']:,} rows removed as "
        "ungrounded_caption (no detail sentence left)"
    )


def print_summary(manifest: dict[str, Any], out: str, reused: Any = None) -> None:
    from rich.table import Table

    from caption_debias.runner import Summary

    c = manifest["counts"]
    notes: list[Any] = []
    if reused and (reused.get("signals") or reused.get("shards")):
        notes.append(
            f"  reused from an earlier run: {reused.get('signals', 0)} signal files, {reused.get('shards', 0)} shards"
        )
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
    table.add_column("funnel")
    table.add_column("removed", justify="right")
    table.add_column("left", justify="right")
    for step in manifest["curation"]["funnel"]:
        if step["step"] in ("read", "written"):
            table.add_row(step["step"], "", f"{step['rows']:,}")
        elif step["removed"]:
            table.add_row(f"  {step['step']}", f"{step['removed']:,}", f"{step['left']:,}")
    notes.append(table)
    coverage = manifest["curation"].get("image_coverage")
    if coverage:
        cov = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
        for col in ("image folder", "present", "missing", "unreadable", "examples"):
            cov.add_column(col, justify="left" if col in ("image folder", "examples") else "right")
        for folder, g in coverage.items():
            examples = "; ".join(p for status in ("missing", "unreadable") for p in g["examples"].get(status, []))
            cov.add_row(folder, f"{g['present']:,}", f"{g['missing']:,}", f"{g['unreadable']:,}", examples)
        notes.append(cov)
    masked = manifest["curation"].get("sentence_keep")
    if masked:
        notes.append(mask_line(masked))
    for s in manifest["curation"].get("decontaminate") or []:
        notes.append(
            f"  decontaminated against {s['name']}: {s['captions']:,} captions, "
            f"{s['images_compared']:,} of {s['images']:,} images compared"
        )
    Summary(
        "curate",
        out,
        {"read": c["read"], "written": c["written"], "removed": c["removed"]},
        outputs=len(manifest["shards"]),
        elapsed_s=manifest.get("elapsed_s") or 0.0,
        details=f"{out}/removed.jsonl" if c["removed"] else None,
        notes=notes,
    ).print()
