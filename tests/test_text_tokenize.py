"""The torch-free CLIP tokenizer must give open_clip's ids exactly."""

import random
import subprocess
import sys

import pytest

from caption_debias.text.tokenize import ClipTokenizer, get_tokenizer

CAPTIONS = [
    "A close-up outdoor shot shows an Echinops Bannaticus Blue Glow Globe flower in front of a blue sky.",
    "The flower's spiky extensions are light purple-blue in color with curled tips of dark brown.",
    'The sign reads "OPEN 24/7" in neon; the clock shows 08:45 and the shelf is 3.5 m long.',
    "Overall, the image conveys a calm, serene atmosphere.\n\nIn the background, e.g. trees, i.e. oaks.",
    "Captured at eye-level, Dr. Smith's café on St. Mary St. sells crème brûlée for €4.50 (approx.).",
    "Their plumage is a rich, reddish-brown… contrasting with “white” feathers — really ‘striking’.",
]
EDGE_CASES = [
    "",
    "   ",
    "\t\n",
    "a",
    "A",
    "Fish &amp; chips &lt;3 &#39;quoted&#39; &amp;amp; &nbsp;space &copy; 2024",
    "<b>bold</b> &quot;html&quot; &#x263A;",
    "naïve façade jalapeño Zürich Ελληνικά русский текст 中文字符 日本語のテキスト 한국어",
    "emoji 😀🎉👍🏽 flags 🇫🇷 zwj 👨‍👩‍👧",
    "mojibake: cafÃ© â€œquotedâ€\x9d",
    "pneumonoultramicroscopicsilicovolcanoconiosis " * 3,
    "supercalifragilisticexpialidocious" * 4,
    "1234567890 3.14159 1,000,000 #42 $19.99 50% 1/2 ½ ² ³ ⅞",
    "IT'S THE DOG'S BALL, ISN'T IT? We'll, they're, I've, I'm, you'd",
    "<start_of_text> literal special <end_of_text> tokens",
    "control\x00chars\x07here\x1b[31mred\x1b[0m",
    "ﬁ ligature ｆｕｌｌｗｉｄｔｈ ＡＢＣ",
    "tab\tseparated\r\nwindows\u2028line\u00a0nbsp",
    "...!!!???,,,;;;:::---___",
    "a" * 600,
]


def _random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    palette = (
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789     .,;:!?'\"-()&#\n\t"
        "éèàüößñçøåæœ€£°½—–…“”‘’😀中文ж"
    )
    return ["".join(rng.choice(palette) for _ in range(rng.randint(0, 120))) for _ in range(n)]


@pytest.fixture(scope="module")
def reference():
    open_clip = pytest.importorskip("open_clip")
    return open_clip.tokenizer.SimpleTokenizer()


def test_identical_to_open_clip_on_many_texts(reference):
    tok = get_tokenizer()
    texts = CAPTIONS + EDGE_CASES + _random_texts(400, seed=3)
    assert tok.encode_batch(texts) == [reference.encode(t) for t in texts]
    # the word cache must not change anything on a second pass
    assert [tok.encode(t) for t in texts] == [reference.encode(t) for t in texts]


def test_matches_open_clip_get_tokenizer_with_start_end(reference):
    import open_clip

    oc = open_clip.get_tokenizer("ViT-B-32")
    tok = get_tokenizer()
    tensor = oc(CAPTIONS + EDGE_CASES[:10])
    for row, text in zip(tensor.tolist(), CAPTIONS + EDGE_CASES[:10]):
        ids = [tok.sot_id] + tok.encode(text)[: 77 - 2] + [tok.eot_id]
        assert row[: len(ids)] == ids
        assert all(x == tok.pad_id for x in row[len(ids) :])


def test_special_ids_and_describe():
    tok = get_tokenizer()
    assert (tok.sot_id, tok.eot_id, tok.pad_id) == (49406, 49407, 0)
    assert tok.vocab_size == 49408
    d = tok.describe()
    assert d["sot_id"] == 49406 and len(d["vocab_sha256"]) == 64
    assert tok.num_tokens("a red car") == 5
    assert get_tokenizer() is tok


def test_separate_instances_agree():
    texts = _random_texts(50, seed=11)
    assert ClipTokenizer().encode_batch(texts) == get_tokenizer().encode_batch(texts)


def test_text_package_does_not_import_torch():
    code = (
        "import sys; import caption_debias.text.tokenize as t, caption_debias.text.segment as s, "
        "caption_debias.text.summary as m; t.get_tokenizer().encode('a dog'); s.get_segmenter('fast').spans('A. B.'); "
        "m.summary_scores(['a', 'b']); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _encoded(tok, texts):
    """(text, spans, per-sentence ids, whole-caption count) for each text, split by the `fast` segmenter."""
    from caption_debias.text.segment import get_segmenter

    seg = get_segmenter("fast")
    for text in texts:
        spans = seg.spans(text)
        yield (text, spans, *tok.encode_caption(text, spans))


def test_encode_caption_counts_like_the_whole_caption():
    tok = get_tokenizer()
    texts = (
        CAPTIONS
        + EDGE_CASES
        + [
            "Trailing marks at the end of the sun.. A new line",
            "No space after it.There is more. “Quoted” text — with dashes.",
            "Fish &amp; chips. Café au lait. Ａ wide letter.",
        ]
        + [" ".join(_random_texts(3, seed=s)) for s in range(100)]
    )
    for text, spans, ids, n in _encoded(tok, texts):
        assert ids == [tok.encode(text[s:e]) for s, e in spans]
        assert n == len(tok.encode(text)) + 2, text


def test_fresh_tokenizer_on_unseen_words(reference):
    """Every word below reaches the Rust BPE (a fresh instance has empty caches)."""
    texts = [
        "é" * 300,
        "中文" * 150,
        "ab" * 300,
        "l" * 1000,
        "😀" * 90,
        "x" + "ÿ" * 257,
        "".join(chr(c) for c in range(0xA1, 0x17F)),  # every Latin-1/Extended-A letter in one word
        "caf\u00e9 cafe\u0301 \u212bngstr\u00f6m \u0130stanbul \u017fs 'ſ 'S 'ſt",  # NFC/NFD, dotted I, long s
        ".<start_of_text>x <start_of_text>. a<end_of_text>b <start_of_text><end_of_text>",
        "tab\tand\nnew\r\nlines\x0bvertical\x0cfeed \u2003em-space",
        "&nbsp; &#32; &#9;",
        "&amp;nbsp;",  # empty after cleaning
    ]
    tok = ClipTokenizer()
    assert [tok.encode(t) for t in texts] == [reference.encode(t) for t in texts]
    assert tok.encode("&nbsp; &#32; &#9;") == []


def test_bpe_merges_match_open_clip_on_every_vocabulary_word(reference):
    """The Rust BPE gives open_clip's merges for every word the merges can build."""
    tok = get_tokenizer()
    words = {"".join(m).removesuffix("</w>") for m in reference.bpe_ranks}
    for word in sorted(words):
        assert [t.id for t in tok._bpe_model.tokenize(word)] == [
            reference.encoder[t] for t in reference.bpe(word).split(" ")
        ], word


# every character a text can hold when its cleaning is local (tokenize._PLAIN_TYPOGRAPHIC)
_LOCAL_CHARS = "".join(
    chr(c)
    for c in [*range(0x20, 0x7F), 0x09, 0x0A, 0x0D, 0xA0, 0x2BC, *range(0x2018, 0x2020), 0x2013, 0x2014]
    if c != 0x26
)


def _local_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    pools = (
        _LOCAL_CHARS,
        " \t\n\r\xa0",
        "abcdefghij ABC'",
        "\u2018\u2019\u201c\u201d\u02bc\u201a\u201b\u201e\u201f\u2013\u2014",
    )
    return ["".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(0, 80))) for _ in range(n)]


def test_encode_sentences_matches_open_clip(reference, monkeypatch):
    from caption_debias.text import tokenize

    texts = [
        "",
        " ",
        "\xa0",
        " a ",
        "\xa0a\xa0 b\tc\r\nd  ",
        "It\u2019s \u201cx\u201d \u2014 y",
        "A.B" * 50,
    ] + _local_texts(400, seed=5)
    assert all(tokenize._PLAIN_TYPOGRAPHIC.fullmatch(t) for t in texts)
    want = [reference.encode(t) for t in texts]
    for passes in (tokenize._SENTENCES_PER_PASS, 7, 1):  # one Arrow pass, several, one text each
        monkeypatch.setattr(tokenize, "_SENTENCES_PER_PASS", passes)
        for tok in (ClipTokenizer(), get_tokenizer()):  # cold caches, then warm
            ids, counts = tok.encode_sentences(texts)
            assert ids.dtype == "int32" and counts.tolist() == [len(w) for w in want]
            assert ids.tolist() == [i for w in want for i in w]
    ids, counts = get_tokenizer().encode_sentences([])
    assert len(ids) == 0 and len(counts) == 0


def test_local_caption_agrees_with_encode_caption():
    from caption_debias.text import tokenize

    tok = get_tokenizer()
    texts = (
        CAPTIONS
        + EDGE_CASES
        + [
            "No space after it.There is more. \u201cQuoted\u201d text \u2014 with dashes.",
            "  Leading and trailing.  Two sentences.\xa0",
            "Fish &amp; chips. Caf\u00e9 au lait.",
        ]
        + [" ".join(_local_texts(4, seed=s)) for s in range(150)]
        + [" ".join(_random_texts(3, seed=s)) for s in range(50)]
    )
    local = 0
    for text, spans, ids, n in _encoded(tok, texts):
        plan = tok.local_caption(text, spans)
        if not plan.batched:  # needs ftfy
            assert tokenize._PLAIN_TYPOGRAPHIC.fullmatch(text) is None
            continue
        local += 1
        got, counts = tok.encode_sentences([text[s:e] for s, e in spans])
        assert got.tolist() == [i for x in ids for i in x] and counts.tolist() == list(map(len, ids))
        assert (int(counts.sum()) + 2 if plan.tiled else plan.num_tokens) == n, text
    assert local > 150


# sentences that need ftfy's judgement: mojibake, entities, Latin-1 and other letters, curly quotes, emoji
_FTFY_PIECES = [
    "Caf\u00e9 au lait.",
    "The M&Ms jar.",
    "Fish &amp; chips.",
    "Salt & pepper.",
    "caf\u00c3\u00a9 is bad.",
    "\u00c3 la mode.",
    "\u00c2 quote.",
    "It\u2019s \u201cfine\u201d.",
    "\u0391\u03a3 \u039f\u0394\u039f\u03a3.",
    "\u041f\u0420\u0418\u0412\u0415\u0422 \u043c\u0438\u0440.",
    "\u0412\u00b0\u0413 x.",
    "emoji \U0001f600\U0001f389 here.",
    "\u00bd cup.",
    "na\u00efve fa\u00e7ade.",
    "\u00e0 la carte.",
    "\u2026 and so on.",
    "x\u00a0y.",
    "\uff21 wide.",
    "\ufb01 lig.",
    "e\u0301 acute.",
    "\u1100\u1161 jamo.",
    "<b>bold</b> &lt;.",
    "\u00d7\u00b2 sq.",
    "\u00e2\u20ac\u0153quoted\u00e2\u20ac\u009d.",
    "\u00d8\u00b9\u00d8\u00b1 ar.",
    "\u00c9COLE.",
    "\u00dcBER \u00c4RGER.",
    "\u00a3 price \u20ac.",
    "A\u00b0 deg.",
    "\u0152 oe.",
    "tab\there.",
    "a &#39; b.",
    "Plain words here.",
    "\u0130stanbul.",
    "\u00df strasse.",
    "\u4e2d\u6587 \u65e5\u672c\u8a9e.",
    "\u00e2\u20ac\u2122s.",
    "\u00c3\u00a9t\u00c3\u00a9.",
    "\u00ef\u00bb\u00bf bom.",
    "&eacute;t&eacute;.",
    "&amp;eacute;.",
    "\u00e9\u00e9\u00e9 \u00c3",
    "\u00a0\u00c3 \u00a0",
]


def _ftfy_captions(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    seps = [" ", "  ", "\n", " \n ", "\xa0", "\t", "", "\u2003"]
    out = []
    for _ in range(n):
        text = "".join(rng.choice(_FTFY_PIECES) + rng.choice(seps) for _ in range(rng.randint(1, 5)))
        out.append(text.strip(rng.choice(["", " "])))
    return out


def test_encode_caption_matches_open_clip_on_ftfy_captions(reference):
    """Captions needing ftfy, one pass or two (tokenize._ftfy_free), against open_clip sentence by sentence and whole."""
    from caption_debias.text import tokenize

    texts = _ftfy_captions(600, seed=11) + [" ".join(_random_texts(3, seed=s)) for s in range(60)]
    free = 0
    for tok in (ClipTokenizer(), get_tokenizer()):  # cold caches, then warm
        for text, spans, ids, n in _encoded(tok, texts):
            assert ids == [reference.encode(text[s:e]) for s, e in spans], text
            assert n == len(reference.encode(text)) + 2, text
            free += tokenize._ftfy_free(text) is not None
    assert 100 < free < 2 * len(texts)  # both paths taken


def test_ftfy_free_is_what_ftfy_gives():
    import html

    import ftfy

    from caption_debias.text import tokenize

    for text in _ftfy_captions(1500, seed=12) + CAPTIONS + EDGE_CASES:
        got = tokenize._ftfy_free(text)
        if got is not None:
            assert got == html.unescape(html.unescape(ftfy.fix_text(text))), text
            for piece in text.split():
                assert tokenize._uncurl(piece) == html.unescape(html.unescape(ftfy.fix_text(piece))), piece


def test_maybe_bad_never_misses_what_is_bad_flags():
    """_maybe_bad relies on two facts about ftfy's BADNESS_RE (checked here on the installed ftfy):
    every top-level branch has a mandatory character or class matching no ASCII character, and
    no match is longer than 7 characters."""
    import re
    import re._constants as C
    import re._parser as P

    from ftfy.badness import BADNESS_RE, is_bad

    from caption_debias.text import tokenize

    parsed = P.parse(BADNESS_RE.pattern, BADNESS_RE.flags)
    assert parsed.getwidth()[1] <= 7 and parsed.data[0][0] is C.BRANCH and len(parsed.data) == 1

    def class_matches_ascii(members) -> bool:
        def hit(o: int) -> bool:
            neg = found = False
            for op, av in members:
                if op is C.NEGATE:
                    neg = True
                elif op is C.LITERAL:
                    found = found or av == o
                elif op is C.RANGE:
                    found = found or av[0] <= o <= av[1]
                elif op is C.CATEGORY:
                    found = (
                        found
                        or re.match(
                            {C.CATEGORY_SPACE: r"\s", C.CATEGORY_WORD: r"\w", C.CATEGORY_DIGIT: r"\d"}[av], chr(o)
                        )
                        is not None
                    )
                else:
                    return True  # unknown member: assume the worst
            return found != neg

        return any(hit(o) for o in range(128))

    for branch in parsed.data[0][1][1]:
        assert any(
            (op is C.LITERAL and av >= 128) or (op is C.IN and not class_matches_ascii(av)) for op, av in branch.data
        ), branch
    rng = random.Random(13)
    palette = "abc AZ.,?!\u00c3\u00c2\u00a0\u00e9\u00a9\u00b0\u20ac\u2122\u0152\u00d8\u00d9\u0412\u0413\u0420\u0421\u00b5\u00e0\u00bd\u221a\u00b1\u03b2\u0393"
    for text in _ftfy_captions(500, seed=14) + [
        "".join(rng.choice(palette) for _ in range(rng.randint(0, 60))) for _ in range(3000)
    ]:
        if is_bad(text):
            assert tokenize._maybe_bad(text), text


def test_plain_characters_never_compose():
    """NFC composes nothing in a text of _plain_char characters: none is the second of a canonical pair."""
    import sys as _sys
    import unicodedata

    from caption_debias.text import tokenize

    seconds = set()
    for o in range(_sys.maxunicode + 1):
        d = unicodedata.decomposition(chr(o))
        if d and not d.startswith("<"):
            parts = d.split()
            if len(parts) == 2:
                seconds.add(chr(int(parts[1], 16)))
    seconds.update(chr(o) for o in range(0x1161, 0x1176))  # Hangul vowels and trailing consonants (algorithmic)
    seconds.update(chr(o) for o in range(0x11A8, 0x11C3))
    assert not [c for c in seconds if tokenize._plain_char(c)]


def test_local_caption_gap_checks_on_arbitrary_spans():
    """local_caption's checks of the text around sentences, against their plain definition
    (as in encode_caption), on spans no segmenter would make: text or nothing between
    sentences, text or odd whitespace before the first and after the last."""
    tok = get_tokenizer()
    rng = random.Random(7)
    pieces = ["A dog.", "x", " ", "  ", "\n", "\xa0", "\t", "", "b.", "Cat sat.", "\u2003"]

    def reference(caption, spans):
        if not spans:
            return 0 if not caption.strip() else len(tok.encode(caption)) + 2
        if caption[: spans[0][0]].strip() or caption[spans[-1][1] :].strip():
            return len(tok.encode(caption)) + 2
        for (_, e), (s2, _) in zip(spans, spans[1:]):
            if not caption[e:s2][:1].isspace():
                return len(tok.encode(caption)) + 2
        return 0

    checked = 0
    for _ in range(3000):
        caption = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        cuts = sorted(rng.sample(range(len(caption) + 1), k=min(len(caption) + 1, 2 * rng.randint(0, 4))))
        spans = [(a, b) for a, b in zip(cuts[0::2], cuts[1::2]) if a < b]
        plan = tok.local_caption(caption, spans)
        if not plan.batched:
            continue
        assert (0 if plan.tiled else plan.num_tokens) == reference(caption, spans), (caption, spans)
        checked += 1
    assert checked > 2000
