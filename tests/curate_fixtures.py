"""Small worlds for the curate tests: images and captions with every fault planted, prepared by `prepare`."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from pictures import not_a_picture, scene, truncated, write

NOUNS = "harbour boat lamp bridge tree window bicycle market tower garden river cat dog kite bench fence road cloud hill statue".split()
ADJS = "red small wooden old bright narrow tall quiet rusty green striped round dusty empty crowded pale".split()
VERBS = "stands rests leans hangs sits floats waits glows".split()
OPENERS = "A|One|The|Some|Another|This".split("|")
LINKS = "next to a|close to some|facing one|opposite a|beyond the|with a|far from the".split("|")
ENDINGS = (
    "in daylight|at dusk|under rain|in fog|with shadows|in spring|at noon|seen from afar|in winter|by the road".split(
        "|"
    )
)
PLACES = "near the water|beside a wall|under the sky|on a hill|in the corner|behind the gate|along the street|at the edge".split(
    "|"
)


def caption(rng: random.Random, sentences: int = 8) -> str:
    """A clean caption: distinct random sentences, each ending with a period."""
    out = []
    for _ in range(sentences):
        a, n, v, p, a2, n2 = (
            rng.choice(ADJS),
            rng.choice(NOUNS),
            rng.choice(VERBS),
            rng.choice(PLACES),
            rng.choice(ADJS),
            rng.choice(NOUNS),
        )
        link = rng.choice(LINKS)
        out.append(f"{rng.choice(OPENERS)} {a} {n} {v} {p}, {link} {a2} {n2} {rng.choice(ENDINGS)}.")
    return " ".join(out)


def make_world(root: Path, n_clean: int = 12) -> dict:
    """Writes root/images/{sam,coco}/..., root/table.jsonl, an Urban1k-layout eval set, prepares it.

    Returns {'prepared', 'images', 'eval', 'expected': {key: reason}, 'kept': [keys]}.
    """
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    rng = random.Random(7)
    images = root / "images"
    (images / "sam").mkdir(parents=True, exist_ok=True)
    (images / "coco").mkdir(parents=True, exist_ok=True)
    rows, expected = [], {}

    def add(key: str, image: str, text: str, reason: str | None = None) -> None:
        rows.append({"key": key, "image": image, "caption": text})
        if reason:
            expected[f"table/{key}"] = reason

    clean_caps = []
    for i in range(n_clean):
        folder = "sam" if i % 2 == 0 else "coco"
        write(scene(100 + i), images / folder / f"c{i}.jpg", quality=90)
        clean_caps.append(caption(rng))
        add(f"c{i}", f"{folder}/c{i}.jpg", clean_caps[-1])
    # image faults
    add("missing", "sam/gone.jpg", caption(rng), "image_missing")
    data = (images / "sam" / "c0.jpg").read_bytes()
    full = write(scene(300), images / "sam" / "full.jpg", quality=90)
    truncated(images / "sam" / "cut.jpg", full.read_bytes(), len(data) // 2)
    add("truncated_file", "sam/cut.jpg", caption(rng), "image_unreadable")
    not_a_picture(images / "coco" / "notimage.jpg")
    add("not_an_image", "coco/notimage.jpg", caption(rng), "image_unreadable")
    write(scene(301, (20, 40)), images / "coco" / "tiny.jpg")
    add("tiny", "coco/tiny.jpg", caption(rng), "image_too_small")
    # duplicate images: a byte copy and a resized, re-encoded copy of earlier images
    shutil.copyfile(images / "sam" / "c2.jpg", images / "coco" / "copy_of_c2.jpg")
    add("byte_copy", "coco/copy_of_c2.jpg", caption(rng), "duplicate_image")
    write(scene(103).resize((72, 60)), images / "sam" / "small_c3.png")
    add("resized_copy", "sam/small_c3.png", caption(rng), "duplicate_image")
    # duplicate and near-duplicate captions on new images
    for j, (key, text, reason) in enumerate(
        [
            ("same_caption", "  " + clean_caps[4].upper().replace(" ", "   ") + " ", "duplicate_caption"),
            ("near_caption", _change_words(clean_caps[5], rng, 2), "near_duplicate_caption"),
            ("dropped_sentence", clean_caps[6].split(". ", 1)[1], "near_duplicate_caption"),
            (
                "repetitive",
                clean_caps[7].split(". ")[0] + ". " + "The lamp glows near the water. " * 5,
                "repetitive_caption",
            ),
            # a generator stuck until its length limit: a small share of the caption, no final period
            ("phrase_loop", caption(rng) + " with a red kite" * 3 + " with", "repetitive_caption"),
            ("cut_off", clean_caps[8].rsplit(" ", 4)[0], "truncated_caption"),
            ("dangling", "A red kite flies over the", "truncated_caption"),
        ]
    ):
        write(scene(400 + j), images / "sam" / f"n{j}.jpg", quality=90)
        add(key, f"sam/n{j}.jpg", text, reason)
    # eval set (Urban1k layout) whose image 1 is a training image and caption 2 a training caption
    ev = root / "Urban1k"
    (ev / "image").mkdir(parents=True, exist_ok=True)
    (ev / "caption").mkdir(parents=True, exist_ok=True)
    eval_caps = [caption(rng), caption(rng), caption(rng)]
    for k in range(3):
        write(scene(500 + k), ev / "image" / f"{k + 1}.jpg", quality=90)
        (ev / "caption" / f"{k + 1}.txt").write_text(eval_caps[k], "utf-8")
    shutil.copyfile(ev / "image" / "1.jpg", images / "coco" / "leaked.jpg")
    add("eval_image", "coco/leaked.jpg", caption(rng), "eval_overlap")
    write(scene(600), images / "coco" / "e2.jpg", quality=90)
    add("eval_caption", "coco/e2.jpg", _change_words(eval_caps[1], rng, 1), "eval_overlap")
    # a single-sentence caption without a final period is not truncated (COCO style)
    write(scene(601), images / "coco" / "plain.jpg", quality=90)
    add("coco_style", "coco/plain.jpg", "A man riding a wave on top of a surfboard")
    table = root / "table.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepared = root / "prepared"
    prepare([table], prepared, PrepareOptions(format="table", quiet=True, shard_rows=8))
    kept = [f"table/{r['key']}" for r in rows if f"table/{r['key']}" not in expected]
    return {"prepared": prepared, "images": images, "eval": ev, "expected": expected, "kept": kept}


def _change_words(text: str, rng: random.Random, n: int) -> str:
    words = text.split(" ")
    for i in rng.sample(range(1, len(words) - 1), n):
        words[i] = "purple" if words[i] != "purple" else "golden"
    return " ".join(words)


# Keys prepare accepts that a one-key-a-line text file cannot carry, or that a careless reader of one
# would change: line breaks of every kind, a carriage return, a NUL, a BOM, quotes, edge spaces.
HOSTILE_IDS = [
    "line\nbreak",
    "carriage\rreturn",
    "crlf\r\n",
    "ends with cr\r",
    "nul\x00inside",
    "u2028\u2028sep",
    "nel\x85sep",
    '"quoted"',
    " edge spaces ",
    "\ufeffbom first",
    "tab\tkey",
    "plain-1",
]


def hostile_keys_world(root: Path) -> dict:
    """A table whose rows' ids are HOSTILE_IDS (keys `table/ID`), one real picture and a distinct caption
    each, prepared and curated with nothing removed. Returns {'prepared', 'curated', 'images', 'keys'}."""
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    rng = random.Random(11)
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, ident in enumerate(HOSTILE_IDS):
        write(scene(700 + i), images / f"h{i}.jpg", quality=90)
        rows.append({"key": ident, "image": f"h{i}.jpg", "caption": caption(rng)})
    table = root / "table.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepared, curated = root / "prepared", root / "curated"
    prepare([table], prepared, PrepareOptions(format="table", quiet=True, image_root=str(images)))
    manifest = curate([str(prepared)], curated, CurateOptions(quiet=True, image_root=str(images)))
    assert manifest["counts"]["written"] == len(rows), manifest["counts"]
    return {"prepared": prepared, "curated": curated, "images": images, "keys": [f"table/{i}" for i in HOSTILE_IDS]}
