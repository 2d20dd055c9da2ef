"""docs/scale.md's flow as a user runs it, with real img2dataset tars: prepare -> curate -> score ->
view (the served page and --static) -> stats samples -> pack -> train -> eval, every command a
`python -m caption_debias.cli.main` process of its own.

The images are a URL set behind file:// URLs, downloaded by the img2dataset console script into
webdataset tars (tests/image_worlds.py: 13 URLs, 4 per shard, so 4 tars; one URL points at no
file). The same flow runs with every folder and the image root local, and with all of them on
an S3 server (moto on loopback). Both must lose no row to `image_missing` and keep the rows and
scores the loose-file world of the same image bytes gets. Beside the flow: a relative root typed
in one folder works from another, and a wrong root stops the run naming it.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from image_worlds import moto_s3, upload

pytest.importorskip("open_clip")
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

SCORES = ["clip_score", "sentence_scores", "sentence_grounding", "sentence_keep"]
FACTS = ["image_width", "image_height", "image_sha256", "image_phash"]
PACK = ["--samples-per-shard", "4", "--image-size", "32"]
TRAIN = ["--model", "tiny", "--batch-size", "4", "--max-steps", "3", "--lr", "1e-4", "--warmup-steps", "1"]
TRAIN += ["--precision", "fp32", "--no-tensorboard"]


# -- the worlds ----------------------------------------------------------------------------------


# -- running commands as a user does -------------------------------------------------------------


def env_for(cache: Path) -> dict[str, str]:
    """The test's environment (with moto's AWS variables while a store runs), thumbnails cached under `cache`."""
    return {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONUNBUFFERED": "1", "NO_ALBUMENTATIONS_UPDATE": "1"}


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "caption_debias.cli.main", *args]
    return subprocess.run(cmd, cwd=cwd, env=env_for(cwd / ".cache"), capture_output=True, text=True, timeout=900)


def ok(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    done = cli(cwd, *args)
    assert done.returncode == 0, f"caption-debias {' '.join(args)} (exit {done.returncode}):\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def refused(cwd: Path, *args: str) -> str:
    """The one line a refused command prints (exit non-zero, no traceback)."""
    done = cli(cwd, *args)
    assert done.returncode != 0, f"caption-debias {' '.join(args)} finished:\n{done.stdout[-2000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stderr


# -- reading what the commands wrote, local or on the store ---------------------------------------


class Place:
    """Where a flow's folders live: `url(name)` is what the commands are given; `local(name)` is a
    local copy to read (the folder itself, or its objects fetched from the store)."""

    def __init__(self, work: Path, fs=None, bucket: str | None = None):
        self.work, self.fs, self.bucket = work, fs, bucket

    def url(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}" if self.fs else str(self.work / name)

    def local(self, name: str) -> Path:
        if not self.fs:
            return self.work / name
        copy = self.work / "fetched" / name
        self.fs.invalidate_cache()
        for obj in self.fs.find(f"{self.bucket}/{name}"):
            path = copy / obj[len(f"{self.bucket}/{name}/") :]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.fs.cat_file(obj))
        return copy


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text("utf-8"))


def removed(folder: Path) -> list[dict]:
    path = folder / "removed.jsonl"
    return [json.loads(x) for x in path.read_text("utf-8").splitlines()] if path.exists() else []


def rows_by_picture(folder: Path, columns: list[str]) -> dict[str, dict]:
    """Rows by the picture's own key: img2dataset's rows carry it as meta.caption_key, the loose
    world's rows are those keys prepared again (`table/` in front)."""
    table = pq.read_table(folder / "shards")
    out = {}
    for row in table.select(["key", "meta", *columns]).to_pylist():
        meta = json.loads(row.pop("meta") or "{}")
        key = row.pop("key")
        out[meta.get("caption_key") or key.removeprefix("table/")] = row
    return out


def assert_images_all_found(folder: Path, n: int) -> None:
    """A stage's output: every row's image opened (manifest's images entry), none removed as missing."""
    images = manifest(folder)["images"]
    assert images["opened"] is True and images["checked"] == n and images["missing"] == 0, images
    assert [r["key"] for r in removed(folder) if r["reason"] in ("image_missing", "image_unreadable")] == []


def is_picture(data: bytes) -> tuple[int, int]:
    """The size of a real decoded picture (a placeholder tile is SVG and fails here)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        im.load()
        assert im.format == "JPEG"
        return im.size


# -- the flow -------------------------------------------------------------------------------------


def the_flow(place: Place, images: str, prepare_quiet: bool = True) -> dict[str, Path]:
    """prepare -> curate -> score -> curate -> pack; view and stats of the final folder. Only the
    first curate is told the image root: every later stage takes the carried one."""
    work, url = place.work, place.url
    quiet = ["-q"] if prepare_quiet else []  # off a terminal without -q: progress lines, not a traceback
    ok(work, "prepare", images, "--format", "img2dataset", "--out", url("prepared"), *quiet)
    ok(work, "curate", url("prepared"), "--image-root", images, "--out", url("curated"), "-q")
    ok(work, "score", url("curated"), "--out", url("scored"), "--model", "demo-start", "-q")
    ok(work, "curate", url("scored"), "--out", url("final"), "--drop-ungrounded", "0.0", "-q")
    served_thumbnails(work, url("final"))
    static_thumbnails(work, url("final"))
    stats_samples(work, url("final"))
    packed = ok(work, "pack", url("final"), "--out", url("packed"), *PACK)
    out = {name: place.local(name) for name in ("prepared", "curated", "scored", "final", "packed")}
    out["pack_said"] = packed.stdout + packed.stderr
    return out


def train_and_eval(place: Place, train_on: str) -> None:
    """train a few steps of `tiny` on `train_on` (the packed folder; on a store the final one, as packed
    folders are local-only for train, docs/storage.md), then eval the run on the final folder: neither
    is told the image root. Every step found its images; eval wrote its recalls."""
    work = place.work
    ok(work, "train", place.url(train_on), "--out", str(work / "run"), *TRAIN, "-q")
    steps = [json.loads(x) for x in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [s for s in steps if "step" in s]
    assert steps[-1]["step"] == 3 and all(s.get("skipped_images", 0) == 0 for s in steps)
    ok(work, "eval", str(work / "run"), "--data", place.url("final"), "--out", str(work / "eval.json"), "-q")
    assert json.loads((work / "eval.json").read_text())


def served_thumbnails(work: Path, folder: str) -> None:
    """`view FOLDER --port 0`, the real server in a process of its own: every row's thumbnail a JPEG."""
    cmd = [sys.executable, "-m", "caption_debias.cli.main", "view", folder, "--port", "0"]
    env = env_for(work / ".cache")
    with subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        try:
            said = []
            for line in proc.stdout:  # the folder lines, then the address
                said.append(line)
                if "caption-debias view: http" in line:
                    break
            address = re.search(r"http://[\d.]+:\d+/", "".join(said))
            assert address, "".join(said)[-3000:]
            page = json.loads(urllib.request.urlopen(address.group(0) + "api/page?limit=200", timeout=60).read())
            assert page["total"] == len(page["rows"]) > 0
            for row in page["rows"]:
                f, s, r = row["id"].split(":")
                with urllib.request.urlopen(f"{address.group(0)}api/thumb?f={f}&s={s}&r={r}", timeout=60) as got:
                    assert got.headers.get("X-Thumb") is None, (row["image"], got.headers.get("X-Thumb"))
                    assert got.headers["Content-Type"] == "image/jpeg"
                    assert min(is_picture(got.read())) > 8
        finally:
            proc.send_signal(signal.SIGINT)  # Ctrl-C, as a user stops it
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def static_thumbnails(work: Path, folder: str) -> None:
    """`view --static`: every sampled row's thumbnail embedded as a JPEG, no "image not found" tile."""
    html = work / "view" / "index.html"
    ok(work, "view", folder, "--static", str(html), "-q")
    page = html.read_text("utf-8")
    jpegs = re.findall(r"data:image/jpeg;base64,([A-Za-z0-9+/=]+)", page)
    assert len(jpegs) >= 8 and "data:image/svg+xml" not in page
    for data in jpegs:
        is_picture(base64.b64decode(data))


def stats_samples(work: Path, folder: str) -> None:
    """`stats FOLDER --out DIR`: the report's Samples section shows the rows' pictures."""
    ok(work, "stats", folder, "--out", str(work / "stats"), "-q")
    page = (work / "stats" / "report.html").read_text("utf-8")
    assert "<h2>Samples</h2>" in page, "the report has no Samples section"
    section = page[page.index("<h2>Samples</h2>") :]
    assert section.count('src="data:image/jpeg;base64,') >= 3 and "data:image/svg+xml" not in section
    assert "no --image-root" not in section and "image not found" not in section


def loose_flow(work: Path, loose) -> dict[str, Path]:
    """The loose-file world of the same bytes through prepare -> curate -> score -> curate."""
    table = loose.root.parent / "loose.jsonl"
    ok(work, "prepare", str(table), "--format", "table", "--image-root", str(loose.root), "--out", "prepared", "-q")
    ok(work, "curate", "prepared", "--out", "curated", "-q")
    ok(work, "score", "curated", "--out", "scored", "--model", "demo-start", "-q")
    ok(work, "curate", "scored", "--out", "final", "--drop-ungrounded", "0.0", "-q")
    return {name: work / name for name in ("prepared", "curated", "scored", "final")}


@pytest.fixture(scope="module")
def loose_out(tmp_path_factory, loose):
    return loose_flow(tmp_path_factory.mktemp("loose-flow"), loose)


def assert_same_as_loose(got: dict[str, Path], want: dict[str, Path], n_images: int, root: str) -> None:
    for stage in ("curated", "scored", "final"):
        assert_images_all_found(got[stage], n_images)
        assert manifest(got[stage])["images"]["root"] == root  # the root as resolved, carried
    assert manifest(got["final"])["options"]["image_root"] == root
    a, b = rows_by_picture(got["scored"], FACTS + SCORES), rows_by_picture(want["scored"], FACTS + SCORES)
    assert sorted(a) == sorted(b) and len(a) == n_images
    for key in a:
        assert {c: a[key][c] for c in FACTS} == {c: b[key][c] for c in FACTS}, key
        assert a[key]["clip_score"] == pytest.approx(b[key]["clip_score"], abs=1e-5), key
        assert a[key]["sentence_keep"] == b[key]["sentence_keep"], key
        for column in ("sentence_scores", "sentence_grounding"):
            assert a[key][column] == pytest.approx(b[key][column], abs=1e-5), (key, column)
    assert sorted(rows_by_picture(got["final"], [])) == sorted(rows_by_picture(want["final"], []))
    assert [r["reason"] for r in removed(got["final"])] == [r["reason"] for r in removed(want["final"])]


def assert_packed(packed: Path, final: Path) -> None:
    tars = sorted(packed.glob("*.tar"))
    assert len(tars) >= 2
    assert manifest(packed)["counts"]["written"] == manifest(final)["counts"]["written"]


def test_the_flow_with_img2dataset_tars_locally(wds, loose_out, tmp_path):
    assert len(list(wds.root.glob("*.tar"))) >= 3  # several tars, rows in each
    out = the_flow(Place(tmp_path), str(wds.root))
    assert manifest(out["prepared"])["counts"]["written"] == len(wds.refs)  # one URL never downloaded
    assert_same_as_loose(out, loose_out, len(wds.refs), str(wds.root.resolve()))
    assert_packed(out["packed"], out["final"])
    train_and_eval(Place(tmp_path), "packed")


def test_the_flow_with_the_root_and_the_folders_on_s3(wds, loose_out, tmp_path):
    with moto_s3() as (server, fs, bucket):
        images = upload(fs, wds.root, f"s3://{bucket}/images")
        place = Place(tmp_path, fs, bucket)
        out = the_flow(place, images, prepare_quiet=False)
        assert_same_as_loose(out, loose_out, len(wds.refs), images)
        assert_packed(out["packed"], out["final"])
        assert "open_clip_train:" in out["pack_said"], out["pack_said"]
        flags = shlex.split(out["pack_said"].split("open_clip_train:")[-1].splitlines()[0])
        train_data = flags[flags.index("--train-data") + 1]
        assert not train_data.startswith("s3://"), train_data  # webdataset has no s3:// handler: a pipe: form
        tars = {p for p, _ in server.gets(".tar") if p.startswith(f"/{bucket}/images/")}
        assert len(tars) == len(list(wds.root.glob("*.tar")))  # the images came from the store's tars
        # a wrong root on the store stops the run, naming it
        line = refused(
            tmp_path, "curate", place.url("prepared"), "--image-root", f"s3://{bucket}/nope", "--out", place.url("x")
        )
        assert f"s3://{bucket}/nope" in line
        train_and_eval(place, "final")


# -- roots: typed relative in one folder, used from another; wrong ones ---------------------------


def test_a_relative_root_typed_in_one_folder_works_from_another(wds, tmp_path):
    here, there = wds.root.parent, tmp_path / "elsewhere"
    there.mkdir()
    relative = os.path.relpath(wds.root, here)
    assert not Path(relative).is_absolute()
    # prepare records the root typed relative, resolved; curate run from elsewhere finds every image
    ok(
        here,
        "prepare",
        relative,
        "--format",
        "img2dataset",
        "--image-root",
        relative,
        "--out",
        str(tmp_path / "p"),
        "-q",
    )
    assert manifest(tmp_path / "p")["options"]["image_root"] == str(wds.root.resolve())
    ok(there, "curate", str(tmp_path / "p"), "--out", "c", "-q")
    assert_images_all_found(there / "c", len(wds.refs))
    # curate told a relative root in one folder; pack run from another needs none
    ok(here, "curate", str(tmp_path / "p"), "--image-root", relative, "--out", str(tmp_path / "c2"), "-q")
    ok(there, "pack", str(tmp_path / "c2"), "--out", "packed", *PACK, "-q")
    assert manifest(there / "packed")["counts"]["written"] == len(wds.refs)


def test_a_wrong_root_stops_the_run_naming_it(wds, loose, tmp_path):
    ok(tmp_path, "prepare", str(wds.root), "--format", "img2dataset", "--out", "p", "-q")
    # no such folder
    line = refused(tmp_path, "curate", "p", "--image-root", str(tmp_path / "nope"), "--out", "c")
    assert str(tmp_path / "nope") in line
    # a folder, but not the one holding these tars: more than --max-missing-images are missing
    for stage in (["curate"], ["score", "--model", "demo-start"], ["pack", *PACK]):
        line = refused(tmp_path, stage[0], "p", "--image-root", str(loose.root), "--out", f"x-{stage[0]}", *stage[1:])
        assert str(loose.root.resolve()) in line and "00000.tar" in line, (stage[0], line)
        assert not (tmp_path / f"x-{stage[0]}" / "manifest.json").exists()
