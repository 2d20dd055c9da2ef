"""`caption-debias view` is a web origin: what it serves must not run, only its own hosts are answered,
its numbers are checked, it reads only the folders it was given, and its snapshot stays inert.

HTTP through Starlette's TestClient (the real app) and a real `caption-debias view` process; the
browser as the victim in tests/test_view_security_browser.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from view_fixtures import curated_world, escaping_folder, hostile_folder  # noqa: E402

from caption_debias.errors import UserError  # noqa: E402
from caption_debias.view.data import Query, ViewData  # noqa: E402


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return curated_world(tmp_path_factory.mktemp("viewsec"))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return hostile_folder(tmp_path_factory.mktemp("hostile"))


def client(folders, image_root=None, thumbs=None, hosts=None, base_url="http://127.0.0.1"):
    from starlette.testclient import TestClient

    from caption_debias.folder_rows.thumbs import ThumbCache
    from caption_debias.view.app import create_app

    data = ViewData([str(f) for f in folders], None if image_root is None else str(image_root))
    app = create_app(data, ThumbCache(thumbs), **({} if hosts is None else {"hosts": hosts}))
    return TestClient(app, base_url=base_url)


# ---- what the origin serves ------------------------------------------------------------------


def test_every_response_says_nosniff_and_carries_a_policy(world, tmp_path):
    c = client([world["curated"]], thumbs=tmp_path / "t")
    rows = c.get("/api/page").json()["rows"]
    responses = {
        "page": c.get("/"),
        "asset": c.get("/assets/view.js"),
        "meta": c.get("/api/meta"),
        "api": c.get("/api/page"),
        "row": c.get("/api/row", params={"f": 0, "s": 0, "r": 0}),
        "thumb": c.get("/" + rows[0]["thumb"]),
        "image": c.get("/" + rows[0]["link"]),
        "missing row": c.get("/api/row", params={"f": 0, "s": 0, "r": 999}),
        "no route": c.get("/nothing/here"),
        "other host": c.get("/api/meta", headers={"Host": "attacker.example.com"}),
    }
    for what, res in responses.items():
        assert res.headers.get("x-content-type-options") == "nosniff", what
        policy = res.headers.get("content-security-policy", "")
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy, what
        if what in ("page", "asset"):
            assert "script-src 'self'" in policy and "sandbox" not in policy, what
        else:  # anything else opened as a document runs nothing, in an origin of its own
            assert "sandbox" in policy and "script-src" not in policy, what
    assert responses["image"].status_code == 200 and responses["image"].headers["content-type"] == "image/jpeg"


def test_stored_svg_and_markup_are_refused_never_documents(hostile):
    """The original-file route serves only what reads as a picture through the gate."""
    c = client([hostile["folder"]], hostile["images"])
    for name in ("evil.svg", "svg_named.png"):  # by its bytes, not its name: an SVG named .png too
        res = c.get(f"/image/0/{name}")
        assert res.status_code == 415 and "not a picture" in res.json()["error"], name
        assert (hostile["images"] / name).read_bytes() not in res.content
    real = c.get("/image/0/real.png")
    assert real.headers["content-type"] == "image/png" and real.headers["content-disposition"] == "inline"
    # the thumbnail of an SVG is the placeholder the viewer draws, never the stored file
    rows = {r["key"]: r for r in c.get("/api/page").json()["rows"]}
    res = c.get("/" + rows["table/closer"]["thumb"])
    assert res.headers["x-thumb"] == "placeholder: not a readable image" and b"<script" not in res.content


def test_links_are_the_image_route_or_a_web_url_and_nothing_else(hostile):
    data = ViewData([str(hostile["folder"])], str(hostile["images"]))
    links = {r["key"]: r["link"] for r in data.page(Query())["rows"]}
    assert links["table/lines"] is None  # a javascript: "URL" in the image column
    assert links["table/data_url"].startswith("image/0/data%3A")  # not a URL: a path, through the gate (404)
    assert links["table/plain"] == "image/0/real.png"
    for link in links.values():
        assert link is None or re.match(r"^(image/\d+/|https?://)", link), link


# ---- hosts -----------------------------------------------------------------------------------


def test_requests_naming_another_host_are_refused(world, tmp_path):
    """DNS rebinding: a page of attacker.example.com whose name now resolves to 127.0.0.1 sends its own
    name as Host; only the bound address, localhost and --allowed-host names are answered."""
    from caption_debias.view.security import allowed_hosts

    c = client([world["curated"]], thumbs=tmp_path / "t", hosts=allowed_hosts("127.0.0.1", ["view.lab"]))
    for host in (
        "attacker.example.com",
        "attacker.example.com:8765",
        "127.0.0.1.attacker.example.com",
        "view.lab.evil",
    ):
        res = c.get("/api/page", headers={"Host": host})
        assert res.status_code == 400 and b"table/" not in res.content, host
    for host in ("127.0.0.1:8765", "localhost:8765", "localhost", "[::1]:8765", "view.lab", "VIEW.lab:80"):
        assert c.get("/api/page", headers={"Host": host}).status_code == 200, host


def test_allowed_host_flag_reaches_the_server(world):
    proc = subprocess.Popen(
        [sys.executable, "-c", "from caption_debias.cli.main import main; main()", "view", str(world["curated"])]
        + ["--port", "0", "-q", "--allowed-host", "view.lab"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().split()[2]

        def status(host: str) -> int:
            req = urllib.request.Request(url + "api/meta", headers={"Host": host})
            try:
                with urllib.request.urlopen(req, timeout=30) as res:
                    return res.status
            except urllib.error.HTTPError as err:
                return err.code

        assert status("view.lab") == 200 and status("localhost") == 200 and status("attacker.example.com") == 400
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    from caption_debias.view.options import ViewOptions

    for bad in ("http://view.lab", "view.lab:80", "a b", ""):
        with pytest.raises(UserError, match="--allowed-host"):
            ViewOptions(allowed_host=[bad]).validate()
    ViewOptions(allowed_host=["*", "*.lab.example", "10.0.0.5", "[::1]", "view.lab"]).validate()


# ---- numbers ---------------------------------------------------------------------------------


def test_negative_and_huge_numbers_are_not_rows(world, tmp_path):
    c = client([world["curated"]], thumbs=tmp_path / "t")
    huge = str(10**30)
    not_rows = [
        ("/api/row", {"f": -1, "s": 0, "r": 0}),
        ("/api/row", {"f": 0, "s": -1, "r": 0}),
        ("/api/row", {"f": 0, "s": 0, "r": -1}),
        ("/api/row", {"f": 0, "removed": -1}),
        ("/api/row", {"f": 0, "removed": huge}),
        ("/api/row", {"f": huge, "s": 0, "r": 0}),
        ("/api/row", {"f": 0, "s": 0, "r": huge}),
        ("/api/pair", {"f": 0, "removed": -1}),
        ("/api/pair", {"f": 0, "removed": huge}),
        ("/api/thumb", {"f": 0, "removed": -1}),
        ("/api/thumb", {"f": -1, "s": 0, "r": 0}),
        ("/api/thumb", {"f": 0, "s": 0, "r": huge}),
        ("/api/row", {"f": "x", "s": 0, "r": 0}),
    ]
    for path, params in not_rows:
        res = c.get(path, params=params)
        assert res.status_code == 404 and res.json() == {"error": "no such row"}, (path, params)
    assert c.get("/image/99999999999999999999/x.jpg").status_code == 404
    for params in ({"offset": -1}, {"offset": huge}, {"limit": -5}, {"range": "num_tokens:nan:"}, {"offset": "x"}):
        res = c.get("/api/page", params=params)
        assert res.status_code == 400 and "error" in res.json(), params
    assert c.get("/api/page", params={"offset": 10**9}).json()["rows"] == []  # past the end: an empty page


def test_refusals_do_not_name_where_a_symlink_points(tmp_path):
    w = escaping_folder(tmp_path / "esc")
    c = client([w["prepared"]], w["images"], thumbs=tmp_path / "t")
    res = c.get("/image/0/link_out.jpg")
    assert res.status_code == 403 and "outside the image root" in res.json()["error"]
    assert str(w["secret"]) not in res.text and "secret" not in res.text
    rows = {r["key"]: r for r in c.get("/api/page").json()["rows"]}
    thumb = c.get("/" + rows["table/symlink"]["thumb"])
    assert "outside the image root" in thumb.headers["x-thumb"]
    assert "secret" not in thumb.headers["x-thumb"] and b"secret" not in thumb.content


# ---- only the folders it was given -------------------------------------------------------------


def _victim(tmp_path, key: str):
    """Another prepared folder holding a row of that key with a secret caption."""
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    (tmp_path / "victim.jsonl").write_text(
        json.dumps({"key": key.split("/", 1)[1], "image": "v.jpg", "caption": "SECRET caption. It is private."}) + "\n"
    )
    prepare([tmp_path / "victim.jsonl"], tmp_path / "victim", PrepareOptions(format="table", quiet=True))
    return tmp_path / "victim"


def test_a_removed_line_naming_another_folder_does_not_make_view_read_it(world, tmp_path):
    from caption_debias.view.static import write_static

    folder = tmp_path / "curated"
    shutil.copytree(world["curated"], folder)
    lines = [json.loads(x) for x in (folder / "removed.jsonl").read_text().splitlines()]
    victim = _victim(tmp_path, lines[0]["key"])
    lines[0]["input"] = str(victim)
    (folder / "removed.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    data = ViewData([str(folder)])
    card = data.removed_row(0, 0)
    assert card["full_caption"] is False and "SECRET" not in json.dumps(card)
    out = write_static(data, tmp_path / "s.html", sample=20, per_reason=20, seed=0, thumbs_dir=tmp_path / "t")
    assert "SECRET" not in out.read_text()
    given = ViewData([str(folder), str(victim)]).removed_row(0, 0)  # given too: then it may be read
    assert given["full_caption"] is True and given["caption"].startswith("SECRET")
    # the input the manifest records is read (whole captions), until it is another folder at that path
    recorded = next(i for i, x in enumerate(lines) if x["reason"] == "near_duplicate_caption")
    assert data.removed_row(0, recorded)["full_caption"] is True
    moved = tmp_path / "curated2"
    shutil.copytree(folder, moved)
    manifest = json.loads((moved / "manifest.json").read_text())
    manifest["inputs"][0]["manifest_sha256"] = "0" * 64  # recorded from another manifest than the one there now
    (moved / "manifest.json").write_text(json.dumps(manifest))
    assert ViewData([str(moved)]).removed_row(0, recorded)["full_caption"] is False


# ---- the snapshot and the API stay whole whatever the rows hold ------------------------------------


def test_hostile_rows_are_strict_json_from_the_api(hostile, tmp_path):
    c = client([hostile["folder"]], hostile["images"], thumbs=tmp_path / "t")
    for path, params in [
        ("/api/meta", {}),
        ("/api/page", {}),
        ("/api/page", {"view": "removed"}),
        ("/api/page", {"sort": "clip_score"}),
        ("/api/row", {"f": 0, "removed": 0}),
        ("/api/pair", {"f": 0, "removed": 0}),
    ]:
        res = c.get(path, params=params)
        assert res.status_code == 200, (path, params, res.text)
        assert res.content.isascii() and b"<" not in res.content and b"NaN," not in res.content
        json.loads(res.content)  # strict: no NaN, no lone surrogate left unescaped
    page = c.get("/api/page").json()
    assert {r["scalars"].get("clip_score") for r in page["rows"]} >= {"NaN", "Infinity", "-Infinity", 0.5}


def test_hostile_snapshot_is_one_inert_data_block(hostile, tmp_path):
    from caption_debias.view.static import write_static

    data = ViewData([str(hostile["folder"])], str(hostile["images"]))
    html = write_static(
        data, tmp_path / "s.html", sample=50, per_reason=5, seed=0, thumbs_dir=tmp_path / "t"
    ).read_text()
    block = re.search(r'<script id="snapshot" type="application/json">(.*?)</script>', html, re.S).group(1)
    assert "<" not in block and block.isascii()
    snap = json.loads(block)
    assert len(snap["kept"]) == hostile["rows"] and len(snap["removed"]) == hostile["removed"]
    assert html.count("<script") == 3 and 'http-equiv="Content-Security-Policy"' in html
    assert re.search(r"script-src 'sha256-[^']+' 'sha256-[^']+';", html)


def test_json_without_a_non_finite_float_skips_the_walk(monkeypatch):
    """json_text.dumps: json's encoder alone when every float is finite (a 100k-point map is 600k values,
    seconds in the Python walk), the walk only when one is not; the same strict, inert text either way."""
    from caption_debias.view import json_text

    walked: list[int] = []
    walk = json_text.plain
    monkeypatch.setattr(json_text, "plain", lambda v: walked.append(1) or walk(v))
    finite = {"x": [0.5, -2.0, 1e300] * 100, "key": ["</script>", "a&b", "\u2028\ud800"], "pair": (1, None)}
    text = json_text.dumps(finite)
    assert walked == [] and text.isascii() and not {"<", ">", "&"} & set(text)
    assert json.loads(text) == {**finite, "pair": [1, None]}
    text = json_text.dumps({"x": [float("nan"), 0.5, float("inf"), -float("inf")], "k": "<"})
    assert walked and json.loads(text) == {"x": ["NaN", 0.5, "Infinity", "-Infinity"], "k": "<"}
