"""summary_scores_batch (numpy over a whole chunk, used by prepare) against summary_scores."""

import random

import pytest

from caption_debias.text import summary
from caption_debias.text.summary import summary_scores, summary_scores_batch

from test_text_summary import CAPTIONS

WORDS = ("a an the its their some two several this that both each another various numerous dog dogs cat "
         "bicycle red bench wall image shows overall scene light tree trees it's woman’s t-shirt of on "
         "with and is are in near left right sky 3.5 08:45 x").split()


def _random_caption(rng: random.Random) -> list[str]:
    sentences = []
    for _ in range(rng.choice((0, 1, 1, 2, 3, 5, 8))):
        words = rng.choices(WORDS, k=rng.choice((0, 1, 2, 4, 9, 20)))
        text = " ".join(words)
        if rng.random() < 0.2:
            text = "Overall, " + text
        if rng.random() < 0.2:
            text = text.upper()
        sentences.append(text + ".")
    return sentences


def _sentences(caption: str) -> list[str]:
    return [s.strip() + "." for s in caption.split(". ") if s.strip()]


def test_batch_scores_match_per_caption_scores():
    rng = random.Random(0)
    captions = [_sentences(c) for style in CAPTIONS.values() for c in style]
    captions += [_random_caption(rng) for _ in range(400)] + [[], [""], ["", "..."], ["A dog. The dog."]]
    got = summary_scores_batch(captions)
    assert [len(g) for g in got] == [len(c) for c in captions]
    for caption, scores in zip(captions, got):
        # equal up to the order of adding word weights (a few units in the last place)
        assert scores == pytest.approx(summary_scores(caption), rel=0, abs=1e-12), caption


def test_batch_scores_survive_a_vocabulary_reset(monkeypatch):
    captions = [_sentences(c) for style in CAPTIONS.values() for c in style]
    expected = [summary_scores(c) for c in captions]
    monkeypatch.setattr(summary._Vocab, "_LIMIT", 50)  # forces clearing between and within calls
    scorer = summary._BatchScorer(summary._scorer())
    for caption, want in zip(captions, expected):
        raw = scorer.raw([caption])
        assert raw == pytest.approx(summary._scorer().raw(caption), rel=0, abs=1e-12)
    assert len(scorer.vocab) <= 50 + max(len(" ".join(c).split()) for c in captions)


def test_batch_scores_across_slices(monkeypatch):
    rng = random.Random(1)
    captions = [_random_caption(rng) for _ in range(60)]
    whole = summary_scores_batch(captions)
    monkeypatch.setattr(summary, "_BATCH", 7)  # many numpy passes, slices cutting the list anywhere
    sliced = summary_scores_batch(captions)
    assert [len(s) for s in sliced] == [len(c) for c in captions]
    for a, b in zip(sliced, whole):
        assert a == pytest.approx(b, rel=0, abs=1e-12)
