"""Summary detection: which sentences of a long caption summarise the whole picture.

Scores are position-free: a sentence's score depends only on its own words and on the
set of the other sentences (shuffling the sentences permutes the scores and nothing
else). The score is a linear model over sparse features (opening words, words of the
sentence, and how its nouns relate to the other sentences: introduced with "a"/"an" here
and referred back to with "the"/"its" there), squashed to [0, 1]. The weights were
fitted offline (experiments/summary_train.py) as a conditional logit that picks
the original opening sentence of real long captions, and ship as JSON in
caption_debias/assets/summary_model.json: nothing is downloaded.

Two implementations, as a filter and its batch form:
- `sentence_features` is the specification, and `summary_scores` / `summary_mask` score
  and flag one caption from it in plain Python;
- `summary_scores_flat` / `summary_mask_batch` (what prepare runs) compute the same for a
  whole chunk of captions with numpy, in small steps (`_BatchScorer`); the tests hold them
  to the specification.

`summary_mask` turns scores into flags for the opening and the closing summary and may
use position.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from caption_debias.errors import UserError
from caption_debias.text.arrays import int_values

SUMMARY_MODES = ("detect", "first", "none")
MODEL_ASSET = "summary_model.json"

_WORD = re.compile(r"[a-z]+(?:['\u2019-][a-z]+)*")
_INDEFINITE = frozenset("a an some several two three four five six many various numerous another".split())
_DEFINITE = frozenset("the its their his her this these those that both each".split())
_STOP = frozenset(
    "a an the and or of in on at to with by for from is are was were be been being it its this that these those "
    "there their they them he she his her as into onto over under near which who while has have had can "
    "also some several many few two three four five one other another each both very its it's appears "
    "appear seems seem can could would".split()
)
_DET_KIND = {**{w: 1 for w in _INDEFINITE}, **{w: 2 for w in _DEFINITE}}  # 1 indefinite, 2 definite
_CLOSING = re.compile(
    r"^(overall|in summary|in conclusion|altogether|all in all|in essence|the overall|the general|"
    r"the (image|scene|photo|photograph|picture|composition|setting)( as a whole)? "
    r"(conveys|evokes|exudes|captures|creates|gives|has|is filled with|radiates|suggests|portrays|"
    r"presents|offers|reflects|showcases|depicts a sense)|"
    r"th(is|e) (image|scene|photo|photograph|picture)('s)? (overall|mood|atmosphere|ambiance|tone))\b"
)
_NUMERIC = ("introduces", "refers_back", "len_ratio", "log_len", "closing_phrase")
_ZEROS = itertools.repeat(0.0)


# --- the specification ---------------------------------------------------------------------


def _words(sentence: str) -> list[str]:
    """A sentence's words: lower-cased runs of a-z joined by single apostrophes or hyphens."""
    low = sentence.lower()
    return _WORD.findall(low.replace("\u2019", "'") if "\u2019" in low else low)


def _is_content(word: str) -> bool:
    return len(word) > 2 and word not in _STOP


def _determined(words: list[str]) -> tuple[set[str], set[str]]:
    """Content words met within 3 words after an indefinite / a definite determiner
    (a later determiner ends the window)."""
    indef: set[str] = set()
    defin: set[str] = set()
    at = [i for i, w in enumerate(words) if w in _DET_KIND]
    at.append(len(words))
    for a, b in zip(at, at[1:]):
        target = indef if _DET_KIND[words[a]] == 1 else defin
        target.update(w for w in words[a + 1 : min(b, a + 4)] if _is_content(w))
    return indef, defin


def is_closing_summary(sentence: str) -> bool:
    """'Overall, ...', 'The overall atmosphere is ...', 'The image conveys ...'."""
    return _CLOSING.match(sentence.strip().lower()) is not None


def sentence_features(sentences: list[str]) -> list[dict[str, float]]:
    """Sparse features of every sentence, from its words and its relation to the others.

    w:WORD (the sentence has WORD), f:WORD / f2:WORD WORD (its opening words),
    introduces (log count of entities it names after "a"/"an"/"two"... that another
    sentence names too), refers_back (log count of entities it names after "the"/"its"...
    that another sentence introduces with an indefinite), len_ratio (length over the
    caption's mean sentence length), log_len, closing_phrase ("Overall, ...").
    """
    words = [_words(s) for s in sentences]
    word_sets = [set(ws) for ws in words]
    dets = [_determined(ws) for ws in words]
    df = Counter(itertools.chain.from_iterable(word_sets))  # sentences holding each word
    indef_df = Counter(itertools.chain.from_iterable(indef for indef, _ in dets))  # ... after an indefinite
    n = len(sentences)
    lengths = [len(ws) for ws in words]
    mean_len = sum(lengths) / n if n else 1.0
    feats = []
    for i in range(n):
        ws = words[i]
        f: dict[str, float] = {"w:" + w: 1.0 for w in word_sets[i]}
        if ws:
            f["f:" + ws[0]] = 1.0
            f["f2:" + " ".join(ws[:2])] = 1.0
        if n > 1:
            indef, defin = dets[i]
            f["introduces"] = math.log1p(sum(1 for w in indef if df.get(w, 0) > 1))
            f["refers_back"] = math.log1p(sum(1 for w in defin if indef_df.get(w, 0) - (w in indef) > 0))
        f["len_ratio"] = lengths[i] / mean_len if mean_len else 0.0
        f["log_len"] = math.log1p(lengths[i])
        f["closing_phrase"] = 1.0 if is_closing_summary(sentences[i]) else 0.0
        feats.append(f)
    return feats


def raw_scores(sentences: list[str], weights: dict[str, float] | None = None) -> list[float]:
    """Linear scores before squashing (higher = more summary-like); `weights` for training tools."""
    weights = _model()["weights"] if weights is None else weights
    return [sum(weights.get(k, 0.0) * v for k, v in f.items()) for f in sentence_features(sentences)]


def _squash(z: float) -> float:
    c = _model()["calibration"]
    t = c["scale"] * z + c["offset"]
    return 1.0 / (1.0 + math.exp(-t)) if t > -60 else 0.0


def summary_scores(sentences: list[str]) -> list[float]:
    """Score in [0, 1] per sentence for how much it summarises the caption (position-free)."""
    return [_squash(z) for z in raw_scores(sentences)]


def _check_mode(mode: str) -> None:
    if mode not in SUMMARY_MODES:
        raise UserError(f"unknown summary mode {mode!r}: choose one of {', '.join(SUMMARY_MODES)}")


def summary_mask(sentences: list[str], scores: list[float], mode: str = "detect") -> list[bool]:
    """Flags for the opening and closing summaries under `mode` (see SUMMARY_MODES)."""
    _check_mode(mode)
    n = len(sentences)
    if mode == "none":
        return [False] * n
    if mode == "first":
        return [i == 0 for i in range(n)]
    mask = [False] * n
    if n == 0:
        return mask
    # Long captions open with a summary almost always; the first sentence is left
    # unflagged only when it reads as a detail and another sentence clearly wins.
    th = _model()["mask"]
    mask[0] = not (scores[0] < th["opening_min"] and max(scores) - scores[0] > th["opening_margin"])
    if n >= 3 and is_closing_summary(sentences[-1]):
        mask[-1] = True
    return mask


def describe(mode: str) -> dict:
    if mode != "detect":
        return {"mode": mode}
    m = _model()
    return {
        "mode": mode,
        "method": m["method"],
        "model": MODEL_ASSET,
        "version": m["version"],
        "trained_on": m["trained_on"],
    }


@lru_cache(maxsize=1)
def _model() -> dict:
    try:
        text = resources.files("caption_debias").joinpath("assets").joinpath(MODEL_ASSET).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"caption_debias/assets/{MODEL_ASSET} is missing: reinstall the package") from None
    return json.loads(text)


# --- the batch implementation (prepare's path) -----------------------------------------------

_BATCH = 2048  # captions per numpy pass: bounds the pass's arrays (a 20,000-caption shard holds ~3M words)

# The batch runs is_closing_summary only where the first two words allow a match: the first
# word's code, the bit its second word needs (by code), and the bits a word gives.
_CLOSING_CODE = {"overall": 1, "altogether": 1, "in": 2, "all": 3, "the": 4, "this": 4}  # 1: any second word
_CLOSING_NEED = np.array([0, 0, 1, 2, 4], np.int8)  # in summary/conclusion/essence; all in all; the/this NOUN...
_CLOSING_SECOND = (
    ("summary", "conclusion", "essence"),
    ("in",),
    ("overall", "general", "image", "scene", "photo", "picture", "composition", "setting"),
)  # prefixes ("photo" covers "photograph", "image's")


def _closing_bits(word: str) -> int:
    return sum(1 << i for i, prefixes in enumerate(_CLOSING_SECOND) if word.startswith(prefixes))


# The only characters besides A-Z whose lowercase (str.lower) holds a-z ("İ" -> "i̇", the Kelvin
# sign -> "k"); a test checks this over all of Unicode for the running Python.
_LOWER_TO_ASCII = ("\u0130", "\u212a")


class _Weights:
    """The shipped weights split by feature family, looked up per distinct word."""

    def __init__(self, model: dict):
        w = model["weights"]
        self.word = {k[2:]: v for k, v in w.items() if k.startswith("w:")}
        self.first = {k[2:]: v for k, v in w.items() if k.startswith("f:")}
        self.first2 = {k[3:]: v for k, v in w.items() if k.startswith("f2:")}
        self.num = {k: w.get(k, 0.0) for k in _NUMERIC}
        self.scale = model["calibration"]["scale"]
        self.offset = model["calibration"]["offset"]


class _Vocab(dict):
    """Word -> id, ids handed out on first sight (dict.__getitem__ calls __missing__ from C),
    with per-id arrays: word weight (w:), opening-word weight (f:), one-word opening weight
    (f2: of a one-word sentence), determiner kind (0, 1 indefinite, 2 definite), content
    word (the words _determined keeps), and the closing-phrase prefilter codes. A sentence's
    word weights are added in ascending id, so ids decide the last bits of its score: they
    are handed out in order of first occurrence within each batch and survive across batches."""

    _LIMIT = 1_000_000  # cleared when full: bounds memory on endless vocabularies

    def __init__(self, weights: _Weights):
        super().__init__()
        self.weights = weights
        self.new: list[str] = []
        self._reset_arrays()

    def _reset_arrays(self) -> None:
        self.weight, self.first, self.first2 = np.zeros(0), np.zeros(0), np.zeros(0)
        self.kind = np.zeros(0, np.int8)
        self.content = np.zeros(0, bool)
        self.closing, self.closing_next = np.zeros(0, np.int8), np.zeros(0, np.int8)

    def __missing__(self, word: str) -> int:
        i = self[word] = len(self)
        self.new.append(word)
        return i

    def ids(self, distinct: list[str], n_words: int) -> np.ndarray:
        """Ids of a batch's distinct words, given in order of first occurrence; `n_words`
        (all its words) decides when the vocabulary is cleared."""
        if len(self) + n_words > self._LIMIT:
            self.clear()
            self.new = []
            self._reset_arrays()
        out = np.fromiter(map(self.__getitem__, distinct), np.int64, len(distinct))
        if self.new:  # extend the per-id arrays with this call's new words
            new, self.new = self.new, []
            w, k = self.weights, len(new)
            self.weight = np.concatenate([self.weight, np.fromiter(map(w.word.get, new, _ZEROS), float, k)])
            self.first = np.concatenate([self.first, np.fromiter(map(w.first.get, new, _ZEROS), float, k)])
            self.first2 = np.concatenate([self.first2, np.fromiter(map(w.first2.get, new, _ZEROS), float, k)])
            self.kind = np.concatenate([self.kind, np.fromiter((_DET_KIND.get(x, 0) for x in new), np.int8, k)])
            self.content = np.concatenate([self.content, np.fromiter(map(_is_content, new), bool, k)])
            code = map(_CLOSING_CODE.get, new, itertools.repeat(0))
            self.closing = np.concatenate([self.closing, np.fromiter(code, np.int8, k)])
            self.closing_next = np.concatenate([self.closing_next, np.fromiter(map(_closing_bits, new), np.int8, k)])
        return out

    def first2_pairs(self) -> tuple[np.ndarray, np.ndarray, int]:
        """f2: weights of two-word openings whose words both have ids: sorted keys
        id1 * m + id2, their weights, and m."""
        m = max(len(self), 1)
        pairs = []
        for key, w in self.weights.first2.items():
            a, space, b = key.partition(" ")
            ia, ib = self.get(a), self.get(b)
            if space and ia is not None and ib is not None:
                pairs.append((ia * m + ib, w))
        pairs.sort()
        return np.array([k for k, _ in pairs], np.int64), np.array([w for _, w in pairs], float), m


def _chunk_words(sentences: list[str]) -> tuple[np.ndarray, list[str], np.ndarray]:
    """The words of `_words` for many sentences at once: each word's index into the
    distinct words (in order of first occurrence), the distinct words, and the number of
    words per sentence.

    Found with numpy masks over the UTF-8 bytes of the sentences joined by NUL (a regex per
    sentence costs several times more): a word is a run of ASCII letters and of single "'"
    or "-" bytes between two letters, lowercased, which is exactly what _WORD finds in the
    lowercased sentence (multi-byte characters never hold ASCII bytes, and none but
    _LOWER_TO_ASCII lowercases to any).
    """
    text = "\0".join(sentences)
    if text.count("\0") != len(sentences) - 1:  # a NUL inside a sentence: _words, sentence by sentence
        words = list(map(_words, sentences))
        flat = [w.encode() for w in itertools.chain.from_iterable(words)]
        offsets = np.zeros(len(flat) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, flat), np.int64, len(flat)), out=offsets[1:])
        enc = pc.dictionary_encode(
            pa.LargeStringArray.from_buffers(len(flat), pa.py_buffer(offsets), pa.py_buffer(b"".join(flat)))
        )
        lengths = np.fromiter(map(len, words), np.int64, len(words))
        return _indices(enc), enc.dictionary.to_pylist(), lengths
    if any(c in text for c in _LOWER_TO_ASCII):
        text = "\0".join(map(str.lower, sentences))  # Python's lowercasing, as _words (Arrow's differs for these)
    if "\u2019" in text:
        text = text.replace("\u2019", "'")
    # lone surrogates pass as 3 non-ASCII bytes: not word characters, as for _WORD
    data = np.frombuffer(text.encode("utf-8", "surrogatepass"), np.uint8)
    letter = ((data | 32) - np.uint8(ord("a"))) < 26  # A-Z or a-z ("'" and "-" already have bit 5 set)
    inword = letter.copy()
    inword[1:-1] |= ((data[1:-1] == ord("'")) | (data[1:-1] == ord("-"))) & letter[:-2] & letter[2:]
    # (these forms, not np.diff on int8 and data[inword], are several times faster here)
    padded = np.zeros(len(inword) + 2, bool)
    padded[1:-1] = inword
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    word_start, word_end = edges[0::2], edges[1::2]  # runs open and close in turn
    word_offsets = np.zeros(len(word_start) + 1, np.int64)
    np.cumsum(word_end - word_start, out=word_offsets[1:])
    word_bytes = np.compress(inword, data) | np.uint8(32)
    words = pa.LargeStringArray.from_buffers(len(word_start), pa.py_buffer(word_offsets), pa.py_buffer(word_bytes))
    enc = pc.dictionary_encode(words)
    bounds = np.empty(len(sentences) + 1, np.int64)  # sentence i is the bytes between NULs i-1 and i
    bounds[0], bounds[-1], bounds[1:-1] = -1, len(data), np.flatnonzero(data == 0)
    lengths = np.diff(np.searchsorted(word_start, bounds))
    return _indices(enc), enc.dictionary.to_pylist(), lengths


def _indices(enc: pa.DictionaryArray) -> np.ndarray:
    """The (null-free) indices of a dictionary array as int64 (no pandas: text/arrays.py)."""
    return int_values(enc.indices).astype(np.int64)


def _starts(a: np.ndarray) -> np.ndarray:
    """True where a sorted array's value differs from the one before (and at 0)."""
    out = np.empty(len(a), bool)
    out[:1] = True
    np.not_equal(a[1:], a[:-1], out=out[1:])
    return out


@dataclass
class _Batch:
    """One numpy pass: the words of all its sentences end to end, as ranks of their ids
    among the batch's distinct words (small sort keys, same order as the ids)."""

    rank: np.ndarray  # per word
    rank_id: np.ndarray  # per rank: the word's id
    lengths: np.ndarray  # words per sentence
    per_caption: np.ndarray  # sentences per caption
    sent_start: np.ndarray  # per sentence: its first word
    sent_of_word: np.ndarray
    cap_of_sent: np.ndarray
    word_bits: int  # bits of a rank in the sort key
    local_bits: int  # bits of a sentence's index within its caption

    @classmethod
    def build(cls, ids: np.ndarray, local: np.ndarray, lengths: np.ndarray, per_caption: np.ndarray) -> _Batch:
        by_rank = np.argsort(ids, kind="stable")
        rank = np.empty(len(ids), np.int64)
        rank[by_rank] = np.arange(len(ids))
        word_bits, local_bits = _key_bits(len(ids), per_caption)
        return cls(
            rank=rank[local],
            rank_id=ids[by_rank],
            lengths=lengths,
            per_caption=per_caption,
            sent_start=np.cumsum(lengths) - lengths,
            sent_of_word=np.repeat(np.arange(len(lengths)), lengths),
            cap_of_sent=np.repeat(np.arange(len(per_caption)), per_caption),
            word_bits=word_bits,
            local_bits=local_bits,
        )

    def word_id(self, positions: np.ndarray) -> np.ndarray:
        """Ids of the words at these positions (of all words end to end)."""
        return self.rank_id[self.rank[positions]]


def _key_bits(n_distinct: int, per_caption: np.ndarray) -> tuple[int, int]:
    return (n_distinct - 1).bit_length(), int(per_caption.max() - 1).bit_length()


def _fits_sort_key(n_distinct: int, per_caption: np.ndarray) -> bool:
    """Whether (caption, word rank, sentence in caption, window kind) packs into an int64."""
    word_bits, local_bits = _key_bits(n_distinct, per_caption)
    return (len(per_caption) - 1).bit_length() + word_bits + local_bits + 2 <= 62


def _determiner_windows(b: _Batch, vocab: _Vocab) -> np.ndarray:
    """Per word: 1 / 2 when it is a content word within 3 words after an indefinite / a
    definite determiner of its sentence, cut by the next determiner (as _determined), else 0."""
    kind = vocab.kind[b.rank_id][b.rank]
    pos = np.arange(len(kind))
    last_det = np.maximum.accumulate(np.where(kind > 0, pos, -1)) if len(kind) else pos
    inside = (kind == 0) & vocab.content[b.rank_id][b.rank]
    inside &= (last_det >= b.sent_start[b.sent_of_word]) & (pos - last_det <= 3)
    return np.where(inside, kind[np.maximum(last_det, 0)], 0)


@dataclass
class _Occurrences:
    """Each distinct (caption, word, sentence) once, ordered by caption, word rank, sentence."""

    cap_word: np.ndarray  # caption << word_bits | word rank
    word: np.ndarray  # word rank
    sent: np.ndarray  # sentence (of the whole batch)
    after_indefinite: np.ndarray  # the sentence names the word after an indefinite determiner
    after_definite: np.ndarray


def _occurrences(b: _Batch, window_kind: np.ndarray) -> _Occurrences:
    """One stable sort of every word by (caption, word, sentence, window kind) gives the
    distinct words of each sentence in ascending id, and, word by word within a caption,
    the sentences holding it and those naming it after a determiner."""
    cap_start = np.cumsum(b.per_caption) - b.per_caption
    cap_of_word = b.cap_of_sent[b.sent_of_word]
    sent_in_cap = b.sent_of_word - cap_start[cap_of_word]
    key = (((cap_of_word << b.word_bits) | b.rank) << b.local_bits | sent_in_cap) << 2 | window_kind
    del cap_of_word, sent_in_cap  # per-word temporaries: lower peak memory
    key.sort(kind="stable")
    triple = key >> 2
    new_triple = _starts(triple)
    t_index = np.cumsum(new_triple) - 1
    n_triples = len(t_index) and int(t_index[-1]) + 1
    is_indef, is_defin = np.zeros(n_triples, bool), np.zeros(n_triples, bool)
    key &= 3  # window kinds, in sorted order
    is_indef[np.compress(key == 1, t_index)] = True  # np.compress: several times faster than a[mask] here
    is_defin[np.compress(key == 2, t_index)] = True
    triple = np.compress(new_triple, triple)
    cap_word = triple >> b.local_bits
    return _Occurrences(
        cap_word=cap_word,
        word=cap_word & ((1 << b.word_bits) - 1),
        sent=cap_start[cap_word >> b.word_bits] + (triple & ((1 << b.local_bits) - 1)),
        after_indefinite=is_indef,
        after_definite=is_defin,
    )


def _relations(b: _Batch, occ: _Occurrences) -> tuple[np.ndarray, np.ndarray]:
    """Per sentence, the counts behind `introduces` and `refers_back` (0 in one-sentence captions)."""
    n_sent, n_triples = len(b.lengths), len(occ.sent)
    new_group = _starts(occ.cap_word)  # per (caption, word): ...
    g_index = np.cumsum(new_group) - 1
    g_start = np.flatnonzero(new_group)
    df = np.diff(np.r_[g_start, n_triples])[g_index]  # ... how many sentences hold it
    is_indef = occ.after_indefinite
    indef_df = np.add.reduceat(is_indef.astype(np.int64), g_start)[g_index] if n_triples else g_index  # ... after "a"
    introduces = np.bincount(occ.sent, weights=is_indef & (df > 1), minlength=n_sent)
    refers_back = np.bincount(occ.sent, weights=occ.after_definite & (indef_df - is_indef > 0), minlength=n_sent)
    several = (b.per_caption > 1)[b.cap_of_sent]
    introduces[~several] = 0.0
    refers_back[~several] = 0.0
    return introduces, refers_back


def _length_ratios(b: _Batch) -> np.ndarray:
    """Per sentence: its length over its caption's mean sentence length (0 when that is 0)."""
    n_sent = len(b.lengths)
    cap_len = np.bincount(b.cap_of_sent, weights=b.lengths, minlength=len(b.per_caption))
    mean_len = (cap_len / np.maximum(b.per_caption, 1))[b.cap_of_sent]
    return np.divide(b.lengths, mean_len, out=np.zeros(n_sent), where=mean_len != 0)


def _opening_weights(b: _Batch, vocab: _Vocab) -> np.ndarray:
    """Per sentence: f:FIRST + f2:"FIRST SECOND" (f2:FIRST for a one-word sentence), 0.0 when empty."""
    n_sent = len(b.lengths)
    one, two = np.flatnonzero(b.lengths > 0), np.flatnonzero(b.lengths > 1)
    first_id = b.word_id(b.sent_start[one])
    first = np.zeros(n_sent)
    first[one] = vocab.first[first_id]
    second = np.zeros(n_sent)
    only = b.lengths[one] == 1
    second[one[only]] = vocab.first2[first_id[only]]
    keys, weights, m = vocab.first2_pairs()
    if len(keys) and len(two):
        k = b.word_id(b.sent_start[two]) * m + b.word_id(b.sent_start[two] + 1)
        j = np.minimum(np.searchsorted(keys, k), len(keys) - 1)
        second[two] = np.where(keys[j] == k, weights[j], 0.0)
    return first + second


def _closing_candidates(b: _Batch, vocab: _Vocab) -> list[int]:
    """Sentences whose first two words allow a closing-phrase match (a superset of those that match)."""
    one = np.flatnonzero(b.lengths > 0)
    code = vocab.closing[b.word_id(b.sent_start[one])]
    maybe = code == 1
    in_two = b.lengths[one] > 1
    second_id = b.word_id(b.sent_start[one[in_two]] + 1)
    maybe[in_two] |= (vocab.closing_next[second_id] & _CLOSING_NEED[code[in_two]]) != 0
    return one[maybe].tolist()


class _BatchScorer:
    """`raw_scores` over many captions at once, from numpy over all their words instead of
    feature dicts per sentence. Same features and weights; a sentence's word weights are
    added in ascending word id (set order in the specification), which moves a raw score
    by a few units in the last place at most."""

    def __init__(self, weights: _Weights):
        self.w = weights
        self.vocab = _Vocab(weights)

    def raw(self, captions: list[list[str]]) -> list[float]:
        counts = np.fromiter(map(len, captions), np.int64, len(captions))
        return self.raw_flat([x for c in captions for x in c], counts).tolist()

    def raw_flat(self, sents: list[str], per_caption: np.ndarray) -> np.ndarray:
        """Raw scores of captions given as all their sentences end to end and the number per caption."""
        if not sents:
            return np.zeros(0)
        local, distinct, lengths = _chunk_words(sents)
        if not _fits_sort_key(len(distinct), per_caption) and len(per_caption) > 1:
            half = len(per_caption) // 2
            cut = int(per_caption[:half].sum())
            return np.concatenate(
                [self.raw_flat(sents[:cut], per_caption[:half]), self.raw_flat(sents[cut:], per_caption[half:])]
            )
        vocab, num = self.vocab, self.w.num
        b = _Batch.build(vocab.ids(distinct, len(local)), local, lengths, per_caption)
        occ = _occurrences(b, _determiner_windows(b, vocab))
        word_sum = np.bincount(occ.sent, weights=vocab.weight[b.rank_id[occ.word]], minlength=len(lengths))
        introduces, refers_back = _relations(b, occ)
        # a fixed order of additions: the scores' last bits, and so the shards, depend on it
        z = word_sum + _opening_weights(b, vocab)
        z = z + num["introduces"] * np.log1p(introduces)
        z = z + num["refers_back"] * np.log1p(refers_back)
        z = z + (num["len_ratio"] * _length_ratios(b) + num["log_len"] * np.log1p(lengths))
        if num["closing_phrase"]:
            for i in _closing_candidates(b, vocab):
                if is_closing_summary(sents[i]):
                    z[i] += num["closing_phrase"]
        return z


@lru_cache(maxsize=1)
def _batch_scorer() -> _BatchScorer:
    return _BatchScorer(_Weights(_model()))


def summary_scores_batch(captions: list[list[str]]) -> list[list[float]]:
    """`summary_scores` of many captions (each a list of sentences) in one numpy pass."""
    counts = np.fromiter(map(len, captions), np.int64, len(captions))
    flat = summary_scores_flat([x for c in captions for x in c], counts).tolist()
    ends = np.cumsum(counts).tolist()
    return list(map(flat.__getitem__, map(slice, [0] + ends[:-1], ends)))


def summary_scores_flat(sentences: list[str], counts) -> np.ndarray:
    """`summary_scores` of many captions given as all their sentences end to end and the number
    of sentences per caption (`counts`): the scores end to end, float64. Creates no per-caption
    Python objects (prepare keeps a whole chunk alive, where they cost garbage-collector time)."""
    scorer = _batch_scorer()
    scale, offset = scorer.w.scale, scorer.w.offset
    counts = np.asarray(counts, np.int64)
    ends = np.cumsum(counts)
    out = np.zeros(len(sentences))
    for i in range(0, len(counts), _BATCH):
        part = counts[i : i + _BATCH]
        a = int(ends[i - 1]) if i else 0
        b = a + int(part.sum())
        t = scale * scorer.raw_flat(sentences[a:b], part) + offset
        live = t > -60
        # math.exp, not np.exp: the same float64 as _squash to the last bit
        e = np.fromiter(map(math.exp, (-t[live]).tolist()), float, int(live.sum()))
        p = out[a:b]
        p[live] = 1.0 / (1.0 + e)
    return out


def summary_mask_batch(sentences: list[str], counts, scores: np.ndarray, mode: str = "detect") -> np.ndarray:
    """`summary_mask` of many captions given as in `summary_scores_flat` (sentences and scores end
    to end, sentences per caption): the flags end to end, as a bool array."""
    _check_mode(mode)
    counts = np.asarray(counts, np.int64)
    mask = np.zeros(len(sentences), bool)
    if mode == "none" or not len(mask):
        return mask
    present = counts > 0
    starts = (np.cumsum(counts) - counts)[present]
    if mode == "first":
        mask[starts] = True
        return mask
    th = _model()["mask"]
    scores = np.asarray(scores, float)
    first = scores[starts]
    # the same float64 comparisons as summary_mask (sentences of a caption are contiguous, so
    # the reduceat segments between the starts of non-empty captions are exactly the captions)
    best = np.maximum.reduceat(scores, starts)
    mask[starts] = ~((first < th["opening_min"]) & (best - first > th["opening_margin"]))
    for i in (starts + counts[present] - 1)[counts[present] >= 3].tolist():
        if is_closing_summary(sentences[i]):
            mask[i] = True
    return mask
