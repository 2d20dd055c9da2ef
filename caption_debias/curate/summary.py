"""The end-of-run summary: the removal funnel and, with --image-root, image coverage per folder."""

from __future__ import annotations

from typing import Any


def print_summary(manifest: dict[str, Any], out: str, reused: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True, highlight=False)
    c = manifest["counts"]
    elapsed = manifest.get("elapsed_s") or 0.0
    rate = c["read"] / elapsed if elapsed > 0 else 0.0
    console.print(f"[bold]curate[/] -> {out}")
    console.print(
        f"  rows read {c['read']:,}, written {c['written']:,}, removed {c['removed']:,}; "
        f"{len(manifest['shards'])} shards, {elapsed:.1f} s, {rate:,.0f} rows/s"
    )
    if reused and (reused.get("signals") or reused.get("shards")):
        console.print(
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
    console.print(table)
    coverage = manifest["curation"].get("image_coverage")
    if coverage:
        cov = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
        for col in ("image folder", "present", "missing", "unreadable", "examples"):
            cov.add_column(col, justify="left" if col in ("image folder", "examples") else "right")
        for folder, g in coverage.items():
            examples = "; ".join(p for status in ("missing", "unreadable") for p in g["examples"].get(status, []))
            cov.add_row(folder, f"{g['present']:,}", f"{g['missing']:,}", f"{g['unreadable']:,}", examples)
        console.print(cov)
    for s in manifest["curation"].get("decontaminate") or []:
        console.print(
            f"  decontaminated against {s['name']}: {s['captions']:,} captions, "
            f"{s['images_compared']:,} of {s['images']:,} images compared"
        )
    if c["removed"]:
        console.print(f"  details: {out}/removed.jsonl")
