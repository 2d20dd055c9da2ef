"""summary_scores_batch (numpy over a whole chunk, used by prepare) against summary_scores."""

import random

import pytest
from caption_samples import CAPTIONS

from caption_debias.text import summary
from caption_debias.text.summary import summary_scores, summary_scores_batch

WORDS = (
    "a an the its their some two several this that both each another various numerous dog dogs cat "
    "bicycle red bench wall image shows overall scene light tree trees it's woman’s t-shirt of on "
    "with and is are in near left right sky 3.5 08:45 x"
).split()


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
    monkeypatch.setattr(summary._Vocab, "_LIMIT", 50)  # forces clearing between and within calls
    scorer = summary._BatchScorer(summary._Weights(summary._model()))
    for caption in captions:
        raw = scorer.raw([caption])
        assert raw == pytest.approx(summary.raw_scores(caption), rel=0, abs=1e-12)
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


# Characters around which the batch's byte-level word finder could part from _WORD (lowercasing
# that yields ASCII such as "İ" -> "i̇" and the Kelvin sign, curly and plain apostrophes, hyphens,
# dashes, multi-byte letters, NUL, a lone surrogate, line breaks).
TRICKY = [
    "a",
    "b",
    "Z",
    "'",
    "-",
    "\u2019",
    " ",
    "\u0130",
    "\u212a",
    "\u00e9",
    "\u2014",
    "\u00df",
    "\0",
    "\udc80",
    "\n",
    "3",
    "\u03a3",
    "\u00c9",
]


def test_chunk_words_equal_regex_words():
    rng = random.Random(2)
    for trial in range(300):
        sentences = ["".join(rng.choices(TRICKY, k=rng.randrange(0, 12))) for _ in range(rng.randrange(1, 8))]
        if trial % 3:  # the NUL-free paths (a NUL in a sentence sends the chunk to the regex)
            sentences = [s.replace("\0", "") for s in sentences]
        if trial % 3 == 2:  # and without "İ" or the Kelvin sign, where ASCII bytes are lowered in numpy
            sentences = [s.replace("\u0130", "").replace("\u212a", "") for s in sentences]
        local, distinct, lengths = summary._chunk_words(sentences)
        words = [distinct[i] for i in local.tolist()]
        expected = [summary._words(s) for s in sentences]
        assert lengths.tolist() == [len(w) for w in expected], sentences
        assert words == [w for ws in expected for w in ws], sentences
        assert len(set(distinct)) == len(distinct)


def test_batch_scores_on_edge_captions():
    captions = [
        [],
        [""],
        ["Dog"],
        ["A dog."],
        ["Dogs", "dog"],
        ["\u0130stanbul at night, a city by the sea."],
        [
            "A caf\u00e9 with a na\u00efve mural.",
            "The caf\u00e9\u2019s mural is bright.",
            "The woman\u2019s t-shirt is red.",
        ],
        ["A dog\0 sits.", "The dog\0 sleeps."],
        ["A lone \udc80 surrogate.", "The surrogate."],
        ["Shot", "Close-up"],
        ["   ", "---", "'''"],
        ["\u212aelvin dogs.", "The kelvin dogs."],
    ]
    got = summary_scores_batch(captions)
    for caption, scores in zip(captions, got):
        assert scores == pytest.approx(summary_scores(caption), rel=0, abs=1e-12), caption


def test_batch_closing_phrases_as_the_reference():
    # the batch runs _CLOSING only where the first two words allow a match: near misses too
    openers = [
        "Overall,",
        "overall",
        "In summary,",
        "In conclusion",
        "in essence,",
        "In short,",
        "Altogether,",
        "All in all,",
        "All in",
        "The overall",
        "The general",
        "the image conveys",
        "The scene as a whole evokes",
        "The photograph radiates",
        "This photo's mood",
        "This image\u2019s mood",
        "The picture's tone",
        "This composition conveys",
        "The setting gives",
        "The image shows",
        "  The image exudes",
        "THE IMAGE HAS",
        "Theimage has",
        "The imagery conveys",
        "In",
        "The",
        "This",
        "Inside,",
        "The overall-look",
    ]
    captions = [["A dog on a bench.", "The dog is brown.", o + " a calm mood."] for o in openers]
    captions += [[o] for o in openers] + [[o + " a calm mood."] for o in openers]
    got = summary_scores_batch(captions)
    for caption, scores in zip(captions, got):
        assert scores == pytest.approx(summary_scores(caption), rel=0, abs=1e-12), caption


def test_batch_scores_over_many_slices_of_real_sized_chunks():
    rng = random.Random(3)
    captions = [_random_caption(rng) for _ in range(summary._BATCH + 300)]  # two numpy passes
    got = summary_scores_batch(captions)
    assert [len(g) for g in got] == [len(c) for c in captions]
    for caption, scores in zip(captions[::7], got[::7]):
        assert scores == pytest.approx(summary_scores(caption), rel=0, abs=1e-12), caption


def test_only_listed_characters_lowercase_to_ascii_letters():
    # _chunk_words lowers ASCII bytes itself and leaves other characters as they are, unless the
    # text holds one of these (then it lowers with str.lower); so no other character of this
    # Python's Unicode may lowercase to a-z, "'" or "-" (nor to "\u2019", which becomes "'").
    found = set()
    for cp in range(0x80, 0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        low = chr(cp).lower()
        if low != chr(cp) and any(c in "abcdefghijklmnopqrstuvwxyz'-\u2019" for c in low):
            found.add(chr(cp))
    assert found == set(summary._LOWER_TO_ASCII)


def test_flat_scores_and_batch_mask_equal_the_per_caption_ones(monkeypatch):
    # prepare's path: scores end to end (summary_scores_flat) and flags end to end (summary_mask_batch)
    rng = random.Random(4)
    captions = [_sentences(c) for style in CAPTIONS.values() for c in style]
    captions += [_random_caption(rng) for _ in range(300)] + [[], [""], ["", "..."], ["Overall, a calm mood."]]
    captions += [
        ["A dog on a bench.", "The dog is brown.", "Overall, a calm mood."],
        ["The dog is brown.", "A dog."] * 2,
    ]
    flat_sentences = [x for c in captions for x in c]
    counts = [len(c) for c in captions]
    for batch in (summary._BATCH, 5):
        monkeypatch.setattr(summary, "_BATCH", batch)
        flat = summary.summary_scores_flat(flat_sentences, counts)
        by_caption = summary_scores_batch(captions)
        assert flat.dtype == float and flat.tolist() == [x for sc in by_caption for x in sc]  # bit for bit
        for mode in summary.SUMMARY_MODES:
            mask = summary.summary_mask_batch(flat_sentences, counts, flat, mode)
            assert mask.dtype == bool
            assert mask.tolist() == [
                m for c, sc in zip(captions, by_caption) for m in summary.summary_mask(c, sc, mode)
            ], mode
    assert sum(summary.summary_mask_batch(flat_sentences, counts, flat, "detect")) > len(captions) // 2
    with pytest.raises(summary.UserError):
        summary.summary_mask_batch(flat_sentences, counts, flat, "last")
    assert len(summary.summary_scores_flat([], [])) == 0 and len(summary.summary_mask_batch([], [], flat[:0])) == 0
