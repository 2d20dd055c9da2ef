"""Caption quality signals: repetition loops and captions cut off mid-sentence.

Signals are columns of the curated shards; the reasons are thresholds on them (options.py):
- caption_repeated_sentences: sentences of REPEATED_SENTENCE_MIN_TOKENS+ tokens whose ids
  equal an earlier sentence of the same caption (a generator stuck in a loop);
- caption_repetition: fraction of the caption's tokens inside a repeated occurrence of a
  token 4-gram (the first occurrence does not count), in the spirit of Gopher's
  duplicate n-gram fraction (Rae et al. 2021), on tokens instead of characters;
- caption_tail_loop: tokens in the loop the caption ends in (`tail_loop`): a generator stuck
  in a loop repeats a phrase until its length limit, so the caption ends in back-to-back
  copies of one span (only in the signals files and removal details: a kept row has none);
- caption_truncated: the caption stops mid-sentence (`truncated`).

`repeated_sentences`, `repetition`, `tail_loop` and `truncated` are the one-caption
specifications; `signals_batch` computes the same for a whole shard from its Arrow columns.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from caption_debias.curate.minhash import _combine, _mix, shingle_hashes
from caption_debias.curate.options import (
    REPEATED_SENTENCE_MIN_TOKENS,
    REPETITION_NGRAM,
    TAIL_LOOP_MAX_PERIOD,
    TAIL_LOOP_MIN_COPIES,
)

# Words a sentence cannot end on: articles, possessives, prepositions that need an object,
# conjunctions, auxiliaries. Words that may also end a sentence as adverbs or pronouns
# ("on", "in", "up", "by", "across", "through", "between", "behind", "her", "it", "like")
# are left out.
DANGLING = frozenset(
    "a an the of and or but nor with to from for at into onto as than whose its their his our your my "
    "is are was were be been has have had very such while whereas including among toward towards featuring "
    "during amongst amid via".split()
)
_CLOSERS = "\"'”’)]}»*_"
_TERMINAL = ".!?…。！？"
_OPEN_ENDS = ",;:-–—(/&+"
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def last_word(text: str) -> str:
    """The run of ASCII letters the text ends on, before any trailing non-word characters ('' if none).

    Equal to re.search(r"([A-Za-z]+)\\W*$", text) but linear: that search retries at every
    position of a long caption.
    """
    j = len(text)
    while j and not (text[j - 1].isalnum() or text[j - 1] == "_"):
        j -= 1
    i = j
    while i and text[i - 1] in _ASCII_LETTERS:
        i -= 1
    return text[i:j]


def truncated(caption: str, n_sentences: int) -> bool:
    """Specification: does the caption stop mid-sentence?

    True when it ends on a word no sentence ends on ('... on top of the'), on a comma,
    colon, dash or opening bracket, or when it has several sentences and the last one has no
    sentence-final punctuation (a single sentence without a period, COCO's style, is fine).
    """
    text = caption.rstrip()
    core = text.rstrip(_CLOSERS + " \t\n")
    if not core:
        return False
    if core[-1] in _OPEN_ENDS:
        return True
    if core[-1] not in _TERMINAL and last_word(core).lower() in DANGLING:
        return True
    return n_sentences >= 2 and core[-1] not in _TERMINAL


def repeated_sentences(sentence_tokens: list[list[int]]) -> int:
    """Specification: sentences (of enough tokens) equal to an earlier sentence of the caption."""
    seen: set[tuple[int, ...]] = set()
    count = 0
    for toks in sentence_tokens:
        if len(toks) < REPEATED_SENTENCE_MIN_TOKENS:
            continue
        key = tuple(toks)
        if key in seen:
            count += 1
        seen.add(key)
    return count


def repetition(tokens: list[int], n: int = REPETITION_NGRAM) -> float:
    """Specification: fraction of tokens inside a repeated (not first) occurrence of an n-gram."""
    if len(tokens) < n:
        return 0.0
    seen: set[tuple[int, ...]] = set()
    covered = [False] * len(tokens)
    for i in range(len(tokens) - n + 1):
        gram = tuple(tokens[i : i + n])
        if gram in seen:
            covered[i : i + n] = [True] * n
        seen.add(gram)
    return sum(covered) / len(tokens)


def ends_with_mark(caption: str) -> bool:
    """The caption's last non-space character is not a letter or digit (its last token is punctuation)."""
    text = caption.rstrip()
    return bool(text) and not text[-1].isalnum()


def tail_loop(
    tokens: list[int],
    ends_with_mark: bool = False,
    max_period: int = TAIL_LOOP_MAX_PERIOD,
    min_copies: int = TAIL_LOOP_MIN_COPIES,
) -> int:
    """Specification: tokens in the loop the caption ends in, 0 if none.

    The loop is the longest suffix made of `min_copies` or more back-to-back copies of one
    span of at most `max_period` tokens (the suffix has period p and is at least
    min_copies * p long; its first and last copies may be partial). A caption that ends
    with punctuation is also tried without its last token, so "a dog a dog a dog." ends in
    a loop as well as "a dog, a dog, a dog,".
    """
    best = _suffix_loop(tokens, len(tokens), max_period, min_copies)
    if ends_with_mark and tokens:
        best = max(best, _suffix_loop(tokens, len(tokens) - 1, max_period, min_copies))
    return best


def _suffix_loop(tokens: list[int], end: int, max_period: int, min_copies: int) -> int:
    """tail_loop of tokens[:end]."""
    best = 0
    for p in range(1, min(max_period, end // min_copies) + 1):
        i = end - 1
        while i - p >= 0 and tokens[i] == tokens[i - p]:
            i -= 1
        length = end - 1 - i + p  # the matched run plus its first period
        if length >= min_copies * p and length > best:
            best = length
    return best


def is_repetitive(repetition_fraction, repeated, tail_loop_tokens, repetition_max=None, repeated_sentences_max=None):
    """The repetitive_caption rule on the three signals (scalars or numpy arrays); the thresholds
    are --repetition-max and --repeated-sentences-max (None: CurateOptions' defaults)."""
    from caption_debias.curate.options import default_of

    if repetition_max is None:
        repetition_max = default_of("repetition_max")
    if repeated_sentences_max is None:
        repeated_sentences_max = default_of("repeated_sentences_max")
    return (repeated > repeated_sentences_max) | (repetition_fraction > repetition_max) | (tail_loop_tokens > 0)


def _list_parts(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(values, offsets as int64 numpy) of a list array, slices handled."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return values, offsets - offsets[0]


def row_tokens(sentence_tokens: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """From list<list<int32>>: (token ids end to end, row offsets into them, sentence offsets, sentences per row)."""
    sentences, row_sent = _list_parts(sentence_tokens)
    ids, sent_tok = _list_parts(sentences)
    tokens = np.asarray(ids, dtype=np.int32) if len(ids) else np.zeros(0, np.int32)
    return tokens, sent_tok[row_sent], sent_tok, row_sent


def _repeat_flags(keys: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """True where (group, key) occurred at an earlier position of the same group (one polars hash pass)."""
    import polars as pl

    if len(keys) == 0:
        return np.zeros(0, bool)
    combined = _mix(keys.astype(np.uint64) ^ _mix(groups.astype(np.uint64) + np.uint64(1)))
    return ~pl.Series(combined).is_first_distinct().to_numpy()


def _segment_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sum of consecutive segments of `values` (uint64, wrapping); empty segments sum to 0."""
    out = np.zeros(len(lengths), np.uint64)
    nonempty = lengths > 0
    if nonempty.any():
        starts = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        with np.errstate(over="ignore"):
            out[nonempty] = np.add.reduceat(values, starts[nonempty])
    return out


def signals_batch(sentence_tokens: pa.Array, captions: list[str]) -> dict[str, np.ndarray]:
    """The three signals for every row of a shard (same values as the specifications)."""
    tokens, row_off, sent_off, row_sent = row_tokens(sentence_tokens)
    n_rows = len(row_off) - 1
    n_sent = np.diff(row_sent)
    # repeated sentences: hash each sentence's ids with their positions, then find repeats per row
    sent_len = np.diff(sent_off)
    sent_row = np.repeat(np.arange(n_rows), n_sent)
    tok_sent = np.repeat(np.arange(len(sent_len)), sent_len)
    pos = np.arange(len(tokens)) - sent_off[tok_sent]
    tok_hash = _combine([pos.astype(np.uint64), tokens.astype(np.uint64)])
    sent_hash = _segment_sums(tok_hash, sent_len)  # sum of position-salted token hashes: a sequence hash
    sent_hash = _combine([sent_hash, sent_len.astype(np.uint64)])
    long_enough = sent_len >= REPEATED_SENTENCE_MIN_TOKENS
    rep = np.zeros(len(sent_len), bool)
    rep[long_enough] = _repeat_flags(sent_hash[long_enough], sent_row[long_enough])
    repeated = np.bincount(sent_row[rep], minlength=n_rows).astype(np.int32)
    # duplicated n-gram fraction: n-grams start at every position with n tokens left in the row
    lengths = np.diff(row_off)
    n = REPETITION_NGRAM
    grams, gram_off = shingle_hashes(tokens, row_off, n)
    gram_row = np.repeat(np.arange(n_rows), np.diff(gram_off))
    is_rep = _repeat_flags(grams, gram_row)
    is_rep &= np.repeat(lengths >= n, np.diff(gram_off))  # a short row's padded gram never repeats
    start = row_off[gram_row] + (np.arange(len(grams)) - gram_off[gram_row])
    # token j is covered when a repeated n-gram starts in [j - n + 1, j]: a difference array
    diff = np.bincount(start[is_rep], minlength=len(tokens) + 1) - np.bincount(
        start[is_rep] + n, minlength=len(tokens) + 1
    )
    covered = np.cumsum(diff[: len(tokens)]) > 0
    tok_row = np.repeat(np.arange(n_rows), lengths)
    cov_count = np.bincount(tok_row[covered], minlength=n_rows)
    fraction = np.where(lengths > 0, cov_count / np.maximum(lengths, 1), 0.0).astype(np.float32)
    marks = np.fromiter((ends_with_mark(c) for c in captions), bool, n_rows)
    loops = _tail_loops(tokens, row_off, gram_off, is_rep, marks)
    trunc = np.fromiter((truncated(c, int(k)) for c, k in zip(captions, n_sent)), bool, n_rows)
    return {
        "caption_repetition": fraction,
        "caption_repeated_sentences": repeated,
        "caption_tail_loop": loops,
        "caption_truncated": trunc,
    }


def _tail_loops(
    tokens: np.ndarray, row_off: np.ndarray, gram_off: np.ndarray, gram_repeats: np.ndarray, marks: np.ndarray
) -> np.ndarray:
    """tail_loop of every row: the specification, run only on the rows that can end in a loop.

    A loop of period p >= 2 and at least 3p tokens ends in an n-gram (n = 4 <= 2p) that
    also starts p tokens earlier, so its last n-gram is a repeat; a loop of period 1 ends
    in three equal tokens. Rows with neither (nearly all) have no loop.
    """
    assert TAIL_LOOP_MIN_COPIES >= 3 and REPETITION_NGRAM <= 4  # what the filter relies on
    start, end = row_off[:-1], row_off[1:]
    n = REPETITION_NGRAM

    def may_loop_before(stop: np.ndarray) -> np.ndarray:
        """Rows whose tokens[start:stop] may end in a loop."""
        length = stop - start
        last_gram = np.zeros(len(start), bool)
        has = length >= n
        last_gram[has] = gram_repeats[gram_off[:-1][has] + (length[has] - n)]
        triple = np.zeros(len(start), bool)
        has3 = length >= 3
        e = stop[has3]
        triple[has3] = (tokens[e - 1] == tokens[e - 2]) & (tokens[e - 2] == tokens[e - 3])
        return last_gram | triple

    marks = marks & (end > start)
    candidates = may_loop_before(end) | (marks & may_loop_before(end - marks))
    out = np.zeros(len(start), np.int32)
    for r in np.flatnonzero(candidates).tolist():
        out[r] = tail_loop(tokens[start[r] : end[r]].tolist(), bool(marks[r]))
    return out
