"""Issue 38, section 1: a folder's own files never decide what outside it is read or served.

A recorded image root (in a manifest, or back through the lineage) is followed only when it is not a
filesystem root, a system folder or a home folder (caption_debias/trust.py); a typed --image-root is
the user's choice. Every file of a folder is confined as its shards are. view's original-file route
serves only pictures.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_process import run_cli

from caption_debias import trust
from caption_debias.dataset import PreparedDataset, read_manifest
from caption_debias.errors import UserError
from caption_debias.image_source.roots import inputs_root, recorded_root


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from train_fixtures import make_prepared

    root = tmp_path_factory.mktemp("trust")
    prepared, images = make_prepared(root, n=6)
    return root, prepared, images


def _recording(world, tmp_path: Path, recorded: str) -> Path:
    """A copy of the prepared folder whose manifest records `recorded` as its image root."""
    _, prepared, _ = world
    folder = tmp_path / "from-elsewhere"
    shutil.copytree(prepared, folder)
    manifest = json.loads((folder / "manifest.json").read_text("utf-8"))
    manifest["options"]["image_root"] = recorded
    (folder / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    return folder


@pytest.mark.parametrize(
    "path, problem",
    [
        ("/", "a filesystem root"),
        ("file:///", "a filesystem root"),
        ("/etc", "a system folder"),
        ("/etc/ssl", "a system folder"),
        ("/usr/share/pixmaps", "a system folder"),
        ("/proc/self", "a system folder"),
        ("HOME", "a home folder"),
        ("HOME/..", "holds a home folder"),
        ("HOME/datasets/images", None),
        ("s3://bucket/images", None),
        ("elsewhere/images", None),  # relative: from the working folder
    ],
)
def test_the_rule_on_each_kind_of_path(path, problem, tmp_path, monkeypatch):
    home = tmp_path / "users" / "alice"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    got = trust.recorded_path_problem(path.replace("HOME", str(home)))
    assert (got is None) if problem is None else (got is not None and problem in got), got


def test_a_symlink_to_the_filesystem_root_is_judged_where_it_leads(tmp_path):
    link = tmp_path / "innocent-images"
    os.symlink("/", link)
    assert trust.recorded_path_problem(str(link)) == "a filesystem root"
    assert trust.recorded_path_problem(str(tmp_path)) is None


@pytest.mark.parametrize("recorded", ["/", "/etc", "HOME"])
def test_every_consumer_refuses_a_recorded_root_in_one_line(world, tmp_path, recorded):
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.evaluate.benchmarks import load_prepared
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack
    from caption_debias.view.data import ViewData

    recorded = str(Path.home()) if recorded == "HOME" else recorded
    folder = _recording(world, tmp_path, recorded)
    calls = {
        "manifest": lambda: recorded_root(read_manifest(folder)[1], folder),
        "default": lambda: inputs_root([folder]),
        "curate": lambda: curate([folder], tmp_path / "curated", CurateOptions(quiet=True)),
        "pack": lambda: pack(folder, tmp_path / "packed", PackOptions(image_size=32, quiet=True)),
        "view": lambda: ViewData([str(folder)]),
        "eval": lambda: load_prepared(folder, None),
    }
    for what, call in calls.items():
        with pytest.raises(UserError) as err:
            call()
        assert f"records the image root {recorded}" in str(err.value) and "--image-root" in str(err.value), what
        assert "\n" not in str(err.value), what
    assert not (tmp_path / "curated" / "shards").exists()


def test_a_typed_root_is_the_users_choice(world, tmp_path):
    from caption_debias.view.data import ViewData

    _, _, images = world
    folder = _recording(world, tmp_path, "/")
    assert inputs_root([folder], str(images)).resolved == os.path.realpath(images)
    data = ViewData([str(folder)], str(images))
    assert str(data.folders[0].image_root) == str(images)


def test_the_cli_says_it_in_one_line_and_view_names_the_recorded_root(world, tmp_path):
    _, prepared, images = world
    folder = _recording(world, tmp_path, "/")
    for args in (
        ["curate", str(folder), "--out", str(tmp_path / "c"), "-q"],
        ["score", str(folder), "--out", str(tmp_path / "sc"), "--model", "tiny", "-q"],
        ["view", str(folder), "--static", str(tmp_path / "v.html")],
    ):
        proc = run_cli(*args)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert "records the image root /, a filesystem root" in proc.stderr, (args, proc.stderr)
    assert not (tmp_path / "v.html").exists()
    shutil.rmtree(folder)
    proc = run_cli("view", str(_recording(world, tmp_path, str(images))), "--static", str(tmp_path / "ok.html"))
    assert proc.returncode == 0, proc.stderr
    assert f"images under {images.resolve()} (recorded in its manifest" in proc.stdout


@pytest.mark.parametrize("name", ["manifest.json", "removed.jsonl", "rejects.jsonl"])
def test_a_folder_file_that_is_a_symlink_out_is_never_read(world, tmp_path, name):
    from caption_debias.view.data import ViewData

    _, prepared, _ = world
    folder = tmp_path / "folder"
    shutil.copytree(prepared, folder)
    secret = tmp_path / "secret.jsonl"
    real = folder / name
    content = real.read_bytes() if real.exists() else b'{"key": "k0", "reason": "secret"}\n'
    secret.write_bytes(content)  # a file that would read well, outside the folder
    real.unlink(missing_ok=True)
    os.symlink(secret, real)
    with pytest.raises(UserError, match=f"{name} is a symlink that leads outside the folder"):
        if name == "rejects.jsonl":
            list(PreparedDataset.open(folder).rejects())
        else:
            ViewData([str(folder)])


def test_a_lineage_input_at_a_home_folder_is_not_followed(world, tmp_path, monkeypatch):
    """An input a manifest names, whole and with the right digest, is still not followed into a home folder."""
    import hashlib

    from caption_debias import lineage

    _, prepared, _ = world
    home = tmp_path / "home-of-someone"
    shutil.copytree(prepared, home)
    digest = hashlib.sha256((home / "manifest.json").read_bytes()).hexdigest()
    entry = {"path": str(home), "manifest_sha256": digest}
    assert lineage.find_input(entry, prepared)[0] is not None  # an ordinary folder: followed
    monkeypatch.setenv("HOME", str(home))
    place, _, why = lineage.find_input(entry, prepared)
    assert place is None and why


def test_the_image_route_serves_only_pictures(world, tmp_path):
    from starlette.testclient import TestClient

    from caption_debias.folder_rows.thumbs import ThumbCache
    from caption_debias.view.app import create_app
    from caption_debias.view.data import ViewData

    _, prepared, images = world
    root = tmp_path / "root"
    shutil.copytree(images, root)
    (root / "notes.txt").write_text("API_KEY=do-not-serve\n", "utf-8")
    (root / "page.html").write_text("<script>alert(1)</script>", "utf-8")
    app = create_app(ViewData([str(prepared)], str(root)), ThumbCache(tmp_path / "thumbs"))
    c = TestClient(app, base_url="http://127.0.0.1")
    for name in ("notes.txt", "page.html"):
        res = c.get(f"/image/0/{name}")
        assert res.status_code == 415 and b"do-not-serve" not in res.content and b"<script" not in res.content
    ok = c.get("/image/0/img0000.png")
    assert ok.status_code == 200 and ok.headers["content-type"] == "image/png"


def test_a_packed_folder_passes_its_recorded_root_through_the_rule(world, tmp_path):
    """view reads a packed folder through the folder it was packed from, under the root its manifest
    records: that root is a recorded one, not one the user typed."""
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack
    from caption_debias.view.data import ViewData

    _, prepared, images = world
    packed = tmp_path / "packed"
    pack(prepared, packed, PackOptions(image_root=str(images), image_size=32, quiet=True))
    assert str(ViewData([str(packed)]).folders[0].image_root) == str(images.resolve())
    manifest = json.loads((packed / "manifest.json").read_text("utf-8"))
    manifest["options"]["image_root"] = "/"
    (packed / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    with pytest.raises(UserError, match="records the image root /, a filesystem root"):
        ViewData([str(packed)])
