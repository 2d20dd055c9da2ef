"""input_folders.open_inputs, the input side curate and score share: each stage's tokenizer rule
(one line through the stage's own entry point), per-folder image roots only where asked, a
manifest that lists no sha256s, and a row's shard by its global order."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from caption_debias.curate.options import CurateOptions
from caption_debias.curate.run import curate
from caption_debias.errors import UserError
from caption_debias.input_folders import open_inputs
from caption_debias.score.options import ScoreOptions
from caption_debias.score.run import score_folder
from caption_debias.shard_digests import sha256_file


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path_factory.mktemp("inputs")
    rows = [
        {"key": f"k{i}", "image": f"{i}.jpg", "caption": f"A red kite number {i} flies. It is windy."} for i in range(7)
    ]
    (root / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    (root / "images").mkdir()
    opts = PrepareOptions(format="table", quiet=True, shard_rows=3, image_root=str(root / "images"))
    prepare([root / "t.jsonl"], root / "p", opts)
    return root / "p"


def _copy(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text("utf-8"))
    edit(manifest)
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", "utf-8")
    return dst


def _tokenizer(name: str):
    def edit(manifest):
        manifest["tokenizer"] = {**manifest.get("tokenizer", {}), "name": name}

    return edit


def _same(name: str, tok: str, first: str) -> None:
    """A rule that takes any tokenizer: these tests are about the rest."""


def test_curate_refuses_inputs_made_with_two_tokenizers(prepared, tmp_path):
    other = _copy(prepared, tmp_path / "other", _tokenizer("my-bpe"))
    with pytest.raises(UserError, match=r"other: made with tokenizer 'my-bpe', the first input with another; curate"):
        curate([prepared, other], tmp_path / "out", CurateOptions(quiet=True))
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_score_refuses_a_folder_not_made_with_clip_bpe(prepared, tmp_path):
    other = _copy(prepared, tmp_path / "other", _tokenizer("my-bpe"))
    with pytest.raises(UserError, match=r"other: made with tokenizer 'my-bpe'; score reads CLIP BPE ids"):
        score_folder([other], tmp_path / "out", ScoreOptions(model="tiny", quiet=True))


def test_image_roots_only_where_asked(prepared, tmp_path):
    plain = open_inputs([prepared], tmp_path / "out", tokenizer_rule=_same)
    assert "image_root" not in plain.folders[0] and {s.image_root for s in plain.shards} == {None}
    recorded = open_inputs([prepared], tmp_path / "out", tokenizer_rule=_same, image_roots=True)
    root = str(prepared.parent / "images")  # the one prepare recorded
    assert recorded.folders[0]["image_root"] == root and {s.image_root for s in recorded.shards} == {root}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    given = open_inputs([prepared], tmp_path / "out", tokenizer_rule=_same, image_roots=True, image_root=str(elsewhere))
    want = os.path.realpath(elsewhere)  # a given root, resolved where typed (image_source.roots)
    assert given.folders[0]["image_root"] == want and {s.image_root for s in given.shards} == {want}


def test_a_manifest_without_digests_gets_each_files_own(prepared, tmp_path):
    listed = open_inputs([prepared], tmp_path / "out", tokenizer_rule=_same)
    bare = _copy(prepared, tmp_path / "bare", lambda m: [s.pop("sha256") for s in m["shards"]])
    inputs = open_inputs([bare], tmp_path / "out", tokenizer_rule=_same)
    assert [s.sha256 for s in inputs.shards] == [sha256_file(Path(s.path)) for s in inputs.shards]
    assert [s.sha256 for s in inputs.shards] == [s.sha256 for s in listed.shards]


def test_shard_of_a_global_order(prepared, tmp_path):
    second = _copy(prepared, tmp_path / "second", lambda m: None)
    inputs = open_inputs([prepared, second], tmp_path / "out", tokenizer_rule=_same)
    assert [s.rows for s in inputs.shards] == [3, 3, 1, 3, 3, 1] and inputs.rows == 14
    assert [inputs.shard_of(o).index for o in range(14)] == [0, 0, 0, 1, 1, 1, 2, 3, 3, 3, 4, 4, 4, 5]
    assert [s.start for s in inputs.shards] == [0, 3, 6, 7, 10, 13]
