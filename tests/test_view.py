"""`caption-debias view` without a browser: pages, filters, pairs, thumbnails, the file gate over HTTP,
one-line errors, and that nothing is written to the folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from view_fixtures import curated_world, escaping_folder, mtimes, scored_copy  # noqa: E402

from caption_debias.errors import UserError  # noqa: E402
from caption_debias.folder_rows.cards import sentence_roles  # noqa: E402
from caption_debias.view.data import Query, ViewData  # noqa: E402


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("view")
    w = curated_world(root)
    w["scored"] = scored_copy(w["curated"], w["images"], root / "scored")
    return w


@pytest.fixture()
def client_for(tmp_path):
    from starlette.testclient import TestClient

    from caption_debias.folder_rows.thumbs import ThumbCache
    from caption_debias.view.app import create_app

    def make(folders, image_root=None):
        data = ViewData([str(f) for f in folders], None if image_root is None else str(image_root))
        return TestClient(create_app(data, ThumbCache(tmp_path / "thumbs")), base_url="http://127.0.0.1")

    return make


def _removed(folder):
    return [json.loads(line) for line in (folder / "removed.jsonl").read_text().splitlines()]


def test_roles_from_the_summary_mask():
    assert sentence_roles([True, False, False, True], 4) == [
        "opening summary",
        "detail",
        "detail",
        "closing summary",
    ]
    assert sentence_roles([False, True, False], 3) == ["detail", "summary", "detail"]
    assert sentence_roles([True], 1) == ["opening summary"]


def test_first_page_in_file_order_with_roles(world):
    data = ViewData([str(world["curated"])])
    page = data.page(Query(limit=5))
    table = pq.read_table(world["curated"] / "shards" / "part-00000.parquet")
    assert page["total"] == 13 and [r["key"] for r in page["rows"]] == table.column("key").to_pylist()[:5]
    for row, mask, sentences in zip(
        page["rows"], table.column("summary_mask").to_pylist(), table.column("sentences").to_pylist()
    ):
        assert [s["text"] for s in row["sentences"]] == sentences  # rebuilt from caption + sentence_spans
        flagged = [s["role"] != "detail" for s in row["sentences"]]
        assert flagged == mask and row["num_tokens"] > 0 and row["thumb"].startswith("api/thumb?")
    # the next page continues where the first stopped (across shard boundaries)
    rest = data.page(Query(offset=5, limit=100))["rows"]
    assert len(rest) == 8 and not {r["key"] for r in rest} & {r["key"] for r in page["rows"]}


def test_reason_filter_is_exactly_the_removed_rows_of_that_reason(world):
    data = ViewData([str(world["curated"])])
    by_reason = {}
    for r in _removed(world["curated"]):
        by_reason.setdefault(r["reason"], set()).add(r["key"])
    assert data.reasons() == {k: len(v) for k, v in by_reason.items()}
    for reason, keys in by_reason.items():
        page = data.page(Query(view="removed", reason=reason, limit=200))
        assert page["total"] == len(keys) and {r["key"] for r in page["rows"]} == keys
        assert all(r["reason"] == reason for r in page["rows"])
    # the removed rows' whole captions come from the input folder, not the 200-character excerpt
    near = data.page(Query(view="removed", reason="near_duplicate_caption"))["rows"][0]
    assert near["full_caption"] and len(near["caption"]) > 200 and len(near["sentences"]) > 3


def test_duplicate_pairs_with_the_row_it_matched(world):
    data = ViewData([str(world["curated"])])
    rows = data.page(Query(view="removed", reason="duplicate_image"))["rows"]
    copy = next(r for r in rows if r["key"] == "table/byte_copy")
    pair = data.pair(*[int(x) for x in copy["id"].replace("r", "").split(":")])
    assert pair["removed"]["key"] == "table/byte_copy" and pair["match"]["key"] == "table/c2"
    assert pair["similarity"] == 1.0 and pair["by"] == "image sha256"
    assert "image_sha256" in pair["match"]["columns"] and pair["match"]["image"] == "sam/c2.jpg"
    # an eval overlap matched an eval item: no row to show beside it, said so
    leak = data.page(Query(view="removed", reason="eval_overlap"))["rows"][0]
    assert data.pair(0, int(leak["id"].split("r")[1]))["match"] is None


def test_text_search_numeric_range_and_sort(world):
    data = ViewData([str(world["curated"])])
    table = pq.read_table(world["curated"] / "shards")
    word = table.column("caption")[3].as_py().split()[2].lower()
    expect = {
        k for k, c in zip(table.column("key").to_pylist(), table.column("caption").to_pylist()) if word in c.lower()
    }
    got = data.page(Query(text=word.upper(), limit=200))
    assert {r["key"] for r in got["rows"]} == expect and got["total"] == len(expect)
    # page by page with one row a page: the search reads row groups only as far as a page needs
    fresh, seen, offset = ViewData([str(world["curated"])]), [], 0
    first = fresh.page(Query(text=word, limit=1))
    assert first["total"] is None and first["searched"] < 13 and first["at_least"] >= 1
    while True:
        p = fresh.page(Query(text=word, limit=1, offset=offset))
        seen += [r["key"] for r in p["rows"]]
        offset += 1
        if p["total"] is not None and offset >= p["total"]:
            break
    assert sorted(seen) == sorted(expect) and len(seen) == len(set(seen))
    page = data.page(Query(sort="num_tokens", descending=True, limit=200))
    tokens = [r["num_tokens"] for r in page["rows"]]
    assert tokens == sorted(tokens, reverse=True) and len(tokens) == 13
    short = data.page(Query(ranges=(("num_tokens", None, 60),), limit=200))["rows"]
    assert short and all(r["num_tokens"] <= 60 for r in short)
    assert {r["key"] for r in short} == {
        k for k, n in zip(table.column("key").to_pylist(), table.column("num_tokens").to_pylist()) if n <= 60
    }
    with pytest.raises(UserError, match="no column"):
        data.page(Query(sort="nope"))


def test_scored_columns_are_shown_and_filterable(world, client_for):
    data = ViewData([str(world["scored"])])
    assert "clip_score" in data.numeric_columns
    row = data.page(Query(limit=1))["rows"][0]
    assert [s["sentence_keep"] for s in row["sentences"]][:3] == [True, False, True]
    assert all("sentence_grounding" in s and "sentence_scores" in s for s in row["sentences"])
    assert row["scalars"]["clip_score"] == pytest.approx(0.2)
    top = data.page(Query(sort="clip_score", descending=True, ranges=(("clip_score", 0.205, None),)))["rows"]
    assert top and all(r["scalars"]["clip_score"] >= 0.205 for r in top)
    assert [r["scalars"]["clip_score"] for r in top] == sorted((r["scalars"]["clip_score"] for r in top), reverse=True)
    # no image root: the thumbnail is made from image_bytes
    client = client_for([world["scored"]])
    res = client.get("/" + row["thumb"])
    assert res.status_code == 200 and res.headers["content-type"] == "image/jpeg" and res.content[:2] == b"\xff\xd8"


def test_thumbnails_are_small_jpegs_and_missing_images_a_placeholder(world, client_for, tmp_path):
    import io

    from PIL import Image

    client = client_for([world["curated"]])
    page = client.get("/api/page", params={"limit": 13}).json()
    res = client.get("/" + page["rows"][0]["thumb"])
    assert res.status_code == 200 and res.headers["content-type"] == "image/jpeg"
    assert max(Image.open(io.BytesIO(res.content)).size) <= 256
    assert list((tmp_path / "thumbs").rglob("*.jpg"))  # cached outside the folders
    missing = client.get("/api/page", params={"view": "removed", "reason": "image_missing"}).json()["rows"][0]
    res = client.get("/" + missing["thumb"])
    assert res.status_code == 200 and res.headers["content-type"] == "image/svg+xml"
    assert res.headers["x-thumb"] == "placeholder: image not found" and b"image not found" in res.content


def test_path_escapes_through_http_are_refused(tmp_path, client_for):
    w = escaping_folder(tmp_path / "esc")
    os.mkfifo(w["images"] / "fifo.jpg")
    client = client_for([w["prepared"]], w["images"])
    ok = client.get("/image/0/inside.jpg")
    assert ok.status_code == 200 and ok.content == (w["images"] / "inside.jpg").read_bytes()
    secret = w["secret"].read_bytes()
    for path in [
        "/image/0/..%2Fsecret.jpg",
        "/image/0/%2e%2e/secret.jpg",
        "/image/0/" + str(w["secret"]),
        "/image/0/link_out.jpg",
    ]:
        res = client.get(path)
        assert res.status_code in (403, 404) and secret not in res.content, path
    t0 = time.monotonic()
    res = client.get("/image/0/fifo.jpg")  # a FIFO would block a plain open(); refused at once
    assert res.status_code == 404 and "is a FIFO, not a file" in res.json()["error"] and time.monotonic() - t0 < 5
    assert client.get("/assets/..%2F..%2Fdata.py").status_code == 404
    # the same through the rows: thumbnails of paths that leave the root are placeholders
    rows = {r["key"]: r for r in client.get("/api/page", params={"limit": 10}).json()["rows"]}
    expect = {
        "table/inside": None,
        "table/climb": "escapes the image root",
        "table/absolute": "absolute image path",
        "table/symlink": "outside the image root",
        "table/gone": "image not found",
    }
    for key, why in expect.items():
        res = client.get("/" + rows[key]["thumb"])
        if why is None:
            assert res.headers["content-type"] == "image/jpeg"
        else:
            assert res.headers["x-thumb"].startswith("placeholder: ") and why in res.headers["x-thumb"], key


def test_serving_and_snapshot_write_nothing_to_the_folders(world, client_for, tmp_path):
    from caption_debias.view.static import write_static

    before = mtimes(world["curated"], world["images"], world["prepared"])
    client = client_for([world["curated"]])
    page = client.get("/api/page", params={"view": "removed"}).json()
    for row in page["rows"]:
        client.get("/" + row["thumb"])
        if row.get("match"):
            client.get("/api/pair", params={"f": 0, "removed": row["id"].split("r")[1]})
    for row in client.get("/api/page").json()["rows"]:
        client.get("/" + row["thumb"])
        client.get("/" + row["link"])
    data = ViewData([str(world["curated"])])
    out = write_static(data, tmp_path / "snap.html", sample=5, per_reason=2, seed=0, thumbs_dir=tmp_path / "t")
    assert out.is_file() and mtimes(world["curated"], world["images"], world["prepared"]) == before
    with pytest.raises(
        UserError, match="--static .* is inside the input .*: this command would write into what it reads"
    ):
        write_static(data, world["curated"] / "snap.html", sample=1, per_reason=1, seed=0)


def test_snapshot_is_seeded_and_self_contained(world, tmp_path):
    import re

    from caption_debias.view.static import write_static

    data = ViewData([str(world["curated"])])
    a = write_static(data, tmp_path / "a.html", sample=6, per_reason=1, seed=3, thumbs_dir=tmp_path / "t").read_text()
    b = write_static(data, tmp_path / "b", sample=6, per_reason=1, seed=3, thumbs_dir=tmp_path / "t").read_text()
    assert a == b and (tmp_path / "b" / "index.html").is_file()
    snap = json.loads(re.search(r'<script id="snapshot" type="application/json">(.*?)</script>', a, re.S).group(1))
    assert len(snap["kept"]) == 6 and len(snap["removed"]) == len(data.reasons())
    assert all(c["thumb"].startswith("data:image/") for c in snap["kept"] + snap["removed"])
    assert not re.search(r'(src|href)="(https?:)?//', a) and 'src="assets/' not in a


def _cli(*args, timeout=30):
    return subprocess.run(
        [sys.executable, "-c", "from caption_debias.cli.main import main; main()", "view", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_bad_input_is_one_line(world, tmp_path):
    import socket

    (tmp_path / "plain").mkdir()
    for args, words in [
        ([tmp_path / "plain"], "not a prepared folder"),
        ([tmp_path / "nothing"], "no such folder"),
        ([world["curated"], "--image-root", tmp_path / "no-images"], "--image-root"),
    ]:
        proc = _cli(*args)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
        assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        proc = _cli(world["curated"], "--port", taken.getsockname()[1], "-q")
    assert proc.returncode == 2 and "is in use" in proc.stderr and proc.stderr.strip().count("\n") == 0


def test_serves_on_loopback_by_default(world):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from caption_debias.cli.main import main; main()",
            "view",
            str(world["curated"]),
            "--port",
            "0",
            "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("caption-debias view: http://127.0.0.1:"), line
        import urllib.request

        url = line.split()[2]
        with urllib.request.urlopen(url + "api/meta", timeout=20) as res:
            assert json.load(res)["rows"] == 13
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_packed_folder_shows_the_folder_it_was_packed_from(world, tmp_path, client_for):
    pytest.importorskip("webdataset")
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack

    out = tmp_path / "packed"
    pack(world["curated"], out, PackOptions(image_root=str(world["images"]), image_size=32, quiet=True))
    data = ViewData([str(out)])
    assert data.folders[0].name == "packed (packed from curated)" and data.total_rows == 13
    assert data.folders[0].image_root == world["images"]
    client = client_for([out])
    row = client.get("/api/page").json()["rows"][0]
    assert client.get("/" + row["thumb"]).headers["content-type"] == "image/jpeg"
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["input"]["path"] = str(tmp_path / "gone")
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="a packed folder; view reads the folder it was packed from"):
        ViewData([str(out)])


def test_pages_never_import_pandas(world):
    """pyarrow's Table.take and compute kernels import pandas (a second or more): a viewer page must not."""
    code = f"""
import sys
from caption_debias.view.data import Query, ViewData
d = ViewData([{str(world["curated"])!r}])
d.page(Query()); d.page(Query(sort="num_tokens")); d.page(Query(text="the")); d.detail(0, 0, 1)
d.page(Query(view="removed", reason="duplicate_image")); d.pair(0, 4)
print("pandas" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_reasons_added_by_the_scorers_filter_and_pair_like_curate_s(world, tmp_path):
    """low_alignment, semantic_duplicate, ungrounded_caption (the scoring stage's reasons): any reason
    in removed.jsonl is a filter, any detail.match that is a kept key opens beside its match."""
    import shutil

    folder = tmp_path / "scored"
    shutil.copytree(world["scored"], folder)
    lines = [
        {
            "key": "table/sem",
            "reason": "semantic_duplicate",
            "detail": {"match": "table/c3", "by": "image embedding", "similarity": 0.97},
        },
        {"key": "table/low", "reason": "low_alignment", "detail": {"clip_score": 0.12}},
        {"key": "table/ung", "reason": "ungrounded_caption", "detail": {"grounded_sentences": 0}},
    ]
    with open(folder / "removed.jsonl", "w") as fh:
        for line in lines:
            fh.write(json.dumps({**line, "image": "sam/c0.jpg", "caption": "A caption.", "input": ""}) + "\n")
    data = ViewData([str(folder)], str(world["images"]))
    assert data.folders[0].kind == "curated" and set(data.reasons()) == {r["reason"] for r in lines}
    sem = data.page(Query(view="removed", reason="semantic_duplicate"))["rows"]
    assert [r["key"] for r in sem] == ["table/sem"] and sem[0]["similarity"] == 0.97
    pair = data.pair(0, 0)
    assert pair["match"]["key"] == "table/c3" and pair["by"] == "image embedding"
    assert pair["match"]["sentences"][1]["sentence_keep"] is False  # the match's scorer columns come along
    low = data.page(Query(view="removed", reason="low_alignment"))["rows"][0]
    assert low["detail"] == {"clip_score": 0.12} and low["full_caption"] is False


def test_an_empty_folder_and_two_folders_together(world, tmp_path):
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    (tmp_path / "t.jsonl").write_text('{"key": "a", "image": "x.jpg", "caption": ""}\n')  # rejected: no shard
    prepare([tmp_path / "t.jsonl"], tmp_path / "empty", PrepareOptions(format="table", quiet=True))
    empty = ViewData([str(tmp_path / "empty")])
    for q in [Query(), Query(sort="num_tokens"), Query(text="x"), Query(ranges=(("num_tokens", 1, None),))]:
        assert empty.page(q) == {"total": 0, "offset": 0, "rows": []}
    for q in [Query(view="removed"), Query(view="removed", sort="similarity")]:  # a prepared folder removed nothing
        assert empty.page(q) == {"total": 0, "offset": 0, "rows": []}
    both = ViewData([str(world["curated"]), str(world["prepared"])])
    assert both.total_rows == 13 + 28 and [f.kind for f in both.folders] == ["curated", "prepared"]
    page = both.page(Query(offset=10, limit=6))["rows"]  # file order runs on from one folder into the next
    assert [r["id"].split(":")[0] for r in page] == ["0", "0", "0", "1", "1", "1"]
    keys = [r["key"] for r in both.page(Query(limit=200))["rows"]]
    assert len(keys) == 41 and keys[13:] == pq.read_table(world["prepared"] / "shards").column("key").to_pylist()


def test_without_the_view_extra_serving_is_one_line_and_static_still_works(world, tmp_path):
    code = """
import sys
sys.modules["starlette"] = None  # as if `caption-debias[view]` were not installed
sys.modules["uvicorn"] = None
sys.argv = ["caption-debias", "view", *sys.argv[1:]]
from caption_debias.cli.main import main
main()
"""
    run = lambda *a: subprocess.run([sys.executable, "-c", code, *map(str, a)], capture_output=True, text=True)  # noqa: E731
    served = run(world["curated"], "--port", "0", "-q")
    assert served.returncode == 2 and served.stderr.strip().count("\n") == 0
    assert "pip install 'caption-debias[view]'" in served.stderr and "Traceback" not in served.stderr
    static = run(world["curated"], "--static", tmp_path / "s.html", "--sample", "2", "-q")
    assert static.returncode == 0 and (tmp_path / "s.html").is_file(), static.stderr


def test_a_config_file_gives_the_snapshot_its_options(world, tmp_path):
    import re

    (tmp_path / "c.yaml").write_text(f"static: {tmp_path / 's.html'}\nsample: 3\nper_reason: 1\nquiet: true\n")
    proc = _cli(world["curated"], "--config", tmp_path / "c.yaml")
    assert proc.returncode == 0 and proc.stdout == f"snapshot: {tmp_path / 's.html'}\n", proc.stderr
    html = (tmp_path / "s.html").read_text()
    snap = json.loads(re.search(r'<script id="snapshot" type="application/json">(.*?)</script>', html, re.S).group(1))
    assert len(snap["kept"]) == 3


def test_view_options_are_checked():
    from caption_debias.view.options import ViewOptions

    for bad, error in [(ViewOptions(port=70000), "--port"), (ViewOptions(sample=-1), "--sample")]:
        with pytest.raises(UserError, match=error):
            bad.validate()
