"""Are `prepare`'s output bytes unchanged? sha256 of every shard, rejects.jsonl and sidecar.

Builds one deterministic input set from the calibration captions (real long captions, COCO
captions joined, captions with hard spots inserted, edge cases and rows that must be
rejected), writes it as a JSON-lines table and as a ShareGPT4V JSON array, runs `prepare` on
each with small shards, and prints one digest per output file. With --against REV it also
runs the same inputs through the code at git revision REV and reports every file that differs.

    .venv/bin/python benchmarks/check_prepare_identity.py
    .venv/bin/python benchmarks/check_prepare_identity.py --against main
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, add_data_option, coco_joined, code_at, long_captions

HARD_SPOTS = [
    "Dr. Smith stands near the U.S. flag.",
    "The sign reads 3.5 km, i.e. a short walk.",
    'A label says "OPEN 24 HRS." in red letters.',
    "There are apples, pears, etc. on the table.",
    "It is (as the tag says) a No. 5 model.",
    "The clock shows 10 a.m. on Jan. 3.",
    "Wait... the dog is asleep.",
    "The car is a BMW. It is parked.",
    "Mr. and Mrs. Jones walk by St. Mary's church.",
    "The poster says 'Sale!' in bold.",
]
EDGE_CASES = [
    "",
    "   ",
    "One sentence with no final period",
    "A.",
    "word " * 1000,
    "The image shows a cat.\n\nIt sits on a mat.\nThe mat is red.",
    "Émile's café serves crème brûlée & naïve “quotes” — fancy.",
    "Line one\tTabbed words and a NUL-free text.",
    "🙂 Emoji first. Then words.",
    "ALL CAPS CAPTION. ANOTHER ONE!",
]


def build_records(data: Path) -> list[dict]:
    caps, joined = long_captions(data), coco_joined(data)[:2000]
    rng = random.Random(0)
    spotted = []
    for caption in caps[:600]:
        sentences = caption.split(". ")
        for _ in range(rng.randint(1, 3)):
            sentences.insert(rng.randrange(len(sentences) + 1), rng.choice(HARD_SPOTS))
        spotted.append(". ".join(sentences))
    records = [{"key": f"r{i}", "image": f"img/{i}.jpg", "caption": c} for i, c in enumerate(caps + joined + spotted)]
    n = len(records)
    records += [{"key": f"e{i}", "image": f"img/e{i}.jpg", "caption": c} for i, c in enumerate(EDGE_CASES)]
    records += [
        {"key": "bad0", "image": "", "caption": "No image path."},
        {"key": "bad1", "image": "/abs/path.jpg", "caption": "An absolute image path."},
        {"key": "bad2", "image": "../outside.jpg", "caption": "A path leaving the root."},
        {"key": f"r{n - 1}", "image": "img/dup.jpg", "caption": "A duplicate key."},
    ]
    return records


def write_inputs(records: list[dict], folder: Path) -> list[tuple[str, Path]]:
    table = folder / "table.jsonl"
    with table.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    share = folder / "share.json"
    elements = [
        {
            "id": r["key"],
            "image": r["image"],
            "conversations": [
                {"from": "human", "value": "<image>\nDescribe the image."},
                {"from": "gpt", "value": r["caption"]},
            ],
        }
        for r in records
    ]
    share.write_text(json.dumps(elements, ensure_ascii=False, indent=1), "utf-8")
    return [("table", table), ("sharegpt4v", share)]


RUN = """
import hashlib, json, sys
from pathlib import Path
from caption_debias.errors import UserError
from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare.run import prepare
fmt, src, out = sys.argv[1:4]
try:
    prepare([src], out, PrepareOptions(format=fmt, shard_rows=1000, quiet=True, overwrite=True))
except UserError as exc:
    print("prepare:", exc, file=sys.stderr)
digests = {}
for path in sorted(Path(out).rglob("*")):
    rel = path.relative_to(out).as_posix()
    if path.is_file() and rel != "manifest.json" and not rel.startswith(".caption-debias.lock"):
        digests[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
manifest = json.loads((Path(out) / "manifest.json").read_text())
digests["manifest.json:counts"] = hashlib.sha256(json.dumps(
    [manifest.get("inputs"), manifest.get("shards"), manifest.get("rejects_by_reason")], sort_keys=True).encode()).hexdigest()
print(json.dumps(digests))
"""


def run_prepare(code_root: Path | None, fmt: str, src: Path, out: Path) -> dict[str, str]:
    env = dict(os.environ)
    if code_root is not None:
        env["PYTHONPATH"] = str(code_root)
    done = subprocess.run(
        [sys.executable, "-c", RUN, fmt, str(src), str(out)],
        env=env,
        cwd=code_root or ROOT,  # `python -c` puts the working folder first on sys.path: it must hold the code to run
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--against", metavar="REV", help="also run the code at this git revision and compare")
    args = ap.parse_args()

    records = build_records(args.data)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        inputs = write_inputs(records, tmp)
        rev_tree = code_at(args.against, tmp / "rev") if args.against else None
        differ = 0
        for fmt, src in inputs:
            now = run_prepare(ROOT, fmt, src, tmp / f"now-{fmt}")
            print(f"{fmt}: {len(records)} records, {len(now)} files")
            if rev_tree is None:
                for name, digest in now.items():
                    print(f"  {digest[:16]}  {name}")
                continue
            old = run_prepare(rev_tree, fmt, src, tmp / f"old-{fmt}")
            for name in sorted(set(now) | set(old)):
                if now.get(name) != old.get(name):
                    differ += 1
                    print(f"  DIFFERS  {name}  now {str(now.get(name))[:16]}  {args.against} {str(old.get(name))[:16]}")
            print(f"  {sum(now.get(k) == old.get(k) for k in now)} of {len(now)} identical to {args.against}")
        if args.against:
            print("identical" if not differ else f"{differ} files differ")
            sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
