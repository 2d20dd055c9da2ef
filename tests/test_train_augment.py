"""Recipe texts from stored ids, and deterministic (grouped) batch plans. Pure numpy, fast."""

from __future__ import annotations

import numpy as np
import pytest
from pictures import picture, write

from caption_debias.augment import EOT, PAD, SOT, DebiasOptions, debias_text, layout, long_text, one_sentence_text
from caption_debias.errors import UserError
from caption_debias.train.data import BatchPlan

S = [np.arange(100, 105), np.arange(200, 203), np.arange(300, 304), np.arange(400, 402)]


def test_layout_matches_open_clip_truncation():
    from open_clip.tokenizer import SimpleTokenizer

    tok = SimpleTokenizer(context_length=12)
    text = "a red circle on a plain white background with many small dots around it"
    ids = np.array(tok.encode(text))
    np.testing.assert_array_equal(layout(ids, 12), tok([text])[0].numpy())
    short = np.array(tok.encode("a cat"))
    np.testing.assert_array_equal(layout(short, 12), tok(["a cat"])[0].numpy())


def test_long_text_concatenates_all_sentences():
    out = long_text(S, 30)
    assert out[0] == SOT and out[15] == EOT and (out[16:] == PAD).all()
    np.testing.assert_array_equal(out[1:15], np.concatenate(S))


def _body(out):
    """Text ids between SOT(+moved pads) and EOT, and the number of pads moved."""
    end = int(np.argmax(out == EOT))
    inner = out[1:end]
    lead = int(np.argmax(inner != PAD))
    return inner[lead:], lead


def test_debias_drops_summary_subsamples_and_pads():
    seen_m, seen_q, orders = set(), set(), set()
    for seed in range(300):
        out, fallback = debias_text(S, [True, False, False, False], np.random.default_rng(seed), 30, DebiasOptions())
        assert not fallback and out[0] == SOT and len(out) == 30
        body, lead = _body(out)
        parts = {int(x) // 100 for x in body}
        assert 1 not in parts  # summary (sentence 1) never kept
        # whole sentences, no token lost or duplicated
        assert sorted(body.tolist()) == sorted(np.concatenate([S[p - 1] for p in parts]).tolist())
        seen_m.add(len(parts))
        seen_q.add(lead)
        orders.add(tuple(dict.fromkeys(int(x) // 100 for x in body)))
        assert lead <= 30 - 2 - len(body)
    assert seen_m == {1, 2, 3}  # m ~ U{1..k-1}
    assert 0 in seen_q and max(seen_q) >= 20  # q ~ U{0..pads}
    assert (4, 3, 2) in orders or (3, 2, 4) in orders  # random order, not only input order


def test_debias_ablations_and_fallback():
    rng = np.random.default_rng(0)
    out, _ = debias_text(S, [True, False, False, False], rng, 30, DebiasOptions(no_subsample=True, no_pad=True))
    np.testing.assert_array_equal(_body(out)[0], np.concatenate(S[1:]))
    assert _body(out)[1] == 0
    out, _ = debias_text(S, [False] * 4, rng, 30, DebiasOptions(no_drop_summary=True, no_subsample=True, no_pad=True))
    np.testing.assert_array_equal(out, long_text(S, 30))
    # `detected`: drop the flagged sentences (here the last), keep the first
    out, _ = debias_text(
        S, [False, False, False, True], rng, 30, DebiasOptions(drop_summary="detected", no_subsample=True, no_pad=True)
    )
    np.testing.assert_array_equal(_body(out)[0], np.concatenate(S[:3]))
    out, fallback = debias_text(S[:1], [True], rng, 30, DebiasOptions())
    assert fallback
    np.testing.assert_array_equal(out, long_text(S[:1], 30))


def test_one_sentence_text_prefers_first_half_the_time():
    firsts = sum(one_sentence_text(S, np.random.default_rng(i), 20)[1] == 100 for i in range(400))
    assert 160 < firsts < 240
    assert one_sentence_text(S[:1], np.random.default_rng(1), 20)[1] == 100


def test_batch_plan_is_deterministic_and_shards_by_rank():
    plan = BatchPlan(10, 4, seed=3)
    assert plan.steps_per_epoch == 2
    full = list(plan.batches(0, 5))
    assert full == list(plan.batches(0, 5)) and list(plan.batches(3, 5)) == full[3:]
    assert all(len(b) == 4 for b in full) and [b[0][0] for b in full] == [0, 0, 1, 1, 2]
    assert len({r for _, r in full[0] + full[1]}) == 8
    r0, r1 = list(plan.batches(0, 5, 0, 2)), list(plan.batches(0, 5, 1, 2))
    assert [a + b for a, b in zip(r0, r1)] == full
    with pytest.raises(UserError):
        BatchPlan(3, 4, 0)


def test_group_plan_keeps_groups_whole():
    groups = [f"g{i % 3}" for i in range(24)] + [None, None]
    plan = BatchPlan(26, 8, 0, groups, group_size=4)
    order = plan.order(0)
    assert sorted(order.tolist()) == list(range(26))  # no row left out
    for i in range(0, 24, 4):  # 6 whole group chunks, then the 2 ungrouped rows
        assert len({groups[j] for j in order[i : i + 4]}) == 1
    assert {groups[j] for j in order[24:]} == {None}
    with pytest.raises(UserError, match="multiple"):
        BatchPlan(26, 6, 0, groups, group_size=4)


def test_folder_images_reads_files_and_webdataset_members(tmp_path):
    import pickle
    import tarfile

    from caption_debias.train.data import FolderImages

    write(picture((8, 8), (255, 0, 0)), tmp_path / "a.png")
    write(picture((8, 8), (0, 255, 0)), tmp_path / "000000001.png")
    with tarfile.open(tmp_path / "00000.tar", "w") as tar:
        tar.add(tmp_path / "000000001.png", arcname="000000001.png")
    src = pickle.loads(pickle.dumps(FolderImages(tmp_path)))
    assert src.open("k", "a.png").getpixel((0, 0)) == (255, 0, 0)
    # the img2dataset reader names members .jpg; the stored extension may differ
    assert src.open("k", "00000.tar#000000001.jpg").getpixel((0, 0)) == (0, 255, 0)
    with pytest.raises(FileNotFoundError):
        src.open("k", "00000.tar#000000009.jpg")
    with pytest.raises(OSError, match="URL"):
        src.open("k", "http://x/y.jpg")
