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

from caption_debias.errors import UserError

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
            if num["closing_phrase"] and ws and ws[0] in _CLOSING_FIRST and _CLOSING.match(sentences[i].strip().lower()):
                z += num["closing_phrase"]
            out.append(z)
        return out


class _Vocab(dict):
    """Word -> id, ids handed out on first sight (dict.__getitem__ calls __missing__ from C),
    with per-id arrays: shipped word weight, determiner kind (0, 1 indefinite, 2 definite),
    content word (the words _determined keeps)."""

    _LIMIT = 1_000_000  # cleared when full: bounds memory on endless vocabularies

    def __init__(self, weights: dict[str, float]):
        super().__init__()
        self.weights = weights
        self.new: list[str] = []
        self.weight = np.zeros(0)
        self.kind = np.zeros(0, np.int8)
        self.content = np.zeros(0, bool)

    def __missing__(self, word: str) -> int:
        i = self[word] = len(self)
        self.new.append(word)
        return i

    def ids(self, words: list[str]) -> np.ndarray:
        if len(self) + len(words) > self._LIMIT:
            self.clear()
            self.new = []
            self.weight, self.kind, self.content = np.zeros(0), np.zeros(0, np.int8), np.zeros(0, bool)
        out = np.fromiter(map(self.__getitem__, words), np.int64, len(words))
        if self.new:  # extend the per-id arrays with this call's new words
            new, self.new = self.new, []
            get = self.weights.get
            self.weight = np.concatenate([self.weight, np.fromiter((get(w, 0.0) for w in new), float, len(new))])
            self.kind = np.concatenate([self.kind, np.fromiter((_DET_KIND.get(w, 0) for w in new), np.int8, len(new))])
            self.content = np.concatenate(
                [self.content, np.fromiter((len(w) > 2 and w not in _STOP for w in new), bool, len(new))]
            )
        return out


def _unique(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct keys and their counts (np.unique's hash path was 3x slower here)."""
    a = np.sort(keys)
    if not len(a):
        return a, np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, a[1:] != a[:-1]])
    return a[starts], np.diff(np.r_[starts, len(a)])


def _count_in(keys: np.ndarray, uniq: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """counts[j] where uniq[j] == key, else 0, for every key (uniq sorted)."""
    if not len(uniq):
        return np.zeros(len(keys), np.int64)
    j = np.minimum(np.searchsorted(uniq, keys), len(uniq) - 1)
    return np.where(uniq[j] == keys, counts[j], 0)


class _BatchScorer:
    """`_Scorer.raw` over many captions at once: the word-level features (distinct words,
    determiner windows, per-caption document frequencies) are computed with numpy over
    the whole batch instead of per sentence in Python, since prepare scores every caption
    it writes. Same features and weights; the only difference is the order in which a
    sentence's word weights are added (sorted word ids here, set order there), which moves
    the raw score by at most a few units in the last place (as hash seeds already do).
    """

    def __init__(self, scorer: _Scorer):
        self.s = scorer
        self.vocab = _Vocab(scorer.word)

    def raw(self, captions: list[list[str]]) -> list[float]:
        s, num = self.s, self.s.num
        sents = [x for c in captions for x in c]
        n_sent = len(sents)
        if not n_sent:
            return []
        findall = _WORD.findall
        words = [findall(x.lower().replace("\u2019", "'")) if "\u2019" in x else findall(x.lower()) for x in sents]
        lengths = np.fromiter(map(len, words), np.int64, n_sent)
        ids = self.vocab.ids(list(itertools.chain.from_iterable(words)))
        v = np.int64(max(len(self.vocab), 1))
        n_words = len(ids)
        per_caption = np.fromiter(map(len, captions), np.int64, len(captions))
        cap_of_sent = np.repeat(np.arange(len(captions)), per_caption)
        sent_of_word = np.repeat(np.arange(n_sent), lengths)
        sent_start = np.cumsum(lengths) - lengths

        # distinct words per sentence: their weight sum, and in how many sentences of the caption each occurs
        sw = _unique(sent_of_word * v + ids)[0]
        sw_sent, sw_word = sw // v, sw % v
        word_sum = np.bincount(sw_sent, weights=self.vocab.weight[sw_word], minlength=n_sent)
        cw_uniq, cw_counts = _unique(cap_of_sent[sw_sent] * v + sw_word)

        # determiner windows: up to 3 words after a determiner, cut by the next one (as _determined)
        kind = self.vocab.kind[ids]
        pos = np.arange(n_words)
        last_det = np.maximum.accumulate(np.where(kind > 0, pos, -1)) if n_words else pos
        inside = (kind == 0) & self.vocab.content[ids] & (last_det >= sent_start[sent_of_word]) & (pos - last_det <= 3)
        window_kind = np.where(inside, kind[np.maximum(last_det, 0)], 0)
        pair = sent_of_word * v + ids
        indef = _unique(pair[window_kind == 1])[0]
        defin = _unique(pair[window_kind == 2])[0]
        indef_sent, defin_sent = indef // v, defin // v
        introduces = np.bincount(
            indef_sent, weights=_count_in(cap_of_sent[indef_sent] * v + indef % v, cw_uniq, cw_counts) > 1, minlength=n_sent
        )
        ic_uniq, ic_counts = _unique(cap_of_sent[indef_sent] * v + indef % v)
        indef_df = _count_in(cap_of_sent[defin_sent] * v + defin % v, ic_uniq, ic_counts)
        in_own_indef = _count_in(defin, indef, np.ones(len(indef), np.int64))
        refers_back = np.bincount(defin_sent, weights=(indef_df - in_own_indef) > 0, minlength=n_sent)
        several = (per_caption > 1)[cap_of_sent]
        introduces[~several] = 0.0
        refers_back[~several] = 0.0

        cap_len = np.bincount(cap_of_sent, weights=lengths, minlength=len(captions))
        mean_len = (cap_len / np.maximum(per_caption, 1))[cap_of_sent]
        ratio = np.divide(lengths, mean_len, out=np.zeros(n_sent), where=mean_len != 0)
        # the same additions, in the same order, as _Scorer.raw
        first_get, first2_get = s.first.get, s.first2.get
        first = np.fromiter(
            (first_get(ws[0], 0.0) + first2_get(" ".join(ws[:2]), 0.0) if ws else 0.0 for ws in words), float, n_sent
        )
        z = word_sum + first
        z = z + num["introduces"] * np.log1p(introduces)
        z = z + num["refers_back"] * np.log1p(refers_back)
        z = z + (num["len_ratio"] * ratio + num["log_len"] * np.log1p(lengths))
        out = z.tolist()
        if num["closing_phrase"]:
            for i, ws in enumerate(words):
                if ws and ws[0] in _CLOSING_FIRST and _CLOSING.match(sents[i].strip().lower()):
                    out[i] += num["closing_phrase"]
        return out


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
    s = _scorer()
    scorer = _batch_scorer()
    # slices bound the batch's word arrays (a 20,000-caption shard holds ~3M words)
    flat = itertools.chain.from_iterable(scorer.raw(captions[i : i + _BATCH]) for i in range(0, len(captions), _BATCH))
    exp = math.exp
    out = []
    for c in captions:
        scores = []
        for _ in c:
            t = s.scale * next(flat) + s.offset
            scores.append(1.0 / (1.0 + exp(-t)) if t > -60 else 0.0)
        out.append(scores)
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


def describe(mode: str) -> dict:
    if mode != "detect":
        return {"mode": mode}
    m = _model()
    return {"mode": mode, "method": m["method"], "model": MODEL_ASSET, "version": m["version"], "trained_on": m["trained_on"]}
