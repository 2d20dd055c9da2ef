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
        assert all(x == tok.pad_id for x in row[len(ids):])


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


def test_encode_caption_counts_like_the_whole_caption():
    from caption_debias.text.segment import get_segmenter

    tok, seg = get_tokenizer(), get_segmenter("fast")
    texts = CAPTIONS + EDGE_CASES + [
        "Trailing marks at the end of the sun.. A new line",
        "No space after it.There is more. “Quoted” text — with dashes.",
        "Fish &amp; chips. Café au lait. Ａ wide letter.",
    ] + [" ".join(_random_texts(3, seed=s)) for s in range(100)]
    for text in texts:
        spans = seg.spans(text)
        ids, n = tok.encode_caption(text, spans)
        assert ids == [tok.encode(text[s:e]) for s, e in spans]
        assert n == len(tok.encode(text)) + 2, text


def test_fresh_tokenizer_on_unseen_words(reference):
    """Every word below reaches the Rust BPE (a fresh instance has empty caches)."""
    texts = [
        "é" * 300, "中文" * 150, "ab" * 300, "l" * 1000, "😀" * 90, "x" + "ÿ" * 257,
        "".join(chr(c) for c in range(0xa1, 0x17f)),  # every Latin-1/Extended-A letter in one word
        "caf\u00e9 cafe\u0301 \u212bngstr\u00f6m \u0130stanbul \u017fs 'ſ 'S 'ſt",  # NFC/NFD, dotted I, long s
        ".<start_of_text>x <start_of_text>. a<end_of_text>b <start_of_text><end_of_text>",
        "tab\tand\nnew\r\nlines\x0bvertical\x0cfeed \u2003em-space",
        "&nbsp; &#32; &#9;", "&amp;nbsp;",  # empty after cleaning
    ]
    tok = ClipTokenizer()
    assert [tok.encode(t) for t in texts] == [reference.encode(t) for t in texts]
    assert tok.encode("&nbsp; &#32; &#9;") == []


def test_bpe_merges_match_open_clip_on_every_vocabulary_word(reference):
    """The Rust BPE gives open_clip's merges for every word the merges can build."""
    tok = get_tokenizer()
    words = {"".join(m).removesuffix("</w>") for m in reference.bpe_ranks}
    for word in sorted(words):
        assert [t.id for t in tok._bpe_model.tokenize(word)] == [reference.encoder[t] for t in reference.bpe(word).split(" ")], word


# every character a text can hold when its cleaning is local (tokenize._PLAIN_TYPOGRAPHIC)
_LOCAL_CHARS = "".join(
    chr(c) for c in [*range(0x20, 0x7F), 0x09, 0x0A, 0x0D, 0xA0, 0x2BC, *range(0x2018, 0x2020), 0x2013, 0x2014] if c != 0x26
)


def _local_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    pools = (_LOCAL_CHARS, " \t\n\r\xa0", "abcdefghij ABC'", "\u2018\u2019\u201c\u201d\u02bc\u201a\u201b\u201e\u201f\u2013\u2014")
    return ["".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(0, 80))) for _ in range(n)]


def test_encode_sentences_matches_open_clip(reference, monkeypatch):
    from caption_debias.text import tokenize

    texts = ["", " ", "\xa0", " a ", "\xa0a\xa0 b\tc\r\nd  ", "It\u2019s \u201cx\u201d \u2014 y", "A.B" * 50] + _local_texts(400, seed=5)
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
    from caption_debias.text.segment import get_segmenter

    tok, seg = get_tokenizer(), get_segmenter("fast")
    texts = CAPTIONS + EDGE_CASES + [
        "No space after it.There is more. \u201cQuoted\u201d text \u2014 with dashes.",
        "  Leading and trailing.  Two sentences.\xa0",
        "Fish &amp; chips. Caf\u00e9 au lait.",
    ] + [" ".join(_local_texts(4, seed=s)) for s in range(150)] + [" ".join(_random_texts(3, seed=s)) for s in range(50)]
    local = 0
    for text in texts:
        spans = seg.spans(text)
        ids, n = tok.encode_caption(text, spans)
        plan = tok.local_caption(text, spans)
        if plan is None:  # needs ftfy
            assert tokenize._PLAIN_TYPOGRAPHIC.fullmatch(text) is None
            continue
        local += 1
        got, counts = tok.encode_sentences([text[s:e] for s, e in spans])
        assert got.tolist() == [i for x in ids for i in x] and counts.tolist() == list(map(len, ids))
        assert (int(counts.sum()) + 2 if plan == 0 else plan) == n, text
    assert local > 150
