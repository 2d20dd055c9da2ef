"""Caption near-duplicates: token n-gram MinHash signatures (rensa) and LSH band keys.

Captions are compared as sets of n-grams of their CLIP token ids, read from the shards'
`sentence_tokens`: the tokenizer already lower-cased, cleaned and split them, so no text is
re-split here. Common words are one token each, so a 3-token n-gram is about a word 3-gram.

Specification (`shingles`, `jaccard`): plain Python over one caption. Batched path
(`signatures`, `band_keys`): numpy over every caption of a shard, rensa's Rust MinHash over
one flat buffer. tests/test_curate_steps.py checks the two agree.
"""

from __future__ import annotations

import numpy as np

from caption_debias.curate.options import NUM_PERM, SHINGLE_TOKENS

SEED = 1
_MISSING = np.uint64(0xFFFF_FFFF_FFFF_FFFF)  # pads captions shorter than one n-gram
_PAD16 = np.uint64(0xFFFF)  # the same, for packed 16-bit ids (CLIP's largest id is 49407)
_M1 = np.uint64(0x9E37_79B9_7F4A_7C15)
_M2 = np.uint64(0xBF58_476D_1CE4_E5B9)
_M3 = np.uint64(0x94D0_49BB_1331_11EB)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised (no library hashes numpy rows in place)."""
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(30))) * _M2
        h = (h ^ (h >> np.uint64(27))) * _M3
    return h ^ (h >> np.uint64(31))


def _combine(values: list[np.ndarray]) -> np.ndarray:
    h = np.zeros(len(values[0]), np.uint64)
    with np.errstate(over="ignore"):
        for v in values:
            h = _mix((h + _M1) ^ v.astype(np.uint64))
    return h


def shingle_hashes(
    tokens: np.ndarray, offsets: np.ndarray, n: int = SHINGLE_TOKENS, packed: bool | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every n-gram of every row (rows shorter than n: one padded n-gram; empty rows: none).

    tokens: all rows' ids end to end; offsets: row i is tokens[offsets[i]:offsets[i+1]].
    Returns (hashes uint64, row offsets into hashes). CLIP ids fit in 16 bits, so up to four
    ids are packed into one 64-bit word exactly (no collisions) before one mixing pass; the
    general path (any ids, any n) combines them with a hash instead.
    """
    offsets = offsets.astype(np.int64)
    lengths = np.diff(offsets)
    counts = np.where(lengths > 0, np.maximum(lengths - n + 1, 1), 0)
    out_offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(counts, out=out_offsets[1:])
    if out_offsets[-1] == 0:
        return np.zeros(0, np.uint64), out_offsets
    if packed is None:
        packed = n * 16 <= 64 and int(tokens.max()) < _PAD16
    if packed:
        return _packed_shingles(tokens, offsets, lengths, n), out_offsets
    total = int(out_offsets[-1])
    row = np.repeat(np.arange(len(lengths)), counts)
    pos = np.arange(total) + np.repeat(offsets[:-1] - out_offsets[:-1], counts)  # start of each n-gram
    end = offsets[row + 1]
    toks = tokens.astype(np.uint64)
    parts = []
    for k in range(n):
        idx = pos + k
        parts.append(np.where(idx < end, toks[np.minimum(idx, len(toks) - 1)], _MISSING))
    return _combine(parts), out_offsets


def _packed_shingles(tokens: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, n: int) -> np.ndarray:
    """Sliding windows over the flat ids packed 16 bits each, keeping the windows inside a row."""
    size = len(tokens)
    ext = np.concatenate([tokens.astype(np.uint64), np.full(n - 1, _PAD16, np.uint64)])
    word = ext[:size].copy()
    for k in range(1, n):
        word |= ext[k : size + k] << np.uint64(16 * k)
    valid = np.ones(size, bool)
    starts, ends = offsets[:-1], offsets[1:]
    for k in range(1, n):  # a window starting in a row's last n-1 tokens runs into the next row
        idx = ends - k
        valid[idx[idx >= starts]] = False
    short = np.flatnonzero((lengths > 0) & (lengths < n))
    if len(short):  # a row shorter than n: one window of its ids, padded
        s, e = starts[short], ends[short]
        pad = np.zeros(len(short), np.uint64)
        for k in range(n):
            pad |= np.where(s + k < e, ext[np.minimum(s + k, size - 1)], _PAD16) << np.uint64(16 * k)
        word[s] = pad
        valid[s] = True
    with np.errstate(over="ignore"):
        return _mix(word[valid] ^ _M1)


def shingles(tokens: list[int], n: int = SHINGLE_TOKENS) -> set[tuple[int, ...]]:
    """Specification: the caption's set of token n-grams (a shorter caption is one n-gram)."""
    if not tokens:
        return set()
    if len(tokens) < n:
        return {tuple(tokens)}
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def jaccard(a: set, b: set) -> float:
    """Specification: the exact Jaccard similarity the signatures estimate."""
    return len(a & b) / len(a | b) if a or b else 1.0


def signatures(hashes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """MinHash signatures, one row of NUM_PERM uint32 per caption (rensa, one call per batch)."""
    import rensa

    if len(offsets) <= 1:
        return np.zeros((0, NUM_PERM), np.uint32)
    matrix = rensa.RMinHash.digest_matrix_from_flat_token_hashes(
        np.ascontiguousarray(hashes, np.uint64), np.ascontiguousarray(offsets, np.uint64), NUM_PERM, SEED
    )
    return np.array(matrix.to_rows(), np.uint32).reshape(len(offsets) - 1, NUM_PERM)


def band_keys(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """LSH band keys: (captions, bands) uint64 over the first bands * rows minima; captions
    sharing a key in some band are candidates (options.lsh_params chooses bands and rows)."""
    minima = np.ascontiguousarray(sigs[:, : bands * rows], np.uint32).reshape(len(sigs), bands, rows)
    # a multiply-add of the band's minima with odd 64-bit constants (one pass; wraps mod 2^64),
    # then mixed: a collision of two different bands only adds a candidate, which is verified
    with np.errstate(over="ignore"):
        weights = _mix(np.arange(1, rows + 1, dtype=np.uint64) * _M1) | np.uint64(1)
        h = np.einsum("cbr,r->cb", minima.astype(np.uint64), weights)
    return _mix(h)


def estimate(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """Estimated Jaccard similarity of two signatures (fraction of equal minima)."""
    return float(np.count_nonzero(sig_a == sig_b)) / NUM_PERM
