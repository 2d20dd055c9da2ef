"""Keys files as data (curate/keys.py; issue 38, section 3): a file is read once and the digest recorded
is of the bytes that decided; a message quotes a bounded prefix of a key, never a whole line; every key
prepare accepts survives view's export and curate's reading of it; a file that cannot be one (a FIFO,
a folder, a loop of links, a NUL or a lone CR in a plain line, a bad JSON line) is one line, and the
forms editors write (a BOM, CRLF, blank lines, a symlink) are read as meant."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_process import run_cli
from curate_fixtures import hostile_keys_world

from caption_debias.curate import keys
from caption_debias.curate import run as curate_run
from caption_debias.curate.options import CurateOptions
from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError

VIEW_JS = Path(keys.__file__).parents[1] / "view" / "assets" / "view.js"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return hostile_keys_world(tmp_path_factory.mktemp("hostile-keys"))


def _curate(world, out, **kw) -> dict:
    options = CurateOptions(quiet=True, image_root=str(world["images"]), **kw)
    return curate_run.curate([str(world["prepared"])], out, options)


def _kept(folder) -> list[str]:
    return PreparedDataset.open(folder).read(["key"]).column("key").to_pylist()


def _removed(folder) -> list[dict]:
    return [json.loads(x) for x in (folder / "removed.jsonl").read_text("utf-8").split("\n") if x]


def _json_lines(key_list: list[str]) -> bytes:
    return "".join(json.dumps(k) + "\n" for k in key_list).encode("utf-8")


# ---- read once -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "how, flag", [("renamed over", "exclude"), ("rewritten in place", "exclude"), ("renamed over", "include")]
)
def test_a_keys_file_changed_mid_run_is_recorded_as_the_bytes_that_decided(hostile, tmp_path, monkeypatch, how, flag):
    first = _json_lines(hostile["keys"][:3])
    path = tmp_path / "keys.jsonl"
    path.write_bytes(first)
    later = _json_lines(hostile["keys"][5:9])

    def change() -> None:
        if how == "renamed over":
            (tmp_path / "next").write_bytes(later)
            os.replace(tmp_path / "next", path)
        else:
            with open(path, "r+b") as fh:
                fh.write(later)
                fh.truncate()

    real = curate_run._run_signals

    def signals_then_change(*args, **kwargs):  # the run's first step done: the file changes under it
        sides = real(*args, **kwargs)
        change()
        return sides

    monkeypatch.setattr(curate_run, "_run_signals", signals_then_change)
    out = tmp_path / "out"
    manifest = _curate(hostile, out, **{f"{flag}_keys": str(path)})
    assert path.read_bytes() == later  # the file did change while the run went on
    digest = hashlib.sha256(first).hexdigest()
    assert manifest["curation"]["thresholds"]["user_keys"][flag]["sha256"] == digest
    assert manifest["curation"]["user_keys"][flag]["sha256"] == digest
    listed = hostile["keys"][:3]  # decided by the first content
    assert _kept(out) == ([k for k in hostile["keys"] if k not in listed] if flag == "exclude" else listed)
    excluded = [r for r in _removed(out) if r["reason"] == "excluded_by_user"]
    assert len(excluded) == len(hostile["keys"]) - len(_kept(out))
    assert {r["detail"]["sha256"] for r in excluded} == {digest}
    saved = json.loads((out / "manifest.json").read_text("utf-8"))
    assert saved["curation"]["thresholds"]["user_keys"] == {flag: {"path": str(path), "sha256": digest, "keys": 3}}


# ---- messages quote a bounded prefix -------------------------------------------------------------


def test_a_huge_key_that_matches_nothing_is_quoted_by_a_bounded_prefix(hostile, tmp_path):
    huge = "table/" + "x" * 2_000_000
    some = tmp_path / "some.txt"
    some.write_text(f"{hostile['keys'][-1]}\n{huge}\n", "utf-8")
    none = tmp_path / "none.txt"
    none.write_text(huge + "\n", "utf-8")
    base = ["curate", str(hostile["prepared"]), "--image-root", str(hostile["images"]), "-q"]
    warned = run_cli(*base, "--out", str(tmp_path / "a"), "--exclude-keys", str(some))
    assert warned.returncode == 0, warned.stderr[:2000]
    stopped = run_cli(*base, "--out", str(tmp_path / "b"), "--include-keys", str(none))
    assert stopped.returncode == 2
    quoted = repr(huge[: keys.SHOWN]) + "... (2,000,006 characters)"
    for proc, line in (
        (warned, f"1 of its 2 keys are rows of no input (e.g. {quoted}); the others apply"),
        (stopped, f"none of its 1 keys is a row of the inputs (e.g. {quoted})"),
    ):
        lines = proc.stderr.strip().split("\n")
        assert len(lines) == 1 and lines[0].endswith(line), lines[0][:500]
        assert len(proc.stderr) < 600


def test_keys_are_quoted_escaped(hostile, tmp_path, capsys):
    path = tmp_path / "k.jsonl"
    path.write_bytes(_json_lines([hostile["keys"][0], "table/\x1b[31mred\nline"]))
    _curate(hostile, tmp_path / "out", exclude_keys=str(path))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and r"'table/\x1b[31mred\nline'" in err


@pytest.mark.skipif(not Path("/proc/self/environ").is_file(), reason="no /proc/self/environ here")
def test_the_process_environment_as_a_keys_file_prints_none_of_it(monkeypatch):
    with pytest.raises(UserError) as err:
        CurateOptions(exclude_keys="/proc/self/environ").validate()
    line = str(err.value)
    assert line == "--exclude-keys /proc/self/environ: line 1 holds a NUL character, which a plain line cannot " + (
        "carry (write such a key as a JSON string, as `caption-debias view` exports it)"
    )
    environ = Path("/proc/self/environ").read_bytes().split(b"\0")
    assert not any(v and v.decode("utf-8", "replace") in line for v in environ if len(v) > 8)


# ---- every key prepare accepts: view's export -> file -> curate ----------------------------------


def _page_export(selected: list[str]) -> bytes:
    """The bytes the page's *export keys* downloads for `selected` (view.js keysFileText, under node)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node to run the page's export function")
    fn = re.search(r"^function keysFileText\(keys\) \{\n.*?^\}\n", VIEW_JS.read_text("utf-8"), re.S | re.M)
    assert fn is not None, "view.js has no keysFileText"
    script = fn.group(0) + "process.stdout.write(keysFileText(JSON.parse(require('fs').readFileSync(0, 'utf8'))));"
    proc = subprocess.run([node, "-e", script], input=json.dumps(selected).encode(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_every_key_survives_the_export_and_curate_reads_it_back(hostile, tmp_path):
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from caption_debias.view.app import create_app
    from caption_debias.view.data import ViewData

    page = TestClient(create_app(ViewData([str(hostile["curated"])])), base_url="http://127.0.0.1")
    served = page.get("/api/keys").json()["keys"]  # the page's "select all matching"
    assert sorted(served) == sorted(hostile["keys"])
    chosen = [k for k in served if not k.endswith("plain-1")]
    exported = tmp_path / "selected-keys-11.jsonl"
    exported.write_bytes(_page_export(chosen))
    assert len(exported.read_bytes().split(b"\n")) == len(chosen) + 1  # one key a line, whatever it holds
    assert keys.read_keys(str(exported), "--exclude-keys").keys == frozenset(chosen)
    out = tmp_path / "without"
    manifest = _curate(hostile, out, exclude_keys=str(exported))
    assert _kept(out) == ["table/plain-1"]
    assert {k: n for k, n in manifest["counts"]["removed_by_reason"].items() if n} == {"excluded_by_user": len(chosen)}
    assert manifest["curation"]["user_keys"]["exclude"]["not_in_inputs"] == 0
    only = tmp_path / "only"
    _curate(hostile, only, include_keys=str(exported))
    assert _kept(only) == [k for k in hostile["keys"] if k in chosen]


def test_plain_and_json_lines_mix_and_every_line_end(tmp_path):
    data = '\ufeffsharegpt4v/a\r\n"table/b\\nc"\n\n   \r\n"table/\\u0000d"\r\nplain/ spaced \ntable/"in"side"\n'
    assert keys.parse(data.encode("utf-8")) == frozenset(
        ["sharegpt4v/a", "table/b\nc", "table/\x00d", "plain/ spaced ", 'table/"in"side"']
    )


# ---- files that cannot be keys files, and the forms editors write ---------------------------------


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _folder(p: Path) -> None:
    p.mkdir()


def _dangling(p: Path) -> None:
    p.symlink_to(p.parent / "gone")


def _loop(p: Path) -> None:
    p.symlink_to(p.parent / "other")
    (p.parent / "other").symlink_to(p)


def _bytes(data: bytes):
    return lambda p: p.write_bytes(data)


@pytest.mark.parametrize(
    "make, message",
    [
        (_fifo, "not a regular file"),
        (_folder, "not a regular file"),
        (_dangling, "No such file or directory"),
        (_loop, "Too many levels of symbolic links"),
        (_bytes(b""), "no keys"),
        (_bytes(b"\xef\xbb\xbf\r\n \n"), "no keys"),
        (_bytes(b"table/a\ntable/b\rtable/c\n"), "line 2 holds a carriage return, which a plain line cannot carry"),
        (_bytes(b"table/a\x00b\n"), "line 1 holds a NUL character"),
        (_bytes(b'table/a\n"table/b\n'), "line 2 begins with a double quote but is not one JSON string"),
        (_bytes(b'"table/a" "table/b"\n'), "line 1 begins with a double quote but is not one JSON string"),
        (_bytes(b'"table/\\ud800"\n'), "line 1 holds a lone surrogate (\\ud800), which no key holds"),
    ],
)
@pytest.mark.parametrize("flag", ["exclude_keys", "include_keys"])
def test_a_file_that_cannot_be_a_keys_file_is_one_line(tmp_path, make, message, flag):
    path = tmp_path / "keys"
    make(path)
    with pytest.raises(UserError) as err:  # a FIFO is refused, not waited on
        CurateOptions(quiet=True, **{flag: str(path)}).validate()
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"--{flag.replace('_', '-')} {path}: ") and message in line, line


def test_a_bom_crlf_and_a_symlink_are_read_as_meant(hostile, tmp_path, capsys):
    real = tmp_path / "real.txt"
    real.write_bytes(f"\ufeff{hostile['keys'][-1]}\r\n\r\n{hostile['keys'][-2]}\r\n".encode())
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    out = tmp_path / "out"
    manifest = _curate(hostile, out, include_keys=str(link))
    assert capsys.readouterr().err == ""  # every key found: the BOM is not part of the first
    assert _kept(out) == hostile["keys"][-2:]
    assert manifest["curation"]["thresholds"]["user_keys"]["include"] == {
        "path": str(link),  # as typed
        "sha256": hashlib.sha256(real.read_bytes()).hexdigest(),
        "keys": 2,
    }
