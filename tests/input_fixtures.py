"""Raw inputs in the formats the readers take, written for the tests (prepare, readers, storage)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_dci(root: Path) -> None:
    (root / "annotations").mkdir(parents=True)
    (root / "photos").mkdir()
    masks = {
        "0": {"idx": 0, "parent": -1, "label": "dog", "caption": "A brown dog.", "mask_quality": 0},
        "1": {"idx": "1", "parent": "0", "label": "tail", "caption": "Its tail wags.", "mask_quality": 0},
        "2": {"idx": 2, "parent": -1, "label": "blur", "caption": "Unusable.", "mask_quality": 2},
    }
    anns = {
        "1-data.json": {
            "image": "sa_1.jpg",
            "short_caption": "A dog.",
            "extra_caption": "It sits on grass. The sun shines.",
            "mask_data": masks,
            "mask_keys": list(masks),
            "height": 10,
            "width": 20,
        },
        "2-data.json": {"image": "sa_2.jpg", "short_caption": "A wall.", "extra_caption": "", "mask_data": {}},
    }
    for name, data in anns.items():
        (root / "annotations" / name).write_text(json.dumps(data))
    (root / "annotations" / "3-data.json").write_text("{broken")
    (root / "splits.json").write_text(json.dumps({"train": ["1-data.json"], "valid": [], "test": ["2-data.json"]}))


def write_urban1k(root: Path) -> Path:
    """An Urban1k layout (image/N.jpg, caption/N.txt) of three pairs and a caption without its image; the images
    are placeholders (the readers list them, nothing decodes them)."""
    (root / "image").mkdir(parents=True)
    (root / "caption").mkdir()
    for i in (1, 2, 10):
        (root / "image" / f"{i}.jpg").write_bytes(b"jpg")
        (root / "caption" / f"{i}.txt").write_text(f"Street {i}. Cars park.\n")
    (root / "caption" / "11.txt").write_text("No image for this one.")
    return root


def sharegpt_element(i: int, image: str, text: str, **fields: Any) -> dict:
    """ShareGPT4V element `s{i}`: a question about `image` and `text` as the answer."""
    return {
        "id": f"s{i}",
        "image": image,
        "conversations": [
            {"from": "human", "value": "<image>\nWhat is this photo about?"},
            {"from": "gpt", "value": text},
        ],
        **fields,
    }


def write_sharegpt(path: Path, n: int, bad_every: int = 0) -> list[dict]:
    elements = []
    for i in range(n):
        el = {
            "id": f"r{i % (n - 3) if n > 10 else i}",
            "image": f"coco/train2017/{i:06d}.jpg",
            "conversations": [
                {"from": "human", "value": "<image>\nDescribe."},
                {"from": "gpt", "value": f"Picture {i}. " + CAPTIONS[i % len(CAPTIONS)]},
            ],
        }
        if bad_every and i % bad_every == 1:
            el["conversations"] = el["conversations"][:1]  # no gpt turn
        if bad_every and i % bad_every == 2:
            el["image"] = "../outside.jpg"
        elements.append(el)
    path.write_text(json.dumps(elements, ensure_ascii=False), encoding="utf-8")
    return elements


CAPTIONS = [
    "The image shows a harbour at dusk. Several boats are moored.\n\nIn the background, hills rise. Overall, a calm scene.",
    "A red bicycle leans on a wall.",
    "Dr. Smith stands near the U.S. flag. He smiles! Is it noon? Yes.",
    "Ünïcödé café scene — two cups, one croissant. The light is warm.",
]
