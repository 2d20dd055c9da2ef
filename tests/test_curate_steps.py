"""Each curate step alone: the batched path gives what the one-row specification gives."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from curate_fixtures import caption
from pictures import noise, not_a_picture, scene, truncated, write

from caption_debias.curate import dedup, images, minhash, quality
from caption_debias.curate.options import CurateOptions


def _random_rows(rng: random.Random, n: int) -> list[list[list[int]]]:
    rows = []
    for _ in range(n):
        vocab = rng.randrange(2, 40)
        sents = []
        for _ in range(rng.randrange(0, 7)):
            sents.append([rng.randrange(vocab) for _ in range(rng.randrange(0, 9))])
        if rows and rng.random() < 0.2:  # a loop: an earlier sentence again
            sents += [s for s in sents[:1] for _ in range(rng.randrange(1, 4))]
        if rng.random() < 0.2:  # a phrase loop to the end, maybe cut inside a copy, maybe then a mark
            phrase = [rng.randrange(vocab) for _ in range(rng.randrange(1, 40))]
            loop = phrase * rng.randrange(1, 6) + phrase[: rng.randrange(len(phrase))] + [99] * rng.randrange(2)
            sents.append(loop)
        rows.append(sents)
    return rows


def test_quality_batch_equals_specification():
    rng = random.Random(0)
    rows = _random_rows(rng, 400)
    captions = [
        rng.choice(["A dog.", "A dog", "A dog. And the", "One. Two", "Hi,", "", "Ok. (Fine.)", "a b"]) for _ in rows
    ]
    arr = pa.array(rows, pa.list_(pa.list_(pa.int32())))
    for arr_slice, lo in ((arr, 0), (arr.slice(37, 200), 37)):  # sliced arrays (offset != 0) too
        got = quality.signals_batch(arr_slice, captions[lo : lo + len(arr_slice)])
        for i in range(len(arr_slice)):
            sents = rows[lo + i]
            flat = [t for s in sents for t in s]
            assert got["caption_repeated_sentences"][i] == quality.repeated_sentences(sents)
            assert got["caption_repetition"][i] == pytest.approx(quality.repetition(flat), abs=1e-6)
            assert got["caption_truncated"][i] == quality.truncated(captions[lo + i], len(sents))
            mark = quality.ends_with_mark(captions[lo + i])
            assert got["caption_tail_loop"][i] == quality.tail_loop(flat, mark)
    assert sum(quality.tail_loop([t for s in r for t in s]) > 0 for r in rows) > 20  # loops were planted


@pytest.mark.parametrize(
    "text,n,expected",
    [
        ("A man riding a wave on top of a surfboard", 1, False),  # COCO style: one sentence, no period
        ("A dog sits. It looks at the", 2, True),
        ("A dog sits. It looks at the camera", 2, True),  # several sentences, last one unfinished
        ("A dog sits. It looks at the camera.", 2, False),
        ('A sign reads "OPEN." The door is red.', 2, False),
        ("A dog sits. (It is brown.)", 2, False),
        ("The scene shows a park, with", 1, True),
        ("A red kite flies over the", 1, True),
        ("A table with a cake,", 1, True),
    ],
)
def test_truncation_rule(text, n, expected):
    assert quality.truncated(text, n) is expected


def test_repetition_definition():
    loop = [1, 2, 3, 4, 5] * 4
    assert quality.repetition(loop) == pytest.approx(15 / 20)  # every token after the first cycle
    assert quality.repetition(list(range(30))) == 0.0
    assert quality.repeated_sentences([[1, 2, 3], [4, 5, 6], [1, 2, 3], [7, 7], [7, 7]]) == 1  # short ones don't count


def test_tail_loop_definition():
    phrase = [7, 8, 9, 10, 11]
    text = list(range(100, 140))
    assert quality.tail_loop(text + phrase * 3) == 15  # three copies
    assert quality.tail_loop(text + phrase * 3 + phrase[:2]) == 17  # cut inside the fourth
    assert quality.tail_loop(text + phrase * 2 + phrase[:4]) == 0  # under three copies
    assert quality.tail_loop(text + phrase * 3 + [5]) == 0 and quality.tail_loop(text + phrase * 3 + [5], True) == 15
    assert quality.tail_loop(text + [1, 2, 5] * 3, True) == 9  # the mark is part of each copy ("a dog, a dog, a dog,")
    assert quality.tail_loop(text + [4, 4, 4]) == 3 and quality.tail_loop(text + [4, 4]) == 0
    assert quality.tail_loop(text + phrase * 6, max_period=4) == 0  # a span longer than the longest period
    assert quality.tail_loop(phrase * 3 + text) == 0  # a loop the caption left is not a tail loop
    assert quality.ends_with_mark("A dog. ") and not quality.ends_with_mark("a dog") and not quality.ends_with_mark("")
    assert quality.is_repetitive(0.0, 0, 15) and not quality.is_repetitive(0.0, 0, 0)


def test_shingle_hashes_match_the_shingle_sets_and_minhash_estimates_jaccard():
    rng = random.Random(1)
    rows = [[rng.randrange(50) for _ in range(rng.randrange(0, 60))] for _ in range(300)]
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    flat = np.array([t for r in rows for t in r], np.int32)
    hashes, h_off = minhash.shingle_hashes(flat, offsets)
    for i, r in enumerate(rows):
        assert len(set(hashes[h_off[i] : h_off[i + 1]].tolist())) == len(minhash.shingles(r))
    # signatures estimate the exact Jaccard of the shingle sets
    base = [rng.randrange(5000) for _ in range(200)]
    variants = [base, base[:150] + [rng.randrange(5000) for _ in range(50)], base[20:], list(range(200))]
    off = np.zeros(len(variants) + 1, np.int64)
    np.cumsum([len(v) for v in variants], out=off[1:])
    h, ho = minhash.shingle_hashes(np.array([t for v in variants for t in v], np.int32), off)
    sigs = minhash.signatures(h, ho)
    for v, sig in zip(variants, sigs):
        exact = minhash.jaccard(minhash.shingles(base), minhash.shingles(v))
        assert minhash.estimate(sigs[0], sig) == pytest.approx(exact, abs=0.12)


def test_image_facts_draft_decoding_and_faults(tmp_path):
    im = scene(5, (1024, 768))
    write(im, tmp_path / "a.jpg", quality=90)
    write(im.resize((512, 384)), tmp_path / "b.jpg", quality=60)
    write(im, tmp_path / "c.png")
    truncated(tmp_path / "cut.jpg", (tmp_path / "a.jpg").read_bytes(), 5000)
    not_a_picture(tmp_path / "text.jpg", "hello")
    a, b, c = (images.image_facts(tmp_path / n) for n in ("a.jpg", "b.jpg", "c.png"))
    assert (a.status, a.width, a.height) == (images.OK, 1024, 768)  # the header size, not the draft's
    assert images.hamming(a.phash, b.phash) <= 4 and images.hamming(a.phash, c.phash) <= 4
    assert scene(6, (1024, 768)) and images.hamming(a.phash, images.phash_of(scene(6, (256, 192)))) > 10
    import hashlib

    assert a.sha256 == hashlib.sha256((tmp_path / "a.jpg").read_bytes()).digest()
    assert images.image_facts(tmp_path / "cut.jpg").status == images.UNREADABLE
    assert images.image_facts(tmp_path / "text.jpg").status == images.UNREADABLE
    assert images.image_facts(tmp_path / "none.jpg").status == images.MISSING
    batch = images.image_facts_batch([tmp_path / "a.jpg", None, tmp_path / "none.jpg", tmp_path / "b.jpg"], 3)
    assert [f.status for f in batch] == [images.OK, images.NOT_CHECKED, images.MISSING, images.OK]
    assert batch[0] == a and batch[3] == b
    assert images.top_folder("sam/images/x.jpg") == "sam/" and images.top_folder("x.jpg") == "(top level)"


@pytest.mark.parametrize("progressive", [False, True])
def test_image_facts_finds_a_file_cut_anywhere(tmp_path, progressive):
    # larger than Pillow's 64 KiB read block, so a cut lands before, in and after the first block
    from PIL import Image

    im = Image.blend(scene(7, (800, 600)), noise((800, 600), 0), 0.3)
    write(im, tmp_path / "full.jpg", quality=95, progressive=progressive)
    data = (tmp_path / "full.jpg").read_bytes()
    assert len(data) > 3 * 65536
    whole = images.image_facts(tmp_path / "full.jpg")
    assert whole.status == images.OK and (whole.width, whole.height) == (800, 600)
    for cut in (300, 65535, 65537, len(data) // 2, len(data) - 5000, len(data) - 2, len(data) - 1):
        truncated(tmp_path / "cut.jpg", data, cut)
        facts = images.image_facts(tmp_path / "cut.jpg")
        assert facts.status == images.UNREADABLE, cut
        assert facts.error


def _signal_world(tmp_path: Path, n: int, seed: int) -> tuple[dedup.SignalTable, list[dedup.DupRow]]:
    """Random rows with planted exact and near duplicates, written as one signals file."""
    import pyarrow.parquet as pq

    from caption_debias.curate.options import NUM_PERM, lsh_params
    from caption_debias.curate.signals import band_name, caption_hash

    rng = random.Random(seed)
    texts, keys, phashes = [], [], []
    for i in range(n):
        r = rng.random()
        if i and r < 0.15:
            texts.append(texts[rng.randrange(i)])  # exact
        elif i and r < 0.35:
            words = texts[rng.randrange(i)].split()
            for j in rng.sample(range(len(words)), rng.randrange(1, 6)):
                words[j] = rng.choice(["purple", "golden", "tiny"])
            texts.append(" ".join(words))
        else:
            texts.append(caption(rng, rng.randrange(2, 9)))
        keys.append(bytes([rng.randrange(4)]) * 8 if rng.random() < 0.3 else i.to_bytes(8, "little"))
        phashes.append(
            rng.getrandbits(64) if rng.random() < 0.5 or not phashes else phashes[-1] ^ (1 << rng.randrange(64))
        )
    from caption_debias.text.tokenize import get_tokenizer

    tok = get_tokenizer()
    ids = [tok.encode(t) for t in texts]
    off = np.zeros(n + 1, np.int64)
    np.cumsum([len(x) for x in ids], out=off[1:])
    h, ho = minhash.shingle_hashes(np.array([t for x in ids for t in x], np.int32), off)
    sigs = minhash.signatures(h, ho)
    lsh = lsh_params(0.8)
    bands = minhash.band_keys(sigs, *lsh)
    cols = {
        "order": np.arange(n, dtype=np.int64),
        "key": [f"k{i}" for i in range(n)],
        "image_status": np.zeros(n, np.int8),
        "image_width": pa.array([64] * n, pa.int32()),
        "image_height": pa.array([64] * n, pa.int32()),
        "image_sha256": pa.array(keys, pa.binary()),
        "image_phash": pa.array(phashes, pa.uint64()),
        "image_error": pa.nulls(n, pa.string()),
        "image_thumb": pa.nulls(n, pa.binary()),
        "image_key": pa.array(keys, pa.binary()),
        "caption_hash": pa.array([caption_hash(t) for t in texts], pa.binary(16)),
        "caption_repetition": np.zeros(n, np.float32),
        "caption_repeated_sentences": np.zeros(n, np.int32),
        "caption_tail_loop": np.zeros(n, np.int32),
        "caption_truncated": np.zeros(n, bool),
        **{band_name(b): bands[:, b] for b in range(lsh[0])},
        "signature": pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(NUM_PERM * 4), n, [None, pa.py_buffer(sigs.tobytes())]
        ),
    }
    pq.write_table(pa.table(cols), tmp_path / "s.parquet")
    rows = [dedup.DupRow(i, keys[i], phashes[i], caption_hash(texts[i]), sigs[i], bands[i]) for i in range(n)]
    return dedup.SignalTable([tmp_path / "s.parquet"], n), rows


@pytest.mark.parametrize("keep_duplicate_images", [False, True])
def test_duplicate_decisions_equal_the_sequential_specification(tmp_path, keep_duplicate_images):
    table, rows = _signal_world(tmp_path, 300, seed=3)
    options = CurateOptions(keep_duplicate_images=keep_duplicate_images)
    d = dedup.decide(table, options, images=True)
    want = dedup.reference_duplicates(rows, 0.8, not keep_duplicate_images, "image sha256")
    got = {
        o: (dedup.REASONS[d.reason[o]], d.ref[o], d.detail[o]) for o in np.flatnonzero(d.reason != dedup.KEPT).tolist()
    }
    assert got == want
    assert {r for r, _, _ in want.values()} >= {"duplicate_caption", "near_duplicate_caption"}
    if not keep_duplicate_images:
        assert any(detail["by"] == "image phash" for _, _, detail in want.values())
    # duplicate_count counts the rows that point at each kept row
    assert int(d.duplicate_count.sum()) == len(want)


def test_last_word_equals_the_regex_it_replaces_and_caption_hashes_equal_the_specification():
    import re

    from caption_debias.curate.signals import caption_hash, caption_hashes

    rng = random.Random(0)
    pattern = re.compile(r"([A-Za-z]+)\W*$")
    for _ in range(5000):
        text = "".join(rng.choice('abAB é1_.,"\n)') for _ in range(rng.randrange(12)))
        m = pattern.search(text)
        assert quality.last_word(text) == (m.group(1) if m else "")
    chars = " \t\n\x0b\x0c\r\x1c\x1d\x1e\x1fAaBb.\u00a0\u2003ÉİßΣ"
    caps = ["".join(rng.choice(chars) for _ in range(rng.randrange(12))) for _ in range(3000)]
    assert caption_hashes(pa.array(caps)) == [caption_hash(c) for c in caps]
    assert caption_hash("  A  Dog\n runs ") == caption_hash("a dog runs")


def test_band_keys_are_equal_exactly_where_a_band_of_minima_is():
    rng = np.random.default_rng(5)
    for bands, rows in ((22, 7), (40, 4), (1, 160)):
        sigs = rng.integers(0, 2**32, (200, 160), dtype=np.uint64).astype(np.uint32)
        sigs[100:, : rows * 2] = sigs[:100, : rows * 2]  # rows 100+ share bands 0 and 1 with rows 0-99
        keys = minhash.band_keys(sigs, bands, rows)
        assert keys.shape == (200, bands)
        same = keys[100:] == keys[:100]
        assert same[:, : min(2, bands)].all() and (bands == 1 or not same[:, 2:].any())
        assert len(np.unique(keys[:100, 0])) == 100


def test_packed_shingle_path_equals_the_general_path_packed():
    rng = random.Random(4)
    rows = [[rng.randrange(49408) for _ in range(rng.choice([0, 1, 2, 3, 4, 5, 30]))] for _ in range(500)]
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    flat = np.array([t for r in rows for t in r], np.int32)
    for n in (1, 3, 4):
        fast, fo = minhash.shingle_hashes(flat, offsets, n, packed=True)
        # the general path, packing the same way: rebuild each row's windows by hand
        want = []
        for r in rows:
            grams = [tuple(r[i : i + n]) for i in range(len(r) - n + 1)] if len(r) >= n else ([tuple(r)] if r else [])
            for g in grams:
                word = 0
                for k in range(n):
                    word |= (g[k] if k < len(g) else 0xFFFF) << (16 * k)
                want.append(word)
        mixed = minhash._mix(np.array(want, np.uint64) ^ minhash._M1) if want else np.zeros(0, np.uint64)
        assert np.array_equal(fast, mixed) and fo[-1] == len(want)
        slow, so = minhash.shingle_hashes(flat, offsets, n, packed=False)
        assert np.array_equal(fo, so) and len(set(slow.tolist())) == len(set(fast.tolist()))
