"""The sentence_keep mask (curate --drop-ungrounded) is honoured by train, pack and export-captions:
a dropped sentence is in no text, neither the long caption nor a sampled short one."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest
from curate_fixtures import caption
from pictures import scene, write
from score_fixtures import read_rows, with_scores
from train_fixtures import wds_args

from caption_debias import augment
from caption_debias.train.data import TokenTable, load_rows

N = 12


@pytest.fixture(scope="module")
def masked(tmp_path_factory):
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path_factory.mktemp("mask")
    (root / "img").mkdir()
    rng = random.Random(11)
    rows = []
    for i in range(N):
        write(scene(900 + i, (40, 32)), root / "img" / f"{i}.png")
        rows.append({"key": f"m{i}", "image": f"img/{i}.png", "caption": caption(rng, rng.randrange(3, 7))})
    (root / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([root / "t.jsonl"], root / "prepared", PrepareOptions(format="table", quiet=True, shard_rows=5))
    base = read_rows(root / "prepared", ["sentences", "summary_mask"])
    keep = []
    for i, mask in enumerate(base["summary_mask"]):
        if i == 3:
            keep.append(None)  # a row without a mask keeps everything
            continue
        k = [bool(s) or rng.random() < 0.5 for s in mask]
        detail = [j for j, s in enumerate(mask) if not s]
        k[detail[0]] = True  # curate removes a row left with no detail sentence
        k[detail[-1]] = False if len(detail) > 1 else k[detail[-1]]
        keep.append(k)
    folder = with_scores(root / "prepared", root / "masked", {"sentence_keep": keep})
    rows = read_rows(folder, ["key", "sentences", "sentence_tokens", "summary_mask", "sentence_keep"])
    assert sum(k.count(False) for k in keep if k) >= N  # something is dropped
    return {"root": root, "folder": folder, "rows": rows}


def _dropped(rows, i) -> list[str]:
    keep = rows["sentence_keep"][i]
    return [] if keep is None else [s for s, k in zip(rows["sentences"][i], keep) if not k]


def test_token_table_keeps_only_kept_sentences_batched_equals_specification(masked):
    rows = masked["rows"]
    table = TokenTable.from_lists(
        pa.array(rows["sentence_tokens"], pa.list_(pa.list_(pa.int32()))),
        pa.array(rows["summary_mask"], pa.list_(pa.bool_())),
        pa.array(rows["sentence_keep"], pa.list_(pa.bool_())),
    )
    for i in range(N):
        want = augment.kept_sentences(rows["sentence_tokens"][i], rows["sentence_keep"][i])
        assert [s.tolist() for s in table.sentences(i)] == want
        assert table.summary_mask(i).tolist() == augment.kept_sentences(
            rows["summary_mask"][i], rows["sentence_keep"][i]
        )


def test_train_never_samples_a_dropped_sentence(masked):
    rows = masked["rows"]
    loaded = load_rows(masked["folder"])
    opts = augment.DebiasOptions()
    for i in range(N):
        dropped = [tuple(t) for t, k in zip(rows["sentence_tokens"][i], rows["sentence_keep"][i] or []) if not k]
        sents = loaded.tokens.sentences(i)
        assert all(tuple(s.tolist()) not in dropped for s in sents)
        long = augment.long_text(sents, 248).tolist()
        kept_ids = [t for s in sents for t in s.tolist()]
        assert long[1 : 1 + len(kept_ids)] == kept_ids  # the long text is the kept sentences
        rng = np.random.default_rng(i)
        for _ in range(30):
            short, _ = augment.debias_text(sents, loaded.tokens.summary_mask(i), rng, 248, opts)
            ids = [t for t in short.tolist() if t not in (0, augment.SOT, augment.EOT)]
            for d in dropped:  # no dropped sentence's ids appear as a run
                assert not any(tuple(ids[j : j + len(d)]) == d for j in range(len(ids) - len(d) + 1))


def test_pack_carries_the_mask_and_training_from_the_pack_honours_it(masked, tmp_path):
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack
    from caption_debias.train.packed_source import load_packed

    pack(masked["folder"], tmp_path / "packed", PackOptions(image_root=str(masked["root"]), image_size=32, quiet=True))
    packed, _ = load_packed(str(tmp_path / "packed"))
    rows = masked["rows"]
    by_key = {k: i for i, k in enumerate(rows["key"])}
    for r in range(len(packed)):
        i = by_key[packed.keys[r]]
        want = augment.kept_sentences(rows["sentence_tokens"][i], rows["sentence_keep"][i])
        assert [s.tolist() for s in packed.tokens.sentences(r)] == want
        assert packed.tokens.summary_mask(r).tolist() == augment.kept_sentences(
            rows["summary_mask"][i], rows["sentence_keep"][i]
        )


@pytest.mark.parametrize("strip,aug", [("none", "none"), ("summary", "debias")])
def test_export_captions_leaves_dropped_sentences_out(masked, tmp_path, strip, aug):
    from caption_debias.export.captions import export_captions

    out = tmp_path / "c.jsonl"
    export_captions(masked["folder"], out, strip=strip, augment=aug, copies=4 if aug == "debias" else 1)
    texts: dict[str, list[str]] = {}
    for line in out.read_text("utf-8").splitlines():
        r = json.loads(line)
        texts.setdefault(r["key"], []).append(r["caption"])
    rows = masked["rows"]
    for i, key in enumerate(rows["key"]):
        for text in texts[key]:
            for d in _dropped(rows, i):
                assert d not in text
    assert any(_dropped(rows, i) for i in range(N))


@pytest.fixture(scope="module")
def curated_packed(masked, tmp_path_factory):
    """`curate --drop-ungrounded` on a folder with grounding (the mask is curate's own), then `pack`."""
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack

    root = tmp_path_factory.mktemp("packmask")
    base = read_rows(masked["root"] / "prepared", ["summary_mask"])
    rng = np.random.default_rng(5)
    grounding = [[float(g) for g in rng.normal(0.5, 1.0, len(mask))] for mask in base["summary_mask"]]
    scored = with_scores(masked["root"] / "prepared", root / "scored", {"sentence_grounding": grounding})
    curate([scored], root / "curated", CurateOptions(drop_ungrounded=0.0, quiet=True))
    pack(root / "curated", root / "packed", PackOptions(image_root=str(masked["root"]), image_size=32, quiet=True))
    rows = read_rows(root / "curated", ["key", "caption", "sentences", "sentence_keep"])
    assert sum(k.count(False) for k in rows["sentence_keep"] if k) >= 3  # curate masked something
    manifest = json.loads((root / "packed" / "manifest.json").read_text("utf-8"))
    return {"rows": rows, "pattern": str(root / "packed" / manifest["train_data"])}


def _masked_sentences(rows) -> set[str]:
    return {s for i in range(len(rows["key"])) for s in _dropped(rows, i)}


def test_packed_text_webdataset_reads_holds_no_masked_sentence(curated_packed):
    import webdataset as wds

    rows = curated_packed["rows"]
    by_key = {k: i for i, k in enumerate(rows["key"])}
    masked = _masked_sentences(rows)
    samples = list(wds.WebDataset(curated_packed["pattern"], shardshuffle=False))
    assert len(samples) == len(rows["key"])
    for s in samples:
        text = s["txt"].decode("utf-8")
        assert not any(m in text for m in masked), text
        i = by_key[json.loads(s["json"])["key"]]
        assert text == augment.kept_caption(rows["caption"][i], rows["sentences"][i], rows["sentence_keep"][i])
        if rows["sentence_keep"][i] is None or all(rows["sentence_keep"][i]):
            assert text == rows["caption"][i]  # nothing dropped: the caption verbatim


def test_open_clip_train_reads_no_masked_sentence_from_the_pack(curated_packed):

    import open_clip
    from open_clip_train.data import get_wds_dataset

    rows = curated_packed["rows"]
    tokenizer = open_clip.get_tokenizer("ViT-B-32")
    args = wds_args(curated_packed["pattern"], val_data=curated_packed["pattern"], batch_size=4)
    val = get_wds_dataset(args, open_clip.image_transform(32, is_train=False), is_train=False, tokenizer=tokenizer)
    seen = [t.tolist() for _, texts in val.dataloader for t in texts]
    kept = [augment.kept_caption(c, s, k) for c, s, k in zip(rows["caption"], rows["sentences"], rows["sentence_keep"])]
    assert sorted(seen) == sorted(tokenizer(kept).tolist())  # open_clip_train's texts are the kept captions
    for m in _masked_sentences(rows):  # and no masked sentence's ids appear in any of them
        body = [t for t in tokenizer([m])[0].tolist() if t not in (0, augment.SOT, augment.EOT)]
        for ids in seen:
            assert not any(ids[j : j + len(body)] == body for j in range(len(ids) - len(body) + 1))
