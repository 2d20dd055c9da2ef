"""`curate --exclude-keys FILE` / `--include-keys FILE` (curate/keys.py): rows a curator chose by key.

The output is the same run's without the flag less exactly the rows listed (or not listed), each
a removed.jsonl line `excluded_by_user` naming the file and its sha256; counts reconcile; a bad
keys file is one line before any work."""

from __future__ import annotations

import hashlib
import json

import pytest
from cli_process import run_cli
from curate_fixtures import make_world

from caption_debias.curate import keys
from caption_debias.curate.options import REASONS, CurateOptions
from caption_debias.curate.run import curate
from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError
from caption_debias.schema import removed_schema


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("keysworld"))


def _opts(world, **kw) -> CurateOptions:
    return CurateOptions(image_root=str(world["images"]), quiet=True, **kw)


@pytest.fixture(scope="module")
def plain(world, tmp_path_factory):
    out = tmp_path_factory.mktemp("plain") / "out"
    curate([world["prepared"]], out, _opts(world))
    return out


def _kept(folder) -> list[str]:
    return PreparedDataset.open(folder).read(["key"]).column("key").to_pylist()


def _removed(folder) -> list[dict]:
    return [json.loads(x) for x in (folder / "removed.jsonl").read_text().splitlines()]


def test_reason_is_last_in_the_funnel_and_in_the_schema():
    assert REASONS[-1] == "excluded_by_user"
    assert removed_schema()["properties"]["reason"]["enum"] == list(REASONS)


def test_exclude_keys_removes_exactly_the_listed_rows(world, plain, tmp_path):
    kept = _kept(plain)
    chosen = [kept[1], kept[4], "table/byte_copy"]  # the last is a duplicate already: it stays one
    path = tmp_path / "keys.txt"
    path.write_text("\n".join(chosen) + "\n\n", "utf-8")
    out = tmp_path / "out"
    manifest = curate([world["prepared"]], out, _opts(world, exclude_keys=str(path)))
    assert _kept(out) == [k for k in kept if k not in chosen]
    lines = {r["key"]: r for r in _removed(out)}
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    for key in chosen[:2]:
        assert lines[key]["reason"] == "excluded_by_user"
        assert lines[key]["detail"] == {"by": "listed in --exclude-keys", "file": str(path), "sha256": digest}
    assert lines["table/byte_copy"]["reason"] == "duplicate_image"
    before = {r["key"]: r["reason"] for r in _removed(plain)}
    assert {k: r["reason"] for k, r in lines.items() if k not in chosen[:2]} == before  # nothing else moved
    c = manifest["counts"]
    assert c["removed_by_reason"]["excluded_by_user"] == 2 and c["read"] == c["written"] + c["removed"]
    assert manifest["curation"]["thresholds"]["user_keys"] == {
        "exclude": {"path": str(path), "sha256": digest, "keys": 3}
    }
    assert manifest["curation"]["user_keys"]["exclude"]["not_in_inputs"] == 0
    assert manifest["curation"]["funnel"][-2] == {"step": "excluded_by_user", "removed": 2, "left": c["written"]}


def test_include_keys_keeps_only_the_listed_rows(world, plain, tmp_path):
    kept = _kept(plain)
    path = tmp_path / "only.txt"
    path.write_text(f"{kept[0]}\r\n{kept[2]}\r\ntable/missing\r\n", "utf-8")  # CRLF lines read too
    out = tmp_path / "out"
    manifest = curate([world["prepared"]], out, _opts(world, include_keys=str(path)))
    assert _kept(out) == [kept[0], kept[2]]
    lines = {r["key"]: r for r in _removed(out)}
    assert lines["table/missing"]["reason"] == "image_missing"  # listed rows still pass every other reason
    dropped = [k for k in kept if k not in (kept[0], kept[2])]
    assert all(lines[k]["reason"] == "excluded_by_user" for k in dropped)
    assert lines[dropped[0]]["detail"]["by"] == "not listed in --include-keys"
    assert manifest["counts"]["removed_by_reason"]["excluded_by_user"] == len(dropped)


def test_keys_in_no_input_are_counted_in_one_line(world, tmp_path, capsys):
    path = tmp_path / "k.txt"
    path.write_text("table/c1\nnot/a-row\nnot/another\n", "utf-8")
    manifest = curate([world["prepared"]], tmp_path / "out", _opts(world, exclude_keys=str(path)))
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"caption-debias curate: warning: --exclude-keys {path}: 2 of its 3 keys are rows of no input "
        "(e.g. 'not/a-row', 'not/another'); the others apply"
    ]
    assert manifest["curation"]["user_keys"]["exclude"]["not_in_inputs"] == 2
    none = tmp_path / "none.txt"
    none.write_text("x/1\nx/2\n", "utf-8")
    with pytest.raises(UserError, match=r"none of its 2 keys is a row of the inputs \(e\.g\. 'x/1'\)"):
        curate([world["prepared"]], tmp_path / "out2", _opts(world, include_keys=str(none)))
    assert not (tmp_path / "out2" / "manifest.json").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "No such file or directory"),
        (b"table/c1\n\xff\xfe\n", "not UTF-8 text (invalid start byte at byte 9)"),
        (b"\n\n\r\n", "no keys"),
    ],
)
def test_a_bad_keys_file_is_one_line(world, tmp_path, content, message):
    path = tmp_path / "keys.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _opts(world, exclude_keys=str(path)).validate()


def test_a_huge_keys_file_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(keys, "MAX_BYTES", 64)
    path = tmp_path / "big.txt"
    path.write_text("k\n" * 40, "utf-8")
    with pytest.raises(UserError, match="larger than 0 MiB"):
        keys.read_keys(str(path), "--include-keys")


def test_listed_matches_its_row_by_row_specification(tmp_path):
    path = tmp_path / "k.txt"
    path.write_text("a/1\nb/2\nc 3\n", "utf-8")
    key_list = keys.read_keys(str(path), "--exclude-keys")
    rows = ["a/1", "a/10", None, "c 3", "b/2", "B/2", " a/1"]
    assert keys.listed(rows, key_list).tolist() == [keys.listed_row(k, key_list) for k in rows]
    assert keys.listed(rows, key_list).tolist() == [True, False, False, True, True, False, False]


def test_cli_bad_keys_file_is_one_line_and_exit_2(world, tmp_path):
    proc = run_cli(
        "curate",
        str(world["prepared"]),
        "--out",
        str(tmp_path / "o"),
        "--exclude-keys",
        str(tmp_path / "nope.txt"),
        "-q",
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"caption-debias: error: --exclude-keys {tmp_path / 'nope.txt'}: No such file or directory"
    ]


def test_keep_keys_keeps_what_a_filter_removed_and_never_masks_it(world, plain, tmp_path):
    """--keep-keys (issue 37): the rows listed stay whatever removed them, but a missing image; the rest
    of the run is the same; the manifest counts what each reason would have removed."""
    before = {r["key"]: r["reason"] for r in _removed(plain)}
    by_reason: dict[str, str] = {}
    for key, reason in before.items():
        by_reason.setdefault(reason, key)
    assert "duplicate_image" in by_reason and "image_missing" in by_reason
    unkeepable = ("image_missing", "image_unreadable")  # no picture: nothing to train on
    chosen = sorted(k for r, k in by_reason.items() if r not in unkeepable) + [by_reason["image_missing"]]
    path = tmp_path / "keep.txt"
    path.write_text("".join(json.dumps(k) + "\n" for k in chosen), "utf-8")  # the view's JSON-lines export
    out = tmp_path / "out"
    manifest = curate([world["prepared"]], out, _opts(world, keep_keys=str(path)))
    rescued = [k for k in chosen if before[k] not in unkeepable]
    assert set(_kept(out)) == set(_kept(plain)) | set(rescued)
    after = {r["key"]: r["reason"] for r in _removed(out)}
    assert after == {k: r for k, r in before.items() if k not in rescued}  # nothing else moved
    kept_by_user = manifest["curation"]["kept_by_user"]
    assert kept_by_user["overrode"] == {before[k]: 1 for k in rescued}
    assert kept_by_user["not_kept"] == {"image_missing": 1} and kept_by_user["rows"] == len(rescued)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert manifest["curation"]["thresholds"]["user_keys"]["keep"] == {
        "path": str(path),
        "sha256": digest,
        "keys": len(chosen),
    }
    c = manifest["counts"]
    assert c["read"] == c["written"] + c["removed"]


def test_keep_keys_rows_are_never_masked(tmp_path):
    """A scored folder with --drop-ungrounded: the kept-by-user rows' sentence_keep is all True."""
    import pyarrow.parquet as pq
    from view_fixtures import curated_world, scored_copy

    w = curated_world(tmp_path / "w")
    scored = scored_copy(w["curated"], w["images"], tmp_path / "scored")
    rows = pq.read_table(scored / "shards", columns=["key"]).column("key").to_pylist()
    path = tmp_path / "keep.txt"
    path.write_text(f"{rows[0]}\n{rows[3]}\n", "utf-8")
    out = tmp_path / "out"
    curate([scored], out, CurateOptions(quiet=True, drop_ungrounded=0.5, keep_keys=str(path)))
    got = dict(zip(*pq.read_table(out / "shards", columns=["key", "sentence_keep"]).to_pydict().values()))
    assert all(got[rows[0]]) and all(got[rows[3]])
    assert any(not all(m) for k, m in got.items() if k not in (rows[0], rows[3]))  # the others are masked


def test_a_key_both_excluded_and_kept_is_one_line(world, tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("table/a0\ntable/a1\n", "utf-8")
    b.write_text("table/a1\n", "utf-8")
    with pytest.raises(UserError, match="both list 1 keys .*a row cannot be removed and kept"):
        curate([world["prepared"]], tmp_path / "out", _opts(world, exclude_keys=str(a), keep_keys=str(b)))
