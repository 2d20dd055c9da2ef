"""`make test` on a fresh clone, venv build included (issue 30's measure), and the venv build by uv
(what the Makefile does) against pip (the baseline: `pip install -c constraints.txt -e ".[all,test]"`).

Each build starts from a fresh clone and an empty installer cache (uv's in a temporary folder; pip's with
--no-cache-dir), so nothing is reused from an earlier run. Prints one JSON object.

    .venv/bin/python benchmarks/bench_fresh_clone.py --work /tmp/fresh            # both builds + make test
    .venv/bin/python benchmarks/bench_fresh_clone.py --work /tmp/fresh --install-only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed in {cwd}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return round(time.monotonic() - start, 1)


def fresh_clone(work: Path, name: str) -> Path:
    repo = work / name
    shutil.rmtree(repo, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    return repo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True, help="a folder for the clones (about 8 GB each)")
    ap.add_argument("--install-only", action="store_true", help="time the two venv builds, not make test")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "UV_CACHE_DIR": str(args.work / "uv-cache")}
    shutil.rmtree(env["UV_CACHE_DIR"], ignore_errors=True)
    result: dict[str, object] = {}

    repo = fresh_clone(args.work, "uv")
    if args.install_only:
        result["uv_install_s"] = timed(["make", "install"], repo, env)
    else:
        result["make_test_s"] = timed(["make", "test"], repo, env)  # venv build included
    shutil.rmtree(repo)

    repo = fresh_clone(args.work, "pip")
    steps = [
        ["python3", "-m", "venv", ".venv"],  # as the Makefile
        [".venv/bin/python", "-m", "pip", "install", "-q", "--no-cache-dir", "--upgrade", "pip"],
        [
            ".venv/bin/python",
            "-m",
            "pip",
            "install",
            "-q",
            "--no-cache-dir",
            "-c",
            "constraints.txt",
            "-e",
            ".[all,test]",
        ],
    ]
    result["pip_install_s"] = round(sum(timed(step, repo, env) for step in steps), 1)
    shutil.rmtree(repo)
    if "uv_install_s" in result:
        result["pip_over_uv"] = round(result["pip_install_s"] / result["uv_install_s"], 2)  # type: ignore[operator]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
