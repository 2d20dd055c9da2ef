"""CLIP BPE tokenizer, id-for-id identical to open_clip's SimpleTokenizer, without torch.

open_clip's tokenizer module imports torch at import time, and the data tools install
without either, so this module re-implements the same algorithm (ftfy + double
html.unescape + whitespace clean + lowercase, the same split regex, the same BPE merges)
on the same vocabulary file, shipped in caption_debias/assets (OpenAI CLIP's, MIT; see
bpe_simple_vocab_16e6.LICENSE there). Cleaning, splitting and the caches are Python; the
BPE merges of a word not seen before run in Hugging Face `tokenizers` (Rust), built at
run time from that file.
"""

from __future__ import annotations

import hashlib
import html
import itertools
import re as _stdre
import unicodedata
import zlib
from functools import lru_cache
from importlib import resources
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import regex
from tokenizers.models import BPE

from caption_debias.errors import UserError
from caption_debias.text.arrays import int_values

VOCAB_FILE = "bpe_simple_vocab_16e6.txt.gz"
_MAX_CACHED_CHUNKS = 1_000_000  # the chunk cache: ~100 MB at most; cleared when full
SPECIAL_TOKENS = ("<start_of_text>", "<end_of_text>")

# Printable ASCII and plain whitespace without '&', plus curly quotes, dashes and no-break
# spaces: ftfy's only change there is uncurl_quotes (ftfy.chardata SINGLE_QUOTE_RE /
# DOUBLE_QUOTE_RE), with no Latin-1 letters for fix_encoding to undo, and html.unescape
# changes nothing. The tests compare this with ftfy on random text.
_PLAIN_TYPOGRAPHIC = _stdre.compile(r"[\x20-\x25\x27-\x7e\t\n\r\u02bc\u2018-\u201f\u2013\u2014\xa0]*")
_PLAIN_ASCII = _stdre.compile(r"[\x20-\x25\x27-\x7e\t\n\r]*")  # the same on ASCII text, where this class is faster
_UNCURL_PAIRS = (*((c, "'") for c in "\u02bc\u2018\u2019\u201a\u201b"), *((c, '"') for c in "\u201c\u201d\u201e\u201f"))
_UNCURL_CHARS = frozenset(c for c, _ in _UNCURL_PAIRS)


def _uncurl(text: str) -> str:
    """ftfy's uncurl_quotes; str.replace per quote, since str.translate looks up every character."""
    for c, r in _UNCURL_PAIRS:
        if c in text:
            text = text.replace(c, r)
    return text


_SENTENCES_PER_PASS = 16384  # encode_sentences: texts per Arrow pass
# An '&' that starts neither an HTML entity of ftfy's (chardata.HTML_ENTITY_RE: '&#?[0-9A-Za-z]{1,24};')
# nor a character reference of html.unescape (every name in html.entities.html5 starts with an
# ASCII letter; numeric ones with '#') leaves both unchanged.
_ENTITY_START = _stdre.compile(r"&[#0-9A-Za-z]")
# Conjoining Hangul jamo: letters (Lo) that NFC composes with the letter before them.
_JAMO = ((0x1100, 0x11FF), (0xA960, 0xA97F), (0xD7B0, 0xD7FF))
_CHAR_IS_PLAIN: dict[str, bool] = {}  # character -> _plain_char(character)
_NON_ASCII_RUN = _stdre.compile(r"[^\x00-\x7f]+")


def _maybe_bad(text: str) -> bool:
    """False only where ftfy.badness.is_bad(text) is False, at a fraction of its cost on
    mostly-ASCII text (is_bad searches a 37-branch regex at every position). Every branch of BADNESS_RE holds a character or class that matches no
    ASCII character, and no match is longer than 7 characters (both tested on the installed
    ftfy), so every match lies within 8 characters of a run of non-ASCII characters; the stretches are searched
    joined by spaces, which can only add matches (so can the anchored '^[ÃÂ][ ]' branch at
    the start of a stretch that is not the text's)."""
    if text.isascii():
        return False
    from ftfy.badness import is_bad

    stretches: list[list[int]] = []  # [start, end) within 8 characters of a run of non-ASCII ones, merged
    for m in _NON_ASCII_RUN.finditer(text):
        start = m.start() - 8
        if stretches and start <= stretches[-1][1]:
            stretches[-1][1] = m.end() + 8
        else:
            stretches.append([max(start, 0), m.end() + 8])
    return is_bad(" ".join([text[a:b] for a, b in stretches]))


def _plain_char(ch: str) -> bool:
    """Whether every step of ftfy.fix_text but fix_encoding (which only acts on text that
    ftfy.badness.is_bad flags) leaves `ch` alone wherever it stands, or, for curly quotes,
    only uncurls it (_uncurl): the steps that act on single characters (C1 controls,
    ligatures, width, uncurl, line breaks, surrogates, control characters) through a
    table or one-character pattern, checked on `ch` itself; the others need characters
    excluded here (ESC for terminal escapes, '&' handled by the caller for HTML); NFC
    changes nothing in a text of characters that NFC leaves alone and that never come
    second in a canonical composition (no marks, no conjoining jamo; tested over all of
    Unicode). 'Ã' and 'Â' are excluded because one badness pattern is anchored ('^[ÃÂ][ ]'),
    so a sentence could look bad where the whole caption does not."""
    if ch in "\t\n ":
        return True
    if ch in _UNCURL_CHARS:
        return True
    cat = unicodedata.category(ch)
    if cat[0] in "MC" or cat in ("Zl", "Zp") or ch in "&\u00c3\u00c2" or unicodedata.combining(ch):
        return False
    o = ord(ch)
    if any(a <= o <= b for a, b in _JAMO) or unicodedata.normalize("NFC", ch) != ch:
        return False
    from ftfy import fixes

    return all(
        f(ch) == ch
        for f in (
            fixes.unescape_html,
            fixes.fix_c1_controls,
            fixes.fix_latin_ligatures,
            fixes.fix_character_width,
            fixes.uncurl_quotes,
            fixes.fix_line_breaks,
            fixes.fix_surrogates,
            fixes.remove_terminal_escapes,
            fixes.remove_control_chars,
        )
    )


def _ftfy_free(text: str) -> str | None:
    """`text` as ftfy.fix_text and the double html.unescape leave it, when that provably
    equals _uncurl(text), on the whole text and on every whitespace-delimited
    piece of it alike (so on each sentence); else None (the text needs ftfy itself).

    Every character passes _plain_char; no '&' starts an entity; and ftfy.badness.is_bad
    flags neither the text nor its uncurled form (_maybe_bad). is_bad is one regex search whose only
    anchored branch needs 'Ã' or 'Â', so a piece (or one of fix_text's lines) it does not
    flag in the whole is not flagged either, and fix_encoding leaves all of them alone.
    All other steps then act on single characters, so ftfy's fixed point is the uncurled
    text, reached in the same way on the whole and on the pieces.
    """
    plain = _CHAR_IS_PLAIN
    for ch in set(text):
        ok = plain.get(ch)
        if ok is None:
            ok = plain[ch] = _plain_char(ch)
        if not ok:
            return None
    if "&" in text and _ENTITY_START.search(text) is not None:
        return None
    if _maybe_bad(text):
        return None
    uncurled = _uncurl(text)
    if uncurled != text and _maybe_bad(uncurled):
        return None
    return uncurled


def _simply_cleaned(text: str) -> bool:
    """Whether cleaning `text` at most uncurls quotes and lower-casing it changes only A-Z:
    what encode_sentences handles in numpy."""
    return (_PLAIN_ASCII if text.isascii() else _PLAIN_TYPOGRAPHIC).fullmatch(text) is not None


def _locally_cleaned(text: str) -> str | None:
    """`text` as ftfy.fix_text and the double html.unescape leave it when they act on each
    character alone, so on the whole text and on every whitespace-separated piece alike;
    None when it needs ftfy itself."""
    if _simply_cleaned(text):
        return text if text.isascii() else _uncurl(text)
    return _ftfy_free(text)


def _sentences_tile(caption: str, spans: list[tuple[int, int]]) -> bool:
    """Whether only whitespace lies before the first sentence and after the last, and
    whitespace follows every sentence but the last: pre-tokens never cross whitespace, so
    the caption's ids are then its sentences' ids end to end (checked without slicing)."""
    if not spans:
        return caption.isspace() or not caption
    it = iter(spans)
    s, e = next(it)
    if s and not caption[:s].isspace():
        return False
    for s, e2 in it:
        if not (e < s and caption[e : e + 1].isspace()):
            return False
        e = e2
    return e >= len(caption) or caption[e:].isspace()


class LocalCaption(NamedTuple):
    """How a chunk encoder tokenizes one caption (`ClipTokenizer.local_caption`)."""

    batched: bool  # its sentences' ids come from encode_sentences; else tokenize it with encode_caption
    tiled: bool = False  # batched, and its sentences tile it: its length is theirs + 2
    num_tokens: int = 0  # batched and not tiled: its length in tokens, start and end included


NEEDS_FTFY = LocalCaption(batched=False)
TILED = LocalCaption(batched=True, tiled=True)


def _bytes_to_unicode() -> dict[int, str]:
    # Same reversible byte -> printable-character table as OpenAI CLIP / open_clip.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def find_vocab_path() -> str:
    """The shipped CLIP BPE merges file (caption_debias/assets)."""
    path = resources.files("caption_debias").joinpath("assets").joinpath(VOCAB_FILE)
    if not path.is_file():
        raise UserError(f"caption_debias/assets/{VOCAB_FILE} is missing: reinstall the package")
    return str(path)


class ClipTokenizer:
    """CLIP BPE ids without start/end tokens; `encode_batch` caches whole words."""

    def __init__(self, vocab_path: str | None = None):
        self.vocab_path = vocab_path or find_vocab_path()
        with open(self.vocab_path, "rb") as f:
            raw = zlib.decompress(f.read(), 16 + zlib.MAX_WBITS)  # gunzip in one call
        self._vocab_sha256 = hashlib.sha256(raw).hexdigest()
        lines = raw.decode("utf-8").split("\n")[1 : 49152 - 256 - 2 + 1]
        # each line is "first second": one flat split and pairs (as m.split() gives), not a split per line
        words = " ".join(lines).split(" ")
        if len(words) == 2 * len(lines) and all(words):
            firsts, seconds = words[0::2], words[1::2]
            merges = list(zip(firsts, seconds))
            merged = list(map(str.__add__, firsts, seconds))  # "".join(m) for each m, in one C loop
        else:
            merges = [(a, b) for a, b in map(str.split, lines)]  # BPE takes pairs only
            merged = ["".join(m) for m in merges]
        self._byte_table = _bytes_to_unicode()
        vocab = list(self._byte_table.values())
        vocab = vocab + [v + "</w>" for v in vocab]
        vocab += merged
        vocab.extend(SPECIAL_TOKENS)
        encoder = dict(zip(vocab, range(len(vocab))))  # the last index of a repeated token wins, as in open_clip
        # open_clip's merges as CLIPTokenizerFast configures them ("</w>" on a word's last
        # symbol, no prefix on the others); only `tokenize` of one word is ever called, which
        # never uses the tokenizers thread pool, so prepare's forked workers stay single-threaded.
        # No cache there: the word cache below already holds every word once.
        self._bpe_model = BPE(
            vocab=encoder, merges=merges, end_of_word_suffix="</w>", continuing_subword_prefix="", cache_capacity=0
        )
        self.sot_id = encoder[SPECIAL_TOKENS[0]]
        self.eot_id = encoder[SPECIAL_TOKENS[1]]
        self.pad_id = 0
        self.vocab_size = len(encoder)
        self.pat = regex.compile(
            "|".join(SPECIAL_TOKENS) + r"""|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
            regex.IGNORECASE,
        )
        # pre-token (as the regex returns it) -> BPE ids; special tokens map to themselves
        # exactly as in open_clip (its BPE cache is seeded with them).
        self._word_ids: dict[str, tuple[int, ...]] = {t: (encoder[t],) for t in SPECIAL_TOKENS}
        self._chunk_ids: dict[str, tuple[int, ...]] = {}  # space-free chunk of cleaned text -> ids

    # -- cleaning -----------------------------------------------------------------------
    @staticmethod
    def clean(text: str) -> str:
        """open_clip's 'lower' clean: ftfy, html.unescape twice, collapse whitespace, lowercase."""
        cleaned = _locally_cleaned(text)
        if cleaned is None:
            import ftfy  # imported on first need: most captions never need it

            cleaned = html.unescape(html.unescape(ftfy.fix_text(text)))
        return " ".join(cleaned.split()).lower()

    # -- BPE ----------------------------------------------------------------------------
    def _word(self, piece: str) -> tuple[int, ...]:
        ids = self._word_ids.get(piece)
        if ids is None:
            mapped = "".join(self._byte_table[b] for b in piece.encode("utf-8"))
            ids = tuple(t.id for t in self._bpe_model.tokenize(mapped))
            self._word_ids[piece] = ids
        return ids

    def _chunk(self, chunk: str) -> tuple[int, ...]:
        ids: list[int] = []
        cache = self._word_ids
        for piece in self.pat.findall(chunk):
            got = cache.get(piece)
            ids.extend(got if got is not None else self._word(piece))
        out = tuple(ids)
        if len(self._chunk_ids) >= _MAX_CACHED_CHUNKS:  # bound memory on endless vocabularies
            self._chunk_ids.clear()
        self._chunk_ids[chunk] = out
        return out

    # -- public -------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """BPE ids of one text, without start/end tokens.

        The split pattern never matches whitespace, so the ids of a cleaned text are the
        ids of its space-separated chunks put end to end; chunks ("sky.", "it's") repeat
        so much across captions that a chunk cache skips the regex almost always.
        """
        return self._encode_cleaned(self.clean(text))

    def _encode_cleaned(self, cleaned: str) -> list[int]:
        return self._encode_chunks(cleaned.split(" ")) if cleaned else []

    def _encode_chunks(self, chunks: list[str]) -> list[int]:
        ids: list[int] = []
        try:  # all chunks cached: the usual case once warm (a KeyError costs less than a None check per chunk)
            for part in map(self._chunk_ids.__getitem__, chunks):
                ids += part
        except KeyError:  # fill the misses
            ids = list(itertools.chain.from_iterable(self._chunk_ids.get(c) or self._chunk(c) for c in chunks))
        return ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """BPE ids of many texts (same ids as `encode`, sharing its caches)."""
        return [self.encode(t) for t in texts]

    def encode_caption(self, caption: str, spans: list[tuple[int, int]]) -> tuple[list[list[int]], int]:
        """(ids of each sentence caption[s:e], caption length in tokens with start and end).

        When cleaning is local to each character and the sentences tile the caption, the
        caption's ids are its sentences' ids end to end and it is not tokenized a second time.
        """
        text = _locally_cleaned(caption)
        if text is not None:
            # clean the sentences as slices of the caption's cleaned text (_uncurl maps
            # characters one to one, so the spans still hold; lower-casing never makes or
            # removes whitespace)
            encode_chunks = self._encode_chunks
            sentence_ids = [encode_chunks(text[s:e].lower().split()) for s, e in spans]
            if _sentences_tile(caption, spans):
                return sentence_ids, sum(map(len, sentence_ids)) + 2
            return sentence_ids, len(self._encode_cleaned(" ".join(text.split()).lower())) + 2
        sentence_ids = [self.encode(caption[s:e]) for s, e in spans]
        return sentence_ids, len(self.encode(caption)) + 2

    def local_caption(self, caption: str, spans: list[tuple[int, int]]) -> LocalCaption:
        """How a chunk encoder tokenizes `caption` (split into `spans`): NEEDS_FTFY (use
        `encode_caption`), TILED (`encode_sentences` gives its sentences' ids, and its length
        is theirs + 2), or batched with its length counted here (the caption tokenized whole,
        as `encode_caption` does too)."""
        if not _simply_cleaned(caption):
            return NEEDS_FTFY
        if _sentences_tile(caption, spans):
            return TILED
        return LocalCaption(batched=True, num_tokens=len(self.encode(caption)) + 2)

    def encode_sentences(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Ids of many texts whose cleaning is local to each character (sentences of captions
        that `local_caption` batches): all ids end to end (int32), and how many
        each text has (int64). The same ids as `encode` of each text, sharing its caches.

        Arrow splits the texts on whitespace and dictionary-encodes the chunks, so only
        distinct chunks ("sky.", "it's") touch Python and the chunk cache, and gathers
        their ids (`take`). Texts go _SENTENCES_PER_PASS at a time, which bounds the
        temporary arrays.
        """
        ids, counts = [], []
        for i in range(0, len(sentences), _SENTENCES_PER_PASS):
            a, b = self._encode_local(sentences[i : i + _SENTENCES_PER_PASS])
            ids.append(a)
            counts.append(b)
        if len(ids) == 1:
            return ids[0], counts[0]
        return (np.concatenate(ids), np.concatenate(counts)) if ids else (np.zeros(0, np.int32), np.zeros(0, np.int64))

    def _encode_local(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        n = len(sentences)
        text = "\0".join(sentences)  # NUL is never in such text: it marks where each one ends
        if not text.isascii():
            text = _uncurl(text)
        data = np.frombuffer(text.encode("utf-8"), np.uint8)
        del text
        # lower-case: only A-Z change (multi-byte characters hold no ASCII bytes, and the
        # non-ASCII characters such text can hold are their own lower case)
        data = data | (((data - np.uint8(65)) < 26).view(np.uint8) << 5)
        offsets = np.empty(n + 1, np.int64)
        offsets[0], offsets[-1] = 0, len(data)
        offsets[1:-1] = np.flatnonzero(data == 0)
        data[offsets[1:-1]] = 32  # each NUL becomes a space at the start of the next text
        # Arrow's split gives an empty chunk at a leading or trailing space (no ids); on these
        # characters its whitespace is Python's (ASCII whitespace, the no-break space; tested)
        split = pc.utf8_split_whitespace(pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data)))
        del data, offsets
        enc = pc.dictionary_encode(split.values)
        cache, fill = self._chunk_ids, self._chunk
        distinct = [cache.get(c) or (fill(c) if c else ()) for c in enc.dictionary.to_pylist()]
        lengths = np.fromiter(map(len, distinct), np.int64, len(distinct))
        bounds = np.zeros(len(distinct) + 1, np.int64)
        np.cumsum(lengths, out=bounds[1:])
        values = np.fromiter(itertools.chain.from_iterable(distinct), np.int32, int(bounds[-1]))
        del distinct, lengths
        per_chunk = pa.LargeListArray.from_arrays(
            pa.Array.from_buffers(pa.int64(), len(bounds), [None, pa.py_buffer(bounds)]),
            pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(values)]),
        )
        taken = per_chunk.take(enc.indices)  # every chunk's ids, in order
        del per_chunk, enc
        id_bounds = int_values(taken.offsets)  # ids before each chunk
        chunk_bounds = int_values(split.offsets)  # chunks before each text
        return int_values(taken.values), np.diff(id_bounds[chunk_bounds])

    def num_tokens(self, text: str) -> int:
        """Length of text in tokens including start and end, untruncated."""
        return len(self.encode(text)) + 2

    def describe(self) -> dict:
        return {
            "name": "clip-bpe",
            "implementation": "caption_debias.text.tokenize (open_clip SimpleTokenizer algorithm, clean='lower'; BPE merges in HF tokenizers)",
            "vocab_file": VOCAB_FILE,
            "vocab_sha256": self._vocab_sha256,
            "vocab_size": self.vocab_size,
            "sot_id": self.sot_id,
            "eot_id": self.eot_id,
            "pad_id": self.pad_id,
        }


@lru_cache(maxsize=1)
def get_tokenizer() -> ClipTokenizer:
    """The shared tokenizer (built once: it loads 49k merges)."""
    return ClipTokenizer()
