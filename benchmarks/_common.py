"""What the benchmark scripts share: the data folder, the real long captions, peak memory,
and the library as of another git revision.

Scripts import it as `_common` (their own folder is first on sys.path when run as
`.venv/bin/python benchmarks/NAME.py`); importing it also makes the tests' fixture modules
(tests/folder_factory.py, train_fixtures.py, ...) importable, so a benchmark builds its inputs
with the same factories as the tests. The code they time is whatever `caption_debias`
resolves to: this checkout when installed editable, or another one put first with
PYTHONPATH (how to time an older revision with the same script).
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import subprocess
import sys
import tarfile
from collections import defaultdict
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # a checkout that is not installed; PYTHONPATH and installs come first
if str(ROOT / "tests") not in sys.path:
    sys.path.append(str(ROOT / "tests"))  # the tests' factories (folder_factory, train_fixtures, ...) build inputs
# The calibration data (docs/benchmarks.md says what it holds).
DATA = Path(os.environ.get("CAPTION_DEBIAS_DATA", "/work/shared/data"))
# The long-caption files and fields: ImageInWords IIW-400 (human `IIW`, model `IIW-P5B`) and CM-3600 (`IIW-P5B`).
LONG_CAPTION_FILES = (("iiw400.jsonl", ("IIW", "IIW-P5B")), ("iiw_cm3600.jsonl", ("IIW-P5B",)))


def add_data_option(parser) -> None:
    parser.add_argument(
        "--data", type=Path, default=DATA, help="calibration data folder (default: $CAPTION_DEBIAS_DATA or %(default)s)"
    )


def _long_captions(data: Path):
    """(file, field, caption) in file order, each row's fields in the order above; empty or
    whitespace-only captions are skipped."""
    for name, fields in LONG_CAPTION_FILES:
        with open(data / name, encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                for field in fields:
                    caption = row.get(field)
                    if isinstance(caption, str) and caption.strip():
                        yield name, field, caption


def long_captions(data: Path = DATA) -> list[str]:
    """All real long captions (1,500)."""
    return [caption for _, _, caption in _long_captions(data)]


def long_caption_sets(data: Path = DATA) -> dict[str, list[str]]:
    """The real long captions by "file:field"."""
    sets: dict[str, list[str]] = defaultdict(list)
    for name, field, caption in _long_captions(data):
        sets[f"{name}:{field}"].append(caption)
    return dict(sets)


def coco_joined(data: Path = DATA) -> list[str]:
    """COCO val2017: each image's captions, stripped and joined by a space, images by id."""
    coco = json.loads((data / "coco_captions_val2017.json").read_text("utf-8"))
    by_image: dict[int, list[str]] = defaultdict(list)
    for ann in coco["annotations"]:
        by_image[ann["image_id"]].append(ann["caption"].strip())
    return [" ".join(c) for _, c in sorted(by_image.items())]


def peak_rss_mib() -> float:
    """This process's peak resident memory. VmHWM, not ru_maxrss: Linux carries ru_maxrss over
    from the parent across fork and exec, so a small child of a big parent reports the parent's."""
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):  # not Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def code_at(rev: str, dest: Path, *paths: str) -> Path:
    """The library at git revision `rev` (or only `paths` of it) in `dest`, laid out as it
    installs: cli/ and schemas/ inside caption_debias/. Run it with PYTHONPATH=dest."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / ".rev.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), rev, *paths], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()
    for inner in ("cli", "schemas"):
        if (dest / inner).is_dir() and (dest / "caption_debias").is_dir():
            target = dest / "caption_debias" / inner
            if not target.exists():
                (dest / inner).rename(target)
    return dest


def import_at(rev: str, module: str, dest: Path) -> ModuleType:
    """`module` (e.g. "caption_debias.text.segment") as of git revision `rev`, imported beside
    this checkout's: the revision's package fills sys.modules while it is imported, then this
    checkout's comes back. Its functions keep their own module globals; an import made inside
    a function at call time would find this checkout's modules."""
    tree = code_at(rev, dest)
    ours = {k: sys.modules.pop(k) for k in list(sys.modules) if k.split(".")[0] == "caption_debias"}
    sys.path.insert(0, str(tree))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(tree))
        for k in [k for k in sys.modules if k.split(".")[0] == "caption_debias"]:
            del sys.modules[k]
        sys.modules.update(ours)
