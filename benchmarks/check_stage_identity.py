"""Are the output bytes of prepare, curate, score and pack unchanged? sha256 of every file they write.

Builds the test suite's curate world (tests/curate_fixtures.py: images with every fault
planted, an eval set) and pack world (tests/test_pack.py), runs prepare, curate (with
--image-root and --decontaminate), score (the shipped demo-start model, as an open_clip
local-dir: folder) and pack on them, and prints one digest per output file
(JSON files without the keys that record a time or digest an input's timestamped manifest). With --against REV it also runs the
same worlds through the code at git revision REV and reports every file that differs.

    .venv/bin/python benchmarks/check_stage_identity.py
    .venv/bin/python benchmarks/check_stage_identity.py --against main
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, code_at

RUN = """
import hashlib, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from curate_fixtures import make_world
from test_pack import _options, make_world as make_pack_world
from caption_debias.curate.options import CurateOptions
from caption_debias.curate.run import curate
from caption_debias.pack.run import pack
from caption_debias.score.options import ScoreOptions
from caption_debias.score.run import score_folder

# A manifest records when it was made, so digests of an input's manifest (and fingerprints
# built on them) differ between any two runs: those keys are left out of the comparison.
TIMED = {"created", "elapsed_s", "manifest_sha256", "input_manifests", "input_manifest_sha256", "fingerprint"}

def timeless(value):
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in TIMED}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value

root = Path(sys.argv[1])
world = make_world(root / "cw")
curate([world["prepared"]], root / "curated", CurateOptions(
    image_root=str(world["images"]), decontaminate=[f"urban1k={world['eval']}"], quiet=True))
start = Path(sys.argv[3]) / "caption_debias" / "assets" / "demo-start"
score_folder([world["prepared"]], root / "scored", ScoreOptions(
    model=f"local-dir:{start}", image_root=str(world["images"]), quiet=True))
prepared, images = make_pack_world(root / "pw")
pack(prepared, root / "packed", _options(images))
digests = {}
for folder in ("cw/prepared", "curated", "scored", "pw/prepared", "packed"):
    for path in sorted((root / folder).rglob("*")):
        rel = path.relative_to(root / folder).as_posix()
        if not path.is_file() or rel.startswith(".caption-debias.lock"):
            continue
        data = path.read_bytes()
        if path.suffix == ".json":
            data = json.dumps(timeless(json.loads(data)), sort_keys=True).encode()
        digests[f"{folder}/{rel}"] = hashlib.sha256(data).hexdigest()
print(json.dumps(digests))
"""


def run_stages(code_root: Path, work: Path) -> dict[str, str]:
    """Digests of one run in `work` (emptied first: both runs use the same absolute paths, which outputs record)."""
    if work.exists():
        shutil.rmtree(work)
    env = dict(os.environ, PYTHONPATH=str(code_root))
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(work), str(ROOT / "tests"), str(ROOT)],
        env=env,
        cwd=code_root,  # `python -c` puts the working folder first on sys.path: it must hold the code to run
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"the run at {code_root} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", metavar="REV", help="also run the code at this git revision and compare")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        now = run_stages(ROOT, tmp / "work")
        print(f"{len(now)} files")
        if not args.against:
            for name, digest in now.items():
                print(f"  {digest[:16]}  {name}")
            return
        old = run_stages(code_at(args.against, tmp / "rev"), tmp / "work")
        differ = [n for n in sorted(set(now) | set(old)) if now.get(n) != old.get(n)]
        for name in differ:
            print(f"  DIFFERS  {name}  now {str(now.get(name))[:16]}  {args.against} {str(old.get(name))[:16]}")
        print(f"  {len(now) - len([n for n in differ if n in now])} of {len(now)} identical to {args.against}")
        print("identical" if not differ else f"{len(differ)} files differ")
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
