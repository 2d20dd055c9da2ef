"""Summary detection: which sentences of a long caption summarise the whole picture.

`summary_scores` is position-free: a sentence's score depends only on its own words and
on the set of the other sentences (shuffling the sentences permutes the scores and
nothing else). It is a linear model over sparse features (opening words, words of the
sentence, and how its nouns relate to the other sentences: introduced with "a"/"an"
here and referred back to with "the"/"its" there), squashed to [0, 1]. The weights were
fitted offline (caption_debias/text/summary_train.py) as a conditional logit that
picks the original opening sentence of real long captions, and ship as JSON in
caption_debias/assets/summary_model.json: nothing is downloaded, scoring is pure Python.

`summary_mask` turns scores into flags for the opening and the closing summary and may
use position.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
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
_CLOSING = re.compile(
    r"^(overall|in summary|in conclusion|altogether|all in all|in essence|the overall|the general|"
    r"the (image|scene|photo|photograph|picture|composition|setting)( as a whole)? "
    r"(conveys|evokes|exudes|captures|creates|gives|has|is filled with|radiates|suggests|portrays|"
    r"presents|offers|reflects|showcases|depicts a sense)|"
    r"th(is|e) (image|scene|photo|photograph|picture)('s)? (overall|mood|atmosphere|ambiance|tone))\b"
)


_CLOSING_FIRST = frozenset({"overall", "in", "altogether", "all", "the", "this"})  # first words _CLOSING can match
# For the batch scorer, which runs _CLOSING only where the first two words allow a match:
# the first word's code, the bit its second word needs (by code), and the bits a word gives.
_CLOSING_CODE = {"overall": 1, "altogether": 1, "in": 2, "all": 3, "the": 4, "this": 4}  # 1: any second word
_CLOSING_NEED = np.array([0, 0, 1, 2, 4], np.int8)  # in summary/conclusion/essence; all in all; the/this NOUN...
_CLOSING_SECOND = (
    ("summary", "conclusion", "essence"),
    ("in",),
    ("overall", "general", "image", "scene", "photo", "picture", "composition", "setting"),
)  # prefixes ("photo" covers "photograph", "image's")


def _closing_bits(word: str) -> int:
    return sum(1 << i for i, prefixes in enumerate(_CLOSING_SECOND) if word.startswith(prefixes))


def _words(sentence: str) -> list[str]:
    low = sentence.lower()
    return _WORD.findall(low.replace("\u2019", "'") if "\u2019" in low else low)


_DET_KIND = {**{w: 1 for w in _INDEFINITE}, **{w: 2 for w in _DEFINITE}}
_IS_DET = _DET_KIND.__contains__


def _determined(words: list[str]) -> tuple[set[str], set[str]]:
    """Content words met within 3 words after an indefinite / a definite determiner
    (a later determiner ends the window)."""
    indef: set[str] = set()
    defin: set[str] = set()
    kinds = _DET_KIND
    at = list(itertools.compress(range(len(words)), map(_IS_DET, words)))  # found in C, not a Python loop
    if not at:
        return indef, defin
    at.append(len(words))
    for a, b in zip(at, at[1:]):
        target = indef if kinds[words[a]] == 1 else defin
        for w in words[a + 1 : b if b < a + 4 else a + 4]:
            if len(w) > 2 and w not in _STOP:
                target.add(w)
    return indef, defin


def _sentence_words(sentences: list[str]):
    """Words, word sets, determined content words, and in how many sentences each word
    appears at all (df) and after an indefinite determiner (indef_df)."""
    findall = _WORD.findall  # _words, inlined: it runs for every sentence prepare writes
    words = [findall(s.lower().replace("\u2019", "'")) if "\u2019" in s else findall(s.lower()) for s in sentences]
    word_sets = list(map(set, words))
    dets = list(map(_determined, words))
    # counted in C over every word; only content words are ever looked up
    df = Counter(itertools.chain.from_iterable(word_sets))
    indef_df = Counter(itertools.chain.from_iterable(d[0] for d in dets))
    return words, word_sets, dets, df, indef_df


def sentence_features(sentences: list[str]) -> list[dict[str, float]]:
    """Sparse features of every sentence, from its words and its relation to the others.

    w:WORD (the sentence has WORD), f:WORD / f2:WORD WORD (its opening words),
    introduces (log count of entities it names after "a"/"an"/"two"... that another
    sentence names too), refers_back (log count of entities it names after "the"/"its"...
    that another sentence introduces with an indefinite), len_ratio (length over the
    caption's mean sentence length), log_len, closing_phrase ("Overall, ...").
    """
    words, word_sets, dets, df, indef_df = _sentence_words(sentences)
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
        f["closing_phrase"] = 1.0 if _CLOSING.match(sentences[i].strip().lower()) else 0.0
        feats.append(f)
    return feats


class _Scorer:
    """The shipped weights split by feature family, so scoring needs no feature dicts.

    Gives the same numbers as the dot product of `sentence_features` with the weights
    (tests check it); it exists because prepare scores every caption it writes.
    """

    def __init__(self, model: dict):
        w = model["weights"]
        self.word = {k[2:]: v for k, v in w.items() if k.startswith("w:")}
        self.first = {k[2:]: v for k, v in w.items() if k.startswith("f:")}
        self.first2 = {k[3:]: v for k, v in w.items() if k.startswith("f2:")}
        self.num = {k: w.get(k, 0.0) for k in _NUMERIC}
        self.scale = model["calibration"]["scale"]
        self.offset = model["calibration"]["offset"]

    def raw(self, sentences: list[str]) -> list[float]:
        words, word_sets, dets, df, indef_df = _sentence_words(sentences)
        n = len(sentences)
        lengths = [len(ws) for ws in words]
        mean_len = sum(lengths) / n if n else 1.0
        num = self.num
        word_get, first_get, first2_get = self.word.get, self.first.get, self.first2.get
        log1p = math.log1p
        out = []
        for i in range(n):
            ws = words[i]
            z = sum(map(word_get, word_sets[i], _ZEROS))
            if ws:
                z += first_get(ws[0], 0.0) + first2_get(" ".join(ws[:2]), 0.0)
            if n > 1:
                indef, defin = dets[i]
                if indef:
                    z += num["introduces"] * log1p(sum(1 for w in indef if df.get(w, 0) > 1))
                if defin:
                    z += num["refers_back"] * log1p(sum(1 for w in defin if indef_df.get(w, 0) - (w in indef) > 0))
            z += num["len_ratio"] * (lengths[i] / mean_len if mean_len else 0.0) + num["log_len"] * log1p(lengths[i])
            if (
                num["closing_phrase"]
                and ws
                and ws[0] in _CLOSING_FIRST
                and _CLOSING.match(sentences[i].strip().lower())
            ):
                z += num["closing_phrase"]
            out.append(z)
        return out


class _Vocab(dict):
    """Word -> id, ids handed out on first sight (dict.__getitem__ calls __missing__ from C),
    with per-id arrays: shipped word weight, opening-word weight (f:), one-word opening
    weight (f2: of a one-word sentence), determiner kind (0, 1 indefinite, 2 definite),
    content word (the words _determined keeps), and whether _CLOSING can start with it.
    Ids only order the additions of word weights (sorted ids, as before), so they are
    kept exactly as the word-by-word assignment made them."""

    _LIMIT = 1_000_000  # cleared when full: bounds memory on endless vocabularies

    def __init__(self, scorer: _Scorer):
        super().__init__()
        self.scorer = scorer
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
        (all its words) decides a reset as the word-by-word version did."""
        if len(self) + n_words > self._LIMIT:
            self.clear()
            self.new = []
            self._reset_arrays()
        out = np.fromiter(map(self.__getitem__, distinct), np.int64, len(distinct))
        if self.new:  # extend the per-id arrays with this call's new words
            new, self.new = self.new, []
            s, k = self.scorer, len(new)
            self.weight = np.concatenate([self.weight, np.fromiter(map(s.word.get, new, _ZEROS), float, k)])
            self.first = np.concatenate([self.first, np.fromiter(map(s.first.get, new, _ZEROS), float, k)])
            self.first2 = np.concatenate([self.first2, np.fromiter(map(s.first2.get, new, _ZEROS), float, k)])
            self.kind = np.concatenate([self.kind, np.fromiter((_DET_KIND.get(w, 0) for w in new), np.int8, k)])
            content = (len(w) > 2 and w not in _STOP for w in new)
            self.content = np.concatenate([self.content, np.fromiter(content, bool, k)])
            code = map(_CLOSING_CODE.get, new, itertools.repeat(0))
            self.closing = np.concatenate([self.closing, np.fromiter(code, np.int8, k)])
            self.closing_next = np.concatenate([self.closing_next, np.fromiter(map(_closing_bits, new), np.int8, k)])
        return out

    def first2_pairs(self) -> tuple[np.ndarray, np.ndarray, int]:
        """f2: weights of two-word openings whose words both have ids: sorted keys
        id1 * m + id2, their weights, and m."""
        m = max(len(self), 1)
        pairs = []
        for key, w in self.scorer.first2.items():
            a, space, b = key.partition(" ")
            ia, ib = self.get(a), self.get(b)
            if space and ia is not None and ib is not None:
                pairs.append((ia * m + ib, w))
        pairs.sort()
        return np.array([k for k, _ in pairs], np.int64), np.array([w for _, w in pairs], float), m


# The only characters besides A-Z whose lowercase (str.lower) holds a-z ("İ" -> "i̇", the Kelvin
# sign -> "k"); a test checks this over all of Unicode for the running Python.
_LOWER_TO_ASCII = ("\u0130", "\u212a")


def _chunk_words(sentences: list[str]) -> tuple[np.ndarray, list[str], np.ndarray]:
    """The words of `_words` for many sentences at once: each word's index into the
    distinct words (in order of first occurrence), the distinct words, and the number of
    words per sentence.

    Python's regex engine took a third of the batch's time, and neither Arrow (no
    find-all) nor polars' extract_all (~10 us per caption) did it cheaply, so the words
    are found with numpy masks over the UTF-8 bytes of the sentences joined by NUL: a
    word is a run of ASCII letters and of single "'" or "-" bytes between two letters,
    lowercased, which is exactly what _WORD finds in the lowercased sentence (multi-byte
    characters never hold ASCII bytes, and none but _LOWER_TO_ASCII lowercases to any).
    """
    text = "\0".join(sentences)
    if text.count("\0") != len(sentences) - 1:  # a NUL inside a sentence: the regex, sentence by sentence
        findall = _WORD.findall
        words = [findall(x.lower().replace("\u2019", "'")) if "\u2019" in x else findall(x.lower()) for x in sentences]
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
    # (these forms, not np.diff on int8 and data[inword], are 3-5x faster here)
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


class _BatchScorer:
    """`_Scorer.raw` over many captions at once, since prepare scores every caption it
    writes: the words of the whole batch are found in one pass (_chunk_words), and the
    word-level features (distinct words, determiner windows, per-caption document
    frequencies, opening words, closing-phrase candidates) come from numpy over all of
    them instead of per sentence in Python. Same features and weights; the only
    difference is the order in which a sentence's word weights are added (ascending word
    id here, set order there), which moves the raw score by at most a few units in the
    last place (as hash seeds already do). Word ids, and so these sums, are the same as
    in the word-by-word version this replaced (4f45e8c), to the bit.
    """

    def __init__(self, scorer: _Scorer):
        self.s = scorer
        self.vocab = _Vocab(scorer)

    def raw(self, captions: list[list[str]]) -> list[float]:
        return self.raw_array(captions).tolist()

    def raw_array(self, captions: list[list[str]]) -> np.ndarray:
        return self.raw_flat([x for c in captions for x in c], np.fromiter(map(len, captions), np.int64, len(captions)))

    def raw_flat(self, sents: list[str], per_caption: np.ndarray) -> np.ndarray:
        """Raw scores of captions given as all their sentences end to end and the number per caption."""
        num, vocab = self.s.num, self.vocab
        n_sent = len(sents)
        if not n_sent:
            return np.zeros(0)
        local, distinct, lengths = _chunk_words(sents)
        n_caps = len(per_caption)
        # the sort key below holds caption, word rank, sentence within the caption and window kind in bit fields
        word_bits, local_bits = (len(distinct) - 1).bit_length(), int(per_caption.max() - 1).bit_length()
        if (n_caps - 1).bit_length() + word_bits + local_bits + 2 > 62 and n_caps > 1:  # int64 overflow
            half = n_caps // 2
            cut = int(per_caption[:half].sum())
            return np.concatenate(
                [self.raw_flat(sents[:cut], per_caption[:half]), self.raw_flat(sents[cut:], per_caption[half:])]
            )
        ids = vocab.ids(distinct, len(local))
        # words are keyed by their rank among this batch's ids: small keys, same order as the ids
        by_rank = np.argsort(ids, kind="stable")
        rank = np.empty(len(ids), np.int64)
        rank[by_rank] = np.arange(len(ids))
        r = rank[local]
        rank_id = ids[by_rank]
        n_words = len(r)
        cap_of_sent = np.repeat(np.arange(n_caps), per_caption)
        sent_of_word = np.repeat(np.arange(n_sent), lengths)
        sent_start = np.cumsum(lengths) - lengths

        # determiner windows: up to 3 words after a determiner, cut by the next one (as _determined)
        kind = vocab.kind[rank_id][r]
        pos = np.arange(n_words)
        last_det = np.maximum.accumulate(np.where(kind > 0, pos, -1)) if n_words else pos
        inside = (kind == 0) & vocab.content[rank_id][r]
        inside &= (last_det >= sent_start[sent_of_word]) & (pos - last_det <= 3)
        window_kind = np.where(inside, kind[np.maximum(last_det, 0)], 0)

        # One sort of every word by (caption, word, sentence, window kind) gives all that follows: the
        # distinct words of each sentence in ascending id (the order their weights were always added in),
        # and, word by word within a caption, the sentences holding it and those naming it after "a"/"the".
        cap_start = np.cumsum(per_caption) - per_caption
        cap_of_word = cap_of_sent[sent_of_word]
        sent_in_cap = sent_of_word - cap_start[cap_of_word]
        key = (((cap_of_word << word_bits) | r) << local_bits | sent_in_cap) << 2 | window_kind
        del (
            kind,
            pos,
            last_det,
            inside,
            window_kind,
            cap_of_word,
            sent_in_cap,
        )  # per-word temporaries: lower peak memory
        key.sort(kind="stable")
        triple = key >> 2
        new_triple = _starts(triple)
        t_index = np.cumsum(new_triple) - 1
        n_triples = len(t_index) and int(t_index[-1]) + 1
        is_indef, is_defin = np.zeros(n_triples, bool), np.zeros(n_triples, bool)
        key &= 3  # window kinds, in sorted order
        is_indef[np.compress(key == 1, t_index)] = True  # np.compress: 3x faster than a[mask] here
        is_defin[np.compress(key == 2, t_index)] = True
        triple = np.compress(new_triple, triple)
        cap_word = triple >> local_bits
        t_word = cap_word & ((1 << word_bits) - 1)
        t_sent = cap_start[cap_word >> word_bits] + (triple & ((1 << local_bits) - 1))
        word_sum = np.bincount(t_sent, weights=vocab.weight[rank_id[t_word]], minlength=n_sent)
        # per (caption, word): how many sentences hold it (df), how many name it after an indefinite
        new_group = _starts(cap_word)
        g_index = np.cumsum(new_group) - 1
        g_start = np.flatnonzero(new_group)
        df = np.diff(np.r_[g_start, n_triples])[g_index]
        indef_df = np.add.reduceat(is_indef.astype(np.int64), g_start)[g_index] if n_triples else g_index
        introduces = np.bincount(t_sent, weights=is_indef & (df > 1), minlength=n_sent)
        refers_back = np.bincount(t_sent, weights=is_defin & (indef_df - is_indef > 0), minlength=n_sent)
        several = (per_caption > 1)[cap_of_sent]
        introduces[~several] = 0.0
        refers_back[~several] = 0.0

        cap_len = np.bincount(cap_of_sent, weights=lengths, minlength=n_caps)
        mean_len = (cap_len / np.maximum(per_caption, 1))[cap_of_sent]
        ratio = np.divide(lengths, mean_len, out=np.zeros(n_sent), where=mean_len != 0)

        # opening words: f:FIRST + f2:"FIRST SECOND" (f2:FIRST for a one-word sentence), 0.0 when empty
        one, two = np.flatnonzero(lengths > 0), np.flatnonzero(lengths > 1)
        first_id = rank_id[r[sent_start[one]]]
        first = np.zeros(n_sent)
        first[one] = vocab.first[first_id]
        second = np.zeros(n_sent)
        only = lengths[one] == 1
        second[one[only]] = vocab.first2[first_id[only]]
        keys, weights, m = vocab.first2_pairs()
        if len(keys) and len(two):
            k = rank_id[r[sent_start[two]]] * m + rank_id[r[sent_start[two] + 1]]
            j = np.minimum(np.searchsorted(keys, k), len(keys) - 1)
            second[two] = np.where(keys[j] == k, weights[j], 0.0)
        # the same additions, in the same order, as _Scorer.raw
        z = word_sum + (first + second)
        z = z + num["introduces"] * np.log1p(introduces)
        z = z + num["refers_back"] * np.log1p(refers_back)
        z = z + (num["len_ratio"] * ratio + num["log_len"] * np.log1p(lengths))
        if num["closing_phrase"]:
            # sentences whose first two words allow a _CLOSING match (a superset of those it matches)
            code = vocab.closing[first_id]
            maybe = code == 1
            in_two = lengths[one] > 1
            second_id = rank_id[r[sent_start[one[in_two]] + 1]]
            maybe[in_two] |= (vocab.closing_next[second_id] & _CLOSING_NEED[code[in_two]]) != 0
            for i in one[maybe].tolist():
                if _CLOSING.match(sents[i].strip().lower()):
                    z[i] += num["closing_phrase"]
        return z


_ZEROS = itertools.repeat(0.0)
_NUMERIC = ("introduces", "refers_back", "len_ratio", "log_len", "closing_phrase")


@lru_cache(maxsize=1)
def _model() -> dict:
    try:
        text = resources.files("caption_debias").joinpath("assets", MODEL_ASSET).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"caption_debias/assets/{MODEL_ASSET} is missing: reinstall the package") from None
    return json.loads(text)


@lru_cache(maxsize=1)
def _scorer() -> _Scorer:
    return _Scorer(_model())


def raw_scores(sentences: list[str], weights: dict[str, float] | None = None) -> list[float]:
    """Linear scores before squashing (higher = more summary-like); `weights` for training tools."""
    if weights is None:
        return _scorer().raw(sentences)
    return [sum(weights.get(k, 0.0) * v for k, v in f.items()) for f in sentence_features(sentences)]


def summary_scores(sentences: list[str]) -> list[float]:
    """Score in [0, 1] per sentence for how much it summarises the caption (position-free)."""
    if not sentences:
        return []
    s = _scorer()
    out = []
    for z in s.raw(sentences):
        t = s.scale * z + s.offset
        out.append(1.0 / (1.0 + math.exp(-t)) if t > -60 else 0.0)
    return out


_BATCH = 2048  # captions per numpy pass


@lru_cache(maxsize=1)
def _batch_scorer() -> _BatchScorer:
    return _BatchScorer(_scorer())


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
    s = _scorer()
    scorer = _batch_scorer()
    exp = math.exp
    counts = np.asarray(counts, np.int64)
    ends = np.cumsum(counts)
    out = np.zeros(len(sentences))
    # slices of _BATCH captions bound the batch's arrays (a 20,000-caption shard holds ~3M words)
    for i in range(0, len(counts), _BATCH):
        part = counts[i : i + _BATCH]
        a = int(ends[i - 1]) if i else 0
        b = a + int(part.sum())
        t = s.scale * scorer.raw_flat(sentences[a:b], part) + s.offset
        live = t > -60
        # math.exp, not np.exp: the same float64 as summary_scores to the last bit
        e = np.fromiter(map(exp, (-t[live]).tolist()), float, int(live.sum()))
        p = out[a:b]
        p[live] = 1.0 / (1.0 + e)
    return out


def is_closing_summary(sentence: str) -> bool:
    """'Overall, ...', 'The overall atmosphere is ...', 'The image conveys ...'."""
    return _CLOSING.match(sentence.strip().lower()) is not None


def summary_mask(sentences: list[str], scores: list[float], mode: str = "detect") -> list[bool]:
    """Flags for the opening and closing summaries under `mode` (see SUMMARY_MODES)."""
    n = len(sentences)
    if mode == "none":
        return [False] * n
    if mode == "first":
        return [i == 0 for i in range(n)]
    if mode != "detect":
        raise UserError(f"unknown summary mode {mode!r}: choose one of {', '.join(SUMMARY_MODES)}")
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


def summary_mask_batch(sentences: list[str], counts, scores: np.ndarray, mode: str = "detect") -> np.ndarray:
    """`summary_mask` of many captions given as in `summary_scores_flat` (sentences and scores end
    to end, sentences per caption): the flags end to end, as a bool array."""
    counts = np.asarray(counts, np.int64)
    mask = np.zeros(len(sentences), bool)
    if mode not in SUMMARY_MODES:
        raise UserError(f"unknown summary mode {mode!r}: choose one of {', '.join(SUMMARY_MODES)}")
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
    match = _CLOSING.match
    for i in (starts + counts[present] - 1)[counts[present] >= 3].tolist():
        if match(sentences[i].strip().lower()):
            mask[i] = True
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
