"""The CLI in a fresh process with its peak memory, and image files edited into faults (fault tests)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest


def cli(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """The CLI in a subprocess that reports its peak memory (KiB) on the last stderr line.

    The peak is the process's own anonymous memory at its high-water mark: VmHWM less the file
    pages still mapped at the end (shared libraries, whose resident share depends on the page
    cache: a fresh install maps torch's hot). ru_maxrss would carry over the RSS of the pytest
    process that spawned it (Linux keeps the high-water mark across exec).
    """
    wrapper = (
        "import re, runpy, sys\n"
        "sys.argv = ['caption-debias', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('caption_debias.cli.main', run_name='__main__')\n"
        "finally:\n"
        "    status = open('/proc/self/status').read()\n"
        "    kib = {k: int(re.search(k + r':\\s+(\\d+)', status).group(1)) for k in ('VmHWM', 'RssFile', 'RssShmem')}\n"
        "    print(f\"PEAK_KIB {kib['VmHWM'] - kib['RssFile'] - kib['RssShmem']}\", file=sys.stderr)\n"
    )
    try:
        return subprocess.run([sys.executable, "-c", wrapper, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"caption-debias {args[0]} did not finish in {timeout} s (blocked on a special file?)")


def peak_kib(proc: subprocess.CompletedProcess) -> int:
    return int(proc.stderr.strip().splitlines()[-1].split()[1])


def edit_images(folder: Path, images: dict[int, str]) -> None:
    """Set the `image` of rows (by position) in a prepared folder's one shard, as a hand edit would,
    keeping the manifest's shard entry (digest, size) true to the edited file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text("utf-8"))
    (entry,) = manifest["shards"]
    shard = folder / entry["path"]
    table = pq.read_table(shard)
    column = table.column("image").to_pylist()
    for i, image in images.items():
        column[i] = image
    at = table.schema.get_field_index("image")
    pq.write_table(table.set_column(at, table.schema.field(at), pa.array(column, pa.string())), shard)
    data = shard.read_bytes()
    for name, value in (("sha256", hashlib.sha256(data).hexdigest()), ("bytes", len(data))):
        if name in entry:
            entry[name] = value
    manifest_path.write_text(json.dumps(manifest), "utf-8")
