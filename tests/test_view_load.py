"""`caption-debias view` under load and change, as a real process on a loopback port: a concurrent mix
of requests answers no 500; a folder rewritten by `curate --overwrite` while it is served is read
again (one 503 line while it is not whole, never a traceback); a page of thumbnails of 100-megapixel
PNGs stays within a memory bound."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from curate_fixtures import make_world  # noqa: E402
from pictures import banded_png, picture  # noqa: E402
from view_fixtures import many_rows_folder  # noqa: E402

CLI = [sys.executable, "-c", "from caption_debias.cli.main import main; main()"]
GIB = 1 << 30


class ViewProcess:
    """`caption-debias view FOLDER --port 0 -q` as a process; its stderr is kept for the end."""

    def __init__(self, folder: Path, tmp: Path, *extra: str, limit_bytes: int | None = None):
        def cap():  # a guard for the machine, far above the bound a test asserts
            if limit_bytes:
                resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

        self.stderr = open(tmp / "view-stderr.txt", "w+")
        self.proc = subprocess.Popen(
            CLI + ["view", str(folder), "--port", "0", "-q", *extra],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env={**os.environ, "XDG_CACHE_HOME": str(tmp / "cache")},
            preexec_fn=cap,
        )
        line = self.proc.stdout.readline()
        assert line.startswith("caption-debias view: http://"), line + self.errors()
        self.url = line.split()[2]

    def get(self, path: str, timeout: float = 120) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path.lstrip("/"), timeout=timeout) as res:
                return res.status, res.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def json(self, path: str):
        status, body = self.get(path)
        assert status == 200, (path, status, body[:300])
        return json.loads(body)

    def peak_rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM")

    def errors(self) -> str:
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.stderr.close()


@pytest.fixture()
def view_process(tmp_path):
    started = []

    def start(folder, *extra, **kw):
        started.append(ViewProcess(folder, tmp_path, *extra, **kw))
        return started[-1]

    yield start
    for v in started:
        v.close()


def test_a_200_request_concurrent_mix_answers_no_500(tmp_path, view_process):
    """Sorted pages that prefetch the next while another request reads it, text searches that stop
    early (more at once than are kept), rows, thumbnails, metadata: 200 at once on 32 threads."""
    view = view_process(many_rows_folder(tmp_path))
    words = ["kite", "boat", "lamp", "bridge", "tree", "window", "market", "tower", "garden", "river"]
    paths = []
    for i in range(200):
        kind = i % 5
        if kind == 0:
            paths.append(f"api/page?sort=num_tokens&desc={i % 2}&limit=4&offset={4 * (i % 12)}")
        elif kind == 1:
            paths.append(f"api/page?q={words[i % len(words)]}&limit=1&offset={i % 3}")
        elif kind == 2:
            paths.append(f"api/row?f=0&s={i % 30}&r={i % 8}")
        elif kind == 3:
            paths.append(f"api/thumb?f=0&s={i % 30}&r={i % 8}")
        else:
            paths.append("api/meta" if i % 10 == 4 else f"api/page?offset={8 * (i % 25)}&limit=8")
    with ThreadPoolExecutor(32) as pool:
        statuses = list(pool.map(lambda p: (p, view.get(p)[0]), paths))
    failed = [(p, s) for p, s in statuses if s >= 500]
    assert failed == [], failed
    assert all(s == 200 for _, s in statuses)
    assert "Traceback" not in view.errors()


def _curate(prepared: Path, out: Path, images: Path, **options) -> None:
    """curate in this process: the served folder is another process's, which notices the rewrite."""
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate

    curate([prepared], out, CurateOptions(image_root=str(images), quiet=True, **options))


def test_a_folder_rewritten_by_curate_overwrite_while_served_is_read_again(tmp_path, view_process):
    world = make_world(tmp_path / "w")
    out = tmp_path / "served"
    _curate(world["prepared"], out, world["images"])  # without --decontaminate: the 2 eval overlaps are kept
    before = pq.read_table(out / "shards", columns=["key"]).num_rows
    view = view_process(out)
    assert view.json("api/meta")["rows"] == before == 15
    statuses: list[tuple[str, int, bytes]] = []
    stop = threading.Event()
    rounds = threading.Condition()
    done = [0]  # rounds of every path, all threads together

    def hammer():
        paths = ["api/page", "api/page?sort=num_tokens", "api/page?view=removed", "api/meta", "api/pair?f=0&removed=0"]
        paths += [f"api/row?f=0&s={s}&r={r}" for s in (0, 1) for r in range(0, 8, 3)] + ["api/thumb?f=0&s=0&r=1"]
        while not stop.is_set():
            for p in paths:
                status, body = view.get(p)
                statuses.append((p, status, body if status != 200 else b""))
            with rounds:
                done[0] += 1
                rounds.notify_all()

    def after_rounds(n: int) -> None:  # n more whole rounds, whatever the machine's speed
        with rounds:
            goal = done[0] + n
            assert rounds.wait_for(lambda: done[0] >= goal, timeout=120)

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        after_rounds(3)  # the folder served before the rewrite
        _curate(world["prepared"], out, world["images"], overwrite=True, decontaminate=[f"urban1k={world['eval']}"])
        after_rounds(6)  # ... and after it: every thread's requests on the new reading
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert len(statuses) > 30
    wrong = [(p, s, b) for p, s, b in statuses if s not in (200, 404, 503)]
    assert wrong == [], wrong[:5]
    for p, s, b in statuses:
        if s == 503:  # while the folder was not whole: one line saying so
            assert "changed on disk" in json.loads(b)["error"] and b"Traceback" not in b
        if s == 404:  # a row of the old folder the new one does not have
            assert p.startswith("api/row") and json.loads(b) == {"error": "no such row"}, (p, b)
    assert "Traceback" not in view.errors(), view.errors()[-2000:]
    # afterwards: the new folder, whole
    table = pq.read_table(out / "shards", columns=["key"])
    assert view.json("api/meta")["rows"] == table.num_rows == 13
    page = view.json("api/page?limit=100")
    assert page["total"] == 13 and [r["key"] for r in page["rows"]] == table.column("key").to_pylist()
    manifest = json.loads((out / "manifest.json").read_text())
    for s, shard in enumerate(manifest["shards"]):
        keys = pq.read_table(out / shard["path"], columns=["key"]).column("key").to_pylist()
        for r, key in enumerate(keys):
            assert view.json(f"api/row?f=0&s={s}&r={r}")["key"] == key


def _huge_pngs(images: Path) -> list[str]:
    """100-megapixel PNGs of a few hundred KB (flat, with a lighter square): RGB, RGBA and 16-bit grey."""
    square = (2000, 2000, 8000, 8000)
    pictures = (
        ("rgb.png", "RGB", (40, 90, 160), (250, 250, 120)),
        ("rgba.png", "RGBA", (200, 60, 60, 140), (250, 250, 120, 255)),
        ("grey16.png", "I;16", 20000, 50000),
    )
    for name, mode, fill, colour in pictures:
        (images / name).write_bytes(banded_png((10000, 10000), mode, fill, square, colour))
    return [name for name, *_ in pictures]


def test_the_huge_pictures_are_the_pictures_pillow_draws():
    """banded_png (pictures.py) at a small size: the pixels Pillow draws, in each mode."""
    import numpy as np
    from PIL import Image

    for mode, fill, colour in (("RGB", (40, 90, 160), (250, 250, 120)), ("RGBA", (200, 60, 60, 140), (1, 2, 3, 4))):
        for size, band in (((40, 30), (5, 4, 20, 25)), ((7, 200), (0, 0, 7, 130)), ((10, 10), (2, 0, 5, 10))):
            drawn = picture(size, fill, ("rectangle", (band[0], band[1], band[2] - 1, band[3] - 1), colour), mode=mode)
            read = Image.open(io.BytesIO(banded_png(size, mode, fill, band, colour)))
            assert read.mode == mode and np.array_equal(np.asarray(read), np.asarray(drawn))
    grey = np.full((150, 70), 20000, np.uint16)
    grey[10:140, 30:60] = 50000
    read = Image.open(io.BytesIO(banded_png((70, 150), "I;16", 20000, (30, 10, 60, 140), 50000)))
    assert read.mode == "I;16" and np.array_equal(np.asarray(read), grey)


def test_a_page_of_huge_thumbnails_stays_within_a_memory_bound(tmp_path, view_process):
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    images = tmp_path / "images"
    images.mkdir()
    names = _huge_pngs(images)
    assert max((images / n).stat().st_size for n in names) < 2 << 20
    rows = [
        {"key": f"h{i}", "image": names[0] if i % 16 else names[(i // 16) % 3], "caption": "A big picture. It is flat."}
        for i in range(48)
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepare(
        [tmp_path / "t.jsonl"], tmp_path / "huge", PrepareOptions(format="table", quiet=True, image_root=str(images))
    )
    view = view_process(tmp_path / "huge", limit_bytes=6 * GIB)
    page = view.json("api/page?limit=48")
    assert len(page["rows"]) == 48
    with ThreadPoolExecutor(48) as pool:  # every thumbnail of the page at once
        got = list(pool.map(lambda r: view.get(r["thumb"], timeout=600), page["rows"]))
    assert [s for s, _ in got] == [200] * 48
    from PIL import Image

    assert all(Image.open(io.BytesIO(body)).format == "JPEG" for _, body in got)
    peak = view.peak_rss()
    assert peak < 1.5 * GIB, f"peak RSS {peak / GIB:.2f} GiB"
    assert "Traceback" not in view.errors()
