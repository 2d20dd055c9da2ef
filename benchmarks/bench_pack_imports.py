"""CPU seconds of pack's img2dataset import: one worker start and a whole pack run, this checkout
against another revision (default: main), interleaved.

A pack worker builds pack/images.ImageReader, which takes img2dataset's Resizer. Importing it as
`from img2dataset.resizer import Resizer` runs the package's __init__ (its downloader: pandas,
wandb, ray, fire); this checkout imports the module with that __init__ not run. Both ways run
img2dataset's own Resizer, so the tars must be byte-identical (checked here too).

- worker start: a fresh interpreter that does what pack_tar does before its first row (the
  TarWriter import, an ImageReader) and resizes one picture;
- pack run: `caption-debias pack` of the test suite's pack world (tests/test_pack.py) with
  --workers 2, the driver and its spawned workers together.

CPU s is user + sys of the finished child processes (getrusage RUSAGE_CHILDREN), wall beside it;
the load average is printed with every row (timings on a shared box: compare within a run).

    .venv/bin/python benchmarks/bench_pack_imports.py [--against main] [--reps 3]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, code_at

WORKER = """
import io, sys
from PIL import Image
from webdataset import TarWriter
from caption_debias.pack.images import ImageReader
from caption_debias.pack.options import PackOptions
reader = ImageReader(sys.argv[1], PackOptions(image_root=sys.argv[1], image_size=32))
buf = io.BytesIO()
Image.new("RGB", (64, 48), (200, 30, 30)).save(buf, "PNG")
print(len(reader.resize_bytes(buf.getvalue(), "one.png").jpg))
"""

WORLD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from test_pack import make_world
prepared, images = make_world(Path(sys.argv[1]))
"""


def _timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(CPU s of the finished process tree, wall s) of one command; it must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:3])} failed:\n{done.stderr}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def _tars(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tar"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default="main", metavar="REV", help="the revision to compare with (default: main)")
    ap.add_argument("--reps", type=int, default=3, help="runs of each measurement and code (default: 3)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        codes = {"this": ROOT, args.against: code_at(args.against, tmp / "rev")}
        base = dict(os.environ, NO_ALBUMENTATIONS_UPDATE="1")
        subprocess.run([sys.executable, "-c", WORLD, str(tmp / "w"), str(ROOT / "tests")], env=base, check=True)
        images, prepared = tmp / "w" / "images", tmp / "w" / "prepared"
        rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
        tars: dict[str, dict[str, str]] = {}
        for rep in range(args.reps):
            for name, code in codes.items():  # interleaved: each rep runs both codes, one after the other
                env = dict(base, PYTHONPATH=str(code))
                got = _timed([sys.executable, "-c", WORKER, str(images)], env, code)
                rows.setdefault(("worker start", name), []).append(got)
                print(
                    f"rep {rep} {name:>6} worker start {got[0]:6.2f} CPU s {got[1]:6.1f} s  load {os.getloadavg()[0]:.1f}"
                )
                out = tmp / f"packed-{rep}-{name}"
                cmd = [sys.executable, "-m", "caption_debias.cli.main", "pack", str(prepared), "--out", str(out)]
                cmd += [
                    "--image-root",
                    str(images),
                    "--image-size",
                    "32",
                    "--samples-per-shard",
                    "8",
                    "--workers",
                    "2",
                    "-q",
                ]
                got = _timed(cmd, env, code)
                rows.setdefault(("pack run, --workers 2", name), []).append(got)
                print(
                    f"rep {rep} {name:>6} pack run     {got[0]:6.2f} CPU s {got[1]:6.1f} s  load {os.getloadavg()[0]:.1f}"
                )
                tars[f"{rep}-{name}"] = _tars(out)
                shutil.rmtree(out)
        print("\n| what | code | CPU s per run (median) | wall s (median) |")
        print("| --- | --- | --- | --- |")
        for (what, name), got in rows.items():
            cpu = ", ".join(f"{c:.2f}" for c, _ in got)
            print(
                f"| {what} | {name} | {cpu} ({statistics.median(c for c, _ in got):.2f}) | {statistics.median(w for _, w in got):.1f} |"
            )
        same = len({tuple(t.items()) for t in tars.values()}) == 1
        print(
            f"\ntars: {len(next(iter(tars.values())))} a run, " + ("byte-identical in every run" if same else "DIFFER")
        )
        sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
