"""Evaluation sets as signals: `--decontaminate NAME=PATH` read by the eval loaders themselves.

NAME is any `eval --benchmark` name and PATH its public layout (evaluate/benchmarks.py), so
curate removes exactly the images and captions `eval` would score. `sharegpt4v-1k` is the
first 1,000 records of a ShareGPT4V captioner file; its images are looked up under
curate's --image-root (the training images), as they are the same files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from caption_debias import storage
from caption_debias.curate import images as img
from caption_debias.curate import minhash
from caption_debias.curate.signals import caption_hash
from caption_debias.errors import UserError


@dataclass
class EvalSignals:
    """Every eval item of every set, as arrays (items are images and captions, labelled)."""

    image_labels: list[str] = field(default_factory=list)  # "NAME:path"
    image_sha256: list[bytes] = field(default_factory=list)
    image_phash: list[int] = field(default_factory=list)
    image_thumb: list[bytes | None] = field(default_factory=list)  # small or flat images (images.thumb_of)
    caption_labels: list[str] = field(default_factory=list)  # "NAME:caption N"
    caption_hashes: list[bytes] = field(default_factory=list)
    signatures: np.ndarray = field(default_factory=lambda: np.zeros((0, minhash.NUM_PERM), np.uint32))
    bands: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.uint64))  # (items, bands)
    sets: list[dict[str, Any]] = field(default_factory=list)  # for the manifest


def _uses_training_root(name: str) -> bool:
    return name.startswith("sharegpt4v-1k")


def _add_images(ev: EvalSignals, name: str, paths: list, threads: int) -> int:
    """The facts of an eval set's images, read through the image source (images.image_facts_batch); how many are OK."""
    found = 0
    for p, f in zip(paths, img.image_facts_batch(paths, threads)):
        if f.status == img.OK:
            assert f.sha256 is not None and f.phash is not None  # an OK image has both
            found += 1
            ev.image_labels.append(f"{name}:{p}")
            ev.image_sha256.append(f.sha256)
            ev.image_phash.append(f.phash)
            ev.image_thumb.append(_thumb_later(p) if f.thumb == img.LATER else f.thumb)
    return found


def _thumb_later(path: str) -> bytes:
    """The colour thumbnail of a large flat eval image, read again through the image source."""
    from caption_debias.image_source import ImageSource, Root

    folder, name = os.path.split(os.path.realpath(path))
    return img.thumb_of_bytes(ImageSource(Root(folder, folder)).read(name), name)


def load(specs: list[str], image_root: str | None, lsh: tuple[int, int], threads: int = 4) -> EvalSignals:
    from caption_debias.evaluate.benchmarks import load_benchmark
    from caption_debias.text.tokenize import get_tokenizer

    tokenizer = get_tokenizer()
    ev = EvalSignals()
    all_tokens: list[list[int]] = []
    for spec in specs:
        name, _, path = spec.partition("=")
        root = image_root if (_uses_training_root(name) and image_root) else None
        if root is not None and storage.is_remote(root):
            raise UserError(
                f"--decontaminate {spec}: its images are looked up under --image-root, which must be a local folder here"
            )
        data = load_benchmark(name, path, root)
        found = _add_images(ev, name, data.images, threads) if image_root is not None else 0
        for i, sentences in enumerate(data.captions):
            ev.caption_labels.append(f"{name}:caption {i}")
            ev.caption_hashes.append(caption_hash(" ".join(sentences)))
            all_tokens.append([t for s in sentences for t in tokenizer.encode(s)])
        ev.sets.append(
            {
                "name": name,
                "path": path,
                "definition": data.definition,
                "images": data.n_images,
                "images_compared": found,
                "captions": len(data.captions),
            }
        )
    if all_tokens:
        lengths = np.array([len(t) for t in all_tokens], np.int64)
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter((t for ts in all_tokens for t in ts), np.int32, int(offsets[-1]))
        hashes, h_off = minhash.shingle_hashes(flat, offsets)
        ev.signatures = minhash.signatures(hashes, h_off)
        ev.bands = minhash.band_keys(ev.signatures, *lsh)
    return ev
