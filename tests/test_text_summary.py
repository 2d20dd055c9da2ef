"""Summary scores (position-free, learned weights shipped) and the summary mask."""

import random

import pytest
from caption_samples import CAPTIONS

from caption_debias.errors import UserError
from caption_debias.text import summary
from caption_debias.text.summary import SUMMARY_MODES, is_closing_summary, raw_scores, summary_mask, summary_scores

# Long captions written for this test in three styles; the first sentence is the summary.


def _all_captions():
    return [c for caps in CAPTIONS.values() for c in caps]


def _sentences(caption):
    from caption_debias.text.segment import get_segmenter

    return [caption[s:e] for s, e in get_segmenter("fast").spans(caption)]


def test_scores_are_in_range_and_position_free():
    rng = random.Random(0)
    for caption in _all_captions():
        sents = _sentences(caption)
        scores = summary_scores(sents)
        assert len(scores) == len(sents) and all(0.0 <= s <= 1.0 for s in scores)
        for _ in range(5):
            order = list(range(len(sents)))
            rng.shuffle(order)
            shuffled = summary_scores([sents[i] for i in order])
            for pos, i in enumerate(order):
                assert shuffled[pos] == pytest.approx(scores[i], abs=1e-12)


def test_opening_summary_scores_highest_even_when_moved():
    for caption in _all_captions():
        sents = _sentences(caption)
        moved = sents[1:4] + [sents[0]] + sents[4:]  # summary now 4th
        scores = summary_scores(moved)
        assert max(range(len(moved)), key=scores.__getitem__) == 3, caption[:60]


def test_fast_scorer_equals_feature_dot_product():
    weights = summary._model()["weights"]
    for caption in _all_captions():
        sents = _sentences(caption)
        assert summary._batch_scorer().raw([sents]) == pytest.approx(raw_scores(sents, weights), abs=1e-9)


def test_mask_modes():
    sents = _sentences(CAPTIONS["llm"][0]) + ["Overall, the scene conveys a lively evening atmosphere."]
    scores = summary_scores(sents)
    detect = summary_mask(sents, scores, "detect")
    assert detect[0] and detect[-1] and not any(detect[1:-1])
    assert summary_mask(sents, scores, "first") == [True] + [False] * (len(sents) - 1)
    assert summary_mask(sents, scores, "none") == [False] * len(sents)
    assert summary_mask([], [], "detect") == []
    assert summary_mask(["A single sentence."], summary_scores(["A single sentence."]), "detect") == [True]
    with pytest.raises(UserError, match="unknown summary mode"):
        summary_mask(sents, scores, "last")
    assert SUMMARY_MODES == ("detect", "first", "none")


def test_opening_detail_is_not_flagged_when_a_summary_follows():
    # a caption that opens with a detail and states its summary second
    sents = [
        "Its handle is chipped and the glaze is worn.",
        "A close-up shot shows a white ceramic mug of coffee on a marble table next to an open notebook.",
        "The notebook's pages are filled with handwritten notes in blue ink.",
        "The mug sits near the notebook.",
    ]
    scores = summary_scores(sents)
    assert scores[1] == max(scores)
    assert summary_mask(sents, scores, "detect")[0] is False


def test_closing_phrases():
    assert is_closing_summary("Overall, the image conveys calm.")
    assert is_closing_summary("The overall atmosphere is serene and peaceful.")
    assert is_closing_summary("The image as a whole evokes nostalgia.")
    assert not is_closing_summary("The image shows a red car on the left.")
    assert not is_closing_summary("On the left, an overall-clad worker stands.")


def test_describe_names_the_shipped_model():
    d = summary.describe("detect")
    assert d["mode"] == "detect" and d["model"] == "summary_model.json" and "trained_on" in d
    assert summary.describe("first") == {"mode": "first"}
    assert summary_scores([]) == []
