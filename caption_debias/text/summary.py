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

import json
import math
import re
from functools import lru_cache
from importlib import resources

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


def _words(sentence: str) -> list[str]:
    return _WORD.findall(sentence.lower().replace("\u2019", "'"))


def _determined(words: list[str]) -> tuple[set[str], set[str]]:
    """Content words first met after an indefinite / a definite determiner (within 3 words)."""
    indef, defin = set(), set()
    last_det, dist = None, 99
    for w in words:
        if w in _INDEFINITE:
            last_det, dist = "i", 0
            continue
        if w in _DEFINITE:
            last_det, dist = "d", 0
            continue
        dist += 1
        if w not in _STOP and len(w) > 2 and dist <= 3:
            (indef if last_det == "i" else defin).add(w) if last_det else None
    return indef, defin


def sentence_features(sentences: list[str]) -> list[dict[str, float]]:
    """Sparse features of every sentence, from its words and its relation to the others."""
    words = [_words(s) for s in sentences]
    content = [{w for w in ws if w not in _STOP and len(w) > 2} for ws in words]
    dets = [_determined(ws) for ws in words]
    n = len(sentences)
    lengths = [len(ws) for ws in words]
    mean_len = sum(lengths) / n if n else 1.0
    # document frequency of content words across sentences (for the relation features)
    df: dict[str, int] = {}
    for c in content:
        for w in c:
            df[w] = df.get(w, 0) + 1
    feats = []
    for i in range(n):
        ws, c = words[i], content[i]
        f: dict[str, float] = {}
        for w in set(ws):
            f["w:" + w] = 1.0
        if ws:
            f["f:" + ws[0]] = 1.0
            f["f2:" + " ".join(ws[:2])] = 1.0
        if n > 1:
            others = n - 1
            shared = [w for w in c if df[w] > 1]
            indef, defin = dets[i]
            f["shared_frac"] = len(shared) / max(1, len(c))
            f["coverage"] = sum(1 for j in range(n) if j != i and content[j] & c) / others
            # entities this sentence introduces that others name again, and the reverse
            f["introduces"] = math.log1p(sum(1 for w in indef if df[w] > 1))
            f["refers_back"] = math.log1p(
                sum(1 for w in defin if any(w in dets[j][0] for j in range(n) if j != i))
            )
            f["mentioned_by"] = math.log1p(sum(df[w] - 1 for w in c)) / math.log1p(others * 4)
        f["len_ratio"] = lengths[i] / mean_len if mean_len else 0.0
        f["log_len"] = math.log1p(lengths[i])
        f["closing_phrase"] = 1.0 if _CLOSING.match(sentences[i].strip().lower()) else 0.0
        feats.append(f)
    return feats


@lru_cache(maxsize=1)
def _model() -> dict:
    try:
        text = resources.files("caption_debias").joinpath("assets", MODEL_ASSET).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"caption_debias/assets/{MODEL_ASSET} is missing: reinstall the package") from None
    return json.loads(text)


def raw_scores(sentences: list[str], weights: dict[str, float] | None = None) -> list[float]:
    """Linear scores before squashing (higher = more summary-like)."""
    w = _model()["weights"] if weights is None else weights
    return [sum(w.get(k, 0.0) * v for k, v in f.items()) for f in sentence_features(sentences)]


def summary_scores(sentences: list[str]) -> list[float]:
    """Score in [0, 1] per sentence for how much it summarises the caption (position-free)."""
    if not sentences:
        return []
    m = _model()
    a, b = m["calibration"]["scale"], m["calibration"]["offset"]
    out = []
    for z in raw_scores(sentences, m["weights"]):
        t = a * z + b
        out.append(1.0 / (1.0 + math.exp(-t)) if t > -60 else 0.0)
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
