"""A synthetic long-caption world: PIL-drawn shape scenes with captions that have the real structure.

Each scene holds a few objects (shape, colour, size, grid cell) on a coloured background. Its
caption opens with a summary, then gives one detail sentence per object (size, position, a
relation to another object), and sometimes closes with an "Overall, ..." sentence. Scenes come
in hard-negative groups that share their summary, so only the detail sentences tell the members
of a group apart. Two kinds of world (`WORLDS`):

- `objects` (the demo's default): the summary is coarse (background, object count and the one
  large, salient object); group members share it and differ in which other colours and shapes
  appear, which only the detail sentences name. Telling members apart needs no colour-shape-
  position binding, so a small model can learn it from the details.
- `layouts` (the first demo world, `--preset v1`): the summary names every object (colour +
  shape) and the background; group members differ only in which cell holds which object and in
  sizes, which needs binding that the demo's small towers do not learn at its budget.

Output is the ShareGPT4V layout (one JSON array + images under OUT/images/, paths relative to
OUT), so it goes through `prepare` like a real dump. Everything is a function of the seed.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caption_debias.errors import UserError
from caption_debias.synth.options import WORLDS, SynthOptions
from caption_debias.synth.plant import PLANTED_FILE, PlantSpec, RowText, plant_leaks, plant_more, plant_plan

SHAPES = ("circle", "square", "triangle", "diamond", "cross")
COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (40, 80, 230),
    "yellow": (240, 220, 40),
    "purple": (150, 50, 200),
    "orange": (250, 140, 20),
    "white": (245, 245, 245),
}
BACKGROUNDS = {
    "grey": (128, 128, 128),
    "black": (20, 20, 20),
    "beige": (215, 200, 160),
    "teal": (20, 110, 110),
}
SIZES = {"small": 0.075, "medium": 0.115, "large": 0.155}  # radius as a fraction of the image side
# 3x3 grid cells (row, col) and how captions name them.
CELL_NAMES = {
    (0, 0): "top left corner",
    (0, 1): "top centre",
    (0, 2): "top right corner",
    (1, 0): "middle of the left side",
    (1, 1): "centre",
    (1, 2): "middle of the right side",
    (2, 0): "bottom left corner",
    (2, 1): "bottom centre",
    (2, 2): "bottom right corner",
}
CELLS = tuple(CELL_NAMES)
MIN_OBJECTS, MAX_OBJECTS = 3, 5
NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
CLOSING_PROBABILITY = 0.35

SUMMARY_TEMPLATES = (
    "The image shows {objects} on a {bg} background.",
    "This picture contains {objects} against a {bg} backdrop.",
    "A simple drawing of {objects} on a plain {bg} background.",
    "The image is a flat illustration of {count} shapes on {bg}: {objects}.",
)
# One sentence per object: size, cell and a relation to another object.
DETAIL_TEMPLATES = (
    "The {name} is {size} and sits in the {cell}, {relation} the {other}.",
    "In the {cell} there is a {size} {name}, {relation} the {other}.",
    "A {size} {name} occupies the {cell}, {relation} the {other}.",
    "The {name}, which is {size}, is placed in the {cell}, {relation} the {other}.",
)
CLOSING_TEMPLATES = (
    "Overall, the scene is a tidy arrangement of {count} shapes.",
    "Overall, the {bg} background makes the shapes stand out clearly.",
    "Overall, the composition is simple and uncluttered.",
)
# `objects` world: the summary names the background, the count and the large salient object only.
SALIENT_SUMMARY_TEMPLATES = (
    "The image shows {count} shapes on a {bg} background, the largest of them {salient}.",
    "This picture contains {count} shapes against a {bg} backdrop, with {large} standing out.",
    "A simple drawing of {count} shapes on a plain {bg} background, dominated by {large}.",
    "The image is a flat illustration of {count} shapes on {bg}, the biggest being {salient}.",
)
SALIENT_SIZE = "large"
OTHER_SIZES = ("small", "medium")


@dataclass(frozen=True)
class SceneObject:
    shape: str
    colour: str
    size: str
    cell: tuple[int, int]

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"


@dataclass(frozen=True)
class Scene:
    key: str
    group: str
    background: str
    objects: tuple[SceneObject, ...]
    world: str = "layouts"  # `objects`: objects[0] is the salient object the summary names

    @property
    def salient(self) -> SceneObject | None:
        return self.objects[0] if self.world == "objects" else None


def _with_article(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def relation(a: tuple[int, int], b: tuple[int, int]) -> str:
    """Where cell a lies relative to cell b, in words."""
    vertical = "above" if a[0] < b[0] else "below" if a[0] > b[0] else ""
    horizontal = "to the left of" if a[1] < b[1] else "to the right of" if a[1] > b[1] else ""
    if vertical and horizontal:
        return f"{vertical} and {horizontal}"
    return vertical or horizontal


def _layout(rng: random.Random, n: int) -> tuple[tuple[tuple[int, int], ...], tuple[str, ...]]:
    return tuple(rng.sample(CELLS, n)), tuple(rng.choice(tuple(SIZES)) for _ in range(n))


def sample_group(rng: random.Random, group: str, size: int) -> list[Scene]:
    """`size` scenes with the same objects and background, each in a different layout."""
    n = rng.randint(MIN_OBJECTS, MAX_OBJECTS)
    kinds = rng.sample([(s, c) for s in SHAPES for c in COLOURS], n)
    background = rng.choice(tuple(BACKGROUNDS))
    layouts: list[tuple] = []
    while len(layouts) < size:
        layout = _layout(rng, n)
        # Hard negatives differ in which cell holds which object (not only in sizes).
        if all(layout[0] != other[0] for other in layouts):
            layouts.append(layout)
    scenes = []
    for i, (cells, sizes) in enumerate(layouts):
        objects = tuple(SceneObject(s, c, z, cell) for (s, c), z, cell in zip(kinds, sizes, cells))
        scenes.append(Scene(key=f"{group}-{i}", group=group, background=background, objects=objects))
    return scenes


def sample_objects_group(rng: random.Random, group: str, size: int) -> list[Scene]:
    """`size` scenes sharing background, object count and the large salient object; each member
    has its own set of colours among the other objects (their shapes drawn freely), so members
    differ in which colours and shapes appear, and only the detail sentences say which."""
    n = rng.randint(MIN_OBJECTS, MAX_OBJECTS)
    background = rng.choice(tuple(BACKGROUNDS))
    salient_shape, salient_colour = rng.choice(SHAPES), rng.choice(tuple(COLOURS))
    others = [c for c in COLOURS if c != salient_colour]
    colour_sets: list[tuple[str, ...]] = []
    while len(colour_sets) < size:
        colours = tuple(rng.sample(others, n - 1))
        if all(set(colours) != set(seen) for seen in colour_sets):
            colour_sets.append(colours)
    scenes = []
    for i, colours in enumerate(colour_sets):
        cells = rng.sample(CELLS, n)
        objects = (SceneObject(salient_shape, salient_colour, SALIENT_SIZE, cells[0]),) + tuple(
            SceneObject(rng.choice(SHAPES), c, rng.choice(OTHER_SIZES), cell) for c, cell in zip(colours, cells[1:])
        )
        scenes.append(Scene(key=f"{group}-{i}", group=group, background=background, objects=objects, world="objects"))
    return scenes


def max_group_size(world: str) -> int:
    """The largest group a world can make: `objects` needs a distinct colour set per member
    (the fewest there are is C(6, 2) = 15, for three objects)."""
    return 15 if world == "objects" else 24


def summary_sentence(scene: Scene, rng: random.Random) -> str:
    count = NUMBER_WORDS[len(scene.objects)]
    if scene.salient is not None:
        return rng.choice(SALIENT_SUMMARY_TEMPLATES).format(
            count=count,
            bg=scene.background,
            salient=_with_article(scene.salient.name),
            large=_with_article(f"{scene.salient.size} {scene.salient.name}"),
        )
    # Canonical order in the summary: it must carry no layout information.
    names = sorted(o.name for o in scene.objects)
    return rng.choice(SUMMARY_TEMPLATES).format(
        objects=_join([_with_article(n) for n in names]), bg=scene.background, count=count
    )


def caption_sentences(scene: Scene, rng: random.Random) -> list[str]:
    """Summary, one detail sentence per object (random order), and sometimes a closing sentence."""
    return caption_text(scene, rng).sentences


def caption_text(scene: Scene, rng: random.Random) -> RowText:
    """The caption's sentences with the object names each detail sentence says (for planting)."""
    objects = list(scene.objects)
    count = NUMBER_WORDS[len(objects)]
    summary = summary_sentence(scene, rng)
    details = []
    named: list[frozenset[str]] = [frozenset()]
    for obj in rng.sample(objects, len(objects)):
        other = rng.choice([o for o in objects if o is not obj])
        details.append(
            rng.choice(DETAIL_TEMPLATES).format(
                name=obj.name,
                size=obj.size,
                cell=CELL_NAMES[obj.cell],
                relation=relation(obj.cell, other.cell),
                other=other.name,
            )
        )
        named.append(frozenset((obj.name, other.name)))
    sentences = [summary, *details]
    if rng.random() < CLOSING_PROBABILITY:
        sentences.append(rng.choice(CLOSING_TEMPLATES).format(count=count, bg=scene.background))
        named.append(frozenset())
    return RowText(sentences, named, list(range(1, len(objects) + 1)))


def draw_scene(scene: Scene, image_size: int, rng: random.Random):
    """The scene as a PIL image; a small position jitter keeps pixels from being a lookup table."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (image_size, image_size), BACKGROUNDS[scene.background])
    draw = ImageDraw.Draw(image)
    cell = image_size / 3
    jitter = cell * 0.12
    for obj in scene.objects:
        r = SIZES[obj.size] * image_size
        cx = (obj.cell[1] + 0.5) * cell + rng.uniform(-jitter, jitter)
        cy = (obj.cell[0] + 0.5) * cell + rng.uniform(-jitter, jitter)
        fill = COLOURS[obj.colour]
        if obj.shape == "circle":
            draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
        elif obj.shape == "square":
            s = r * 0.9
            draw.rectangle([cx - s, cy - s, cx + s, cy + s], fill=fill)
        elif obj.shape == "triangle":
            draw.polygon([(cx, cy - r), (cx - r, cy + r * 0.8), (cx + r, cy + r * 0.8)], fill=fill)
        elif obj.shape == "diamond":
            draw.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=fill)
        else:  # cross
            t = r * 0.35
            draw.rectangle([cx - r, cy - t, cx + r, cy + t], fill=fill)
            draw.rectangle([cx - t, cy - r, cx + t, cy + r], fill=fill)
    return image


def sample_world(n: int, seed: int, group_size: int = 4, split: str = "train", world: str = "objects") -> list[Scene]:
    """n scenes in groups of group_size (the last group may be smaller), deterministic per seed."""
    if n < 1:
        raise UserError(f"--n must be at least 1, got {n}")
    if world not in WORLDS:
        raise UserError(f"--world {world!r}: choose from {', '.join(WORLDS)}")
    if not 1 <= group_size <= max_group_size(world):
        raise UserError(f"group size must be in 1..{max_group_size(world)} for the {world} world, got {group_size}")
    sample = sample_objects_group if world == "objects" else sample_group
    # The layouts world keeps its original seed streams, so its worlds stay byte-identical.
    rng = random.Random(f"scenes:{split}:{seed}" if world == "layouts" else f"scenes:{world}:{split}:{seed}")
    scenes: list[Scene] = []
    g = 0
    while len(scenes) < n:
        scenes.extend(sample(rng, f"{split}-{seed}-g{g:05d}", min(group_size, n - len(scenes))))
        g += 1
    return scenes


def write_world(
    out: Path,
    n: int,
    seed: int,
    image_size: int = 64,
    split: str = "train",
    group_size: int = 4,
    overwrite: bool = False,
    world: str = "objects",
    plant: PlantSpec | None = None,
    leak_from: str | Path | None = None,
) -> dict[str, Any]:
    """Write OUT/sharegpt4v.json + OUT/images/*.png; returns a summary (counts, seed, path).

    With `plant`, faults are planted in some rows and the answer key goes to OUT/planted.json
    (synth/plant.py); every other row is what the unplanted world writes. With `leak_from` (an
    evaluation world written by synth) some rows are also copies of its rows (plant_leaks).
    OUT is locked for the whole run (locking.folder_lock): one writer at a time.
    """
    from caption_debias.locking import folder_lock

    out = Path(out)
    if image_size < 16:
        raise UserError(f"--image-size must be at least 16, got {image_size}")
    if leak_from is not None and plant is None:
        raise UserError("--plant-eval-leaks goes with --plant")
    leaks = None if leak_from is None else _eval_world(Path(leak_from), out)
    with folder_lock(out, "synth"):
        return _write_world(out, n, seed, image_size, split, group_size, overwrite, world, plant, leaks)


def run_synth(out: str | Path, options: SynthOptions) -> dict[str, Any]:
    """`caption-debias synth`: the world `options` describe, written to OUT (write_world's summary)."""
    options.validate()
    return write_world(
        Path(out),
        options.n,
        options.seed,
        image_size=options.image_size,
        split=options.split,
        group_size=options.group_size,
        overwrite=options.overwrite,
        world=options.world,
        plant=options.plant_spec(),
        leak_from=options.plant_eval_leaks,
    )


@dataclass(frozen=True)
class EvalWorld:
    """An evaluation world's records, where eval leaks are copied from."""

    folder: Path
    records: list[dict[str, Any]]


def _eval_world(folder: Path, out: Path) -> EvalWorld:
    """The records of a world `synth` wrote, checked: one line for a folder that is not one."""
    path = folder / "sharegpt4v.json"
    if not path.is_file():
        raise UserError(f"--plant-eval-leaks {folder}: no sharegpt4v.json (an evaluation world written by synth)")
    if folder.resolve() == out.resolve():
        raise UserError(f"--plant-eval-leaks {folder}: the evaluation world is the output folder")
    try:
        records = json.loads(path.read_text("utf-8"))
        for r in records:
            if not isinstance(r["image"], str) or not isinstance(r["conversations"][1]["value"], str):
                raise TypeError("image or caption not text")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise UserError(f"--plant-eval-leaks {path}: not a synth world ({type(exc).__name__}: {exc})") from None
    return EvalWorld(folder, records)


def _plan_faults(
    plant: PlantSpec | None,
    scenes: list,
    texts: list,
    captions: list,
    groups: list,
    seed: int,
    split: str,
    leaks: EvalWorld | None = None,
) -> tuple[dict[str, Any] | None, list, list, dict[int, int]]:
    """(the planted faults' plan or None, the captions and groups with them, redrawn row -> its source)."""
    if plant is None:
        return None, captions, groups, {}
    objects = [frozenset(o.name for o in scene.objects) for scene in scenes]
    plan = plant_plan(groups, objects, texts, plant, seed, split)
    captions, groups = _planted_captions(plan, scenes, texts, captions, groups, seed, split)
    redraw_of = {entry["row"]: entry["copy_of"] for entry in plan["redrawn"]}
    if plant.curate_faults():
        plan.update(plant_more(plan, len(scenes), plant, seed, split))
        captions = _curate_fault_captions(plan, captions)
    if leaks is not None:  # last, from its own stream: every other kind's rows are as without leaks
        plan["eval_leak"] = plant_leaks(plan, len(scenes), len(leaks.records), seed, split)
        captions = list(captions)
        for entry in plan["eval_leak"]:
            if entry["copied"] != "image":
                captions[entry["row"]] = [leaks.records[entry["eval_row"]]["conversations"][1]["value"]]
    return plan, captions, groups, redraw_of


def _record(row_id: str, rel: str, caption: list[str], group: Any, split: str) -> dict[str, Any]:
    """One ShareGPT4V-style record of the world's JSON."""
    return {
        "id": row_id,
        "image": rel,
        "conversations": [
            {"from": "human", "value": "<image>\nDescribe this image in detail."},
            {"from": "gpt", "value": " ".join(caption)},
        ],
        "group": group,
        "split": split,
    }


def _write_world(
    out: Path,
    n: int,
    seed: int,
    image_size: int,
    split: str,
    group_size: int,
    overwrite: bool,
    world: str,
    plant: PlantSpec | None,
    leaks: EvalWorld | None = None,
) -> dict[str, Any]:
    target = out / "sharegpt4v.json"
    if target.exists() and not overwrite:
        raise UserError(f"{target} already exists (pass --overwrite to replace it)")
    scenes = sample_world(n, seed, group_size, split, world)
    text_rng = random.Random(f"captions:{split}:{seed}")
    texts = [caption_text(scene, text_rng) for scene in scenes]
    ids = [f"synth-{split}-{seed}-{i:06d}" for i in range(len(scenes))]
    captions = [list(t.sentences) for t in texts]
    groups = [scene.group for scene in scenes]
    plan, captions, groups, redraw_of = _plan_faults(plant, scenes, texts, captions, groups, seed, split, leaks)
    leaked = _leaked_images(plan, leaks, n, split)
    image_faults = {
        entry["row"]: (kind, entry.get("source"))
        for kind in ("duplicate_image", "reencoded", "broken_image", "tiny_image", "missing_image")
        for entry in (plan or {}).get(kind, [])
    }
    copied = {source for _, source in image_faults.values() if source is not None}
    kept_images: dict[int, Any] = {}
    (out / "images").mkdir(parents=True, exist_ok=True)
    pixel_rng = random.Random(f"pixels:{split}:{seed}")
    redraw_rng = random.Random(f"plant-pixels:{split}:{seed}")
    sources = set(redraw_of.values())
    source_pixels: dict[int, bytes] = {}
    records = []
    for i, scene in enumerate(scenes):
        rel = f"images/{split}_{i:06d}.png"
        image = draw_scene(scene, image_size, pixel_rng)  # drawn for every row: later rows keep their pixels
        if i in sources:
            source_pixels[i] = image.tobytes()
        if i in copied:
            kept_images[i] = image
        if i in redraw_of:  # the same scene again, other jitter; never the very same pixels
            image = draw_scene(scenes[redraw_of[i]], image_size, redraw_rng)
            while image.tobytes() == source_pixels[redraw_of[i]]:
                image = draw_scene(scenes[redraw_of[i]], image_size, redraw_rng)
        if i in image_faults:
            rel = _write_faulty_image(out, rel, image, kept_images, *image_faults[i])
        elif i in leaked:  # the eval row's file, byte for byte, at its own relative path
            assert leaks is not None  # leaked rows come from it
            rel = leaked[i]
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(leaks.folder / rel, out / rel)
        else:
            image.save(out / rel, format="PNG")
        records.append(_record(ids[i], rel, captions[i], groups[i], split))
    planted_path = out / PLANTED_FILE
    if plan is not None:
        assert plant is not None  # the plan is made from it
        key = _planted_key(plan, ids, texts, plant, seed, split, world)
        _write_json(planted_path, _with_leaks(key, plan, ids, leaks), indent=1)
    elif planted_path.exists():  # an unplanted world over a planted one: the old key is not its key
        planted_path.unlink()
    _write_json(target, records, indent=0)  # last: the world is complete when its JSON is there
    info = {
        "path": str(target),
        "images": len(records),
        "groups": len(set(groups)),
        "group_size": group_size,
        "world": world,
        "seed": seed,
        "split": split,
        "image_size": image_size,
        "mean_sentences": sum(len(c) for c in captions) / len(captions),
    }
    if plan is not None:
        info["planted"] = {kind: len(entries) for kind, entries in plan.items()}
        info["planted_path"] = str(planted_path)
    return info


def _leaked_images(plan: dict[str, Any] | None, leaks: EvalWorld | None, n: int, split: str) -> dict[int, str]:
    """Leaked row -> the eval row's image path it takes; refused when that path is one of this world's."""
    if plan is None or leaks is None:
        return {}
    own = {f"images/{split}_{i:06d}.png" for i in range(n)}
    leaked = {}
    for entry in plan["eval_leak"]:
        if entry["copied"] == "caption":
            continue
        rel = leaks.records[entry["eval_row"]]["image"]
        if rel in own or rel[: -len(".png")] + ".jpg" in own or not (leaks.folder / rel).is_file():
            raise UserError(
                f"--plant-eval-leaks {leaks.folder}: its image {rel} is missing or is a path of this world "
                "(write the evaluation world with another --split)"
            )
        leaked[entry["row"]] = rel
    return leaked


def _with_leaks(key: dict[str, Any], plan: dict[str, Any], ids: list[str], leaks: EvalWorld | None) -> dict[str, Any]:
    """The key with its eval leaks and the world they came from (as it was without them, when none)."""
    if leaks is None:
        return key
    key["eval_world"] = {"path": str(leaks.folder), "rows": len(leaks.records)}
    key["eval_leak"] = [
        {**_key_row(ids, e["row"]), "copied": e["copied"], **_eval_row(leaks.records[e["eval_row"]])}
        for e in plan["eval_leak"]
    ]
    return key


def _key_row(ids: list[str], i: int) -> dict[str, Any]:
    from caption_debias.synth.plant import KEY_PREFIX

    return {"row": i, "id": ids[i], "key": KEY_PREFIX + ids[i]}


def _eval_row(record: dict[str, Any]) -> dict[str, Any]:
    from caption_debias.synth.plant import KEY_PREFIX

    return {"eval_id": record["id"], "eval_key": KEY_PREFIX + str(record["id"]), "eval_image": record["image"]}


def _write_faulty_image(out: Path, rel: str, image: Any, kept: dict[int, Any], kind: str, source: int | None) -> str:
    """A planted image fault written where the row's picture goes; returns the row's image path."""
    import io

    (out / rel).unlink(missing_ok=True)  # an earlier world's file: a missing image must be missing
    if kind == "duplicate_image":
        assert source is not None  # plant_plan gives a copy the row it copies
        kept[source].save(out / rel, format="PNG")  # the source's pixels, so the same PNG bytes
    elif kind == "reencoded":
        rel = rel[: -len(".png")] + ".jpg"
        assert source is not None
        kept[source].save(out / rel, format="JPEG", quality=90)
    elif kind == "broken_image":
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        (out / rel).write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    elif kind == "tiny_image":
        image.resize((16, 16)).save(out / rel, format="PNG")
    return rel  # missing_image: nothing written


def _curate_fault_captions(plan: dict[str, Any], captions: list[list[str]]) -> list[list[str]]:
    """The captions after the caption kinds of plant_more: copies, near copies, loops, cut-offs."""
    captions = [list(c) for c in captions]
    for entry in plan["duplicate_caption"]:
        captions[entry["row"]] = list(captions[entry["source"]])
    for entry in plan["near_duplicate_caption"]:
        words = " ".join(captions[entry["source"]]).split(" ")
        inner = [i for i, w in enumerate(words[:-1]) if w.isalpha() and i > 0]  # a word, not the last one
        at = inner[min(int(entry["word"] * len(inner)), len(inner) - 1)]
        words[at] = "seemingly" if words[at] != "seemingly" else "apparently"
        captions[entry["row"]] = [" ".join(words)]  # prepare splits it again
    for entry in plan["repetition_loop"]:
        captions[entry["row"]] = captions[entry["row"]] + [captions[entry["row"]][-1]] * 3
    for entry in plan["cut_off"]:
        last = captions[entry["row"]][-1].rstrip(".").split(" ")
        captions[entry["row"]] = captions[entry["row"]][:-1] + [" ".join(last[: max(2, len(last) // 2)]) + " of the"]
    return captions


def _write_json(path: Path, value: Any, indent: int) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(value, ensure_ascii=False, indent=indent), "utf-8")
    tmp.replace(path)


def _planted_captions(
    plan: dict[str, Any],
    scenes: list[Scene],
    texts: list[RowText],
    captions: list[list[str]],
    groups: list[str],
    seed: int,
    split: str,
) -> tuple[list[list[str]], list[str]]:
    """The captions (as sentences) and groups after planting; only the plan's rows change."""
    captions, groups = list(captions), list(groups)
    for entry in plan["hallucinated"]:
        sentences = list(texts[entry["row"]].sentences)
        sentences[entry["sentence"]] = entry["text"]
        captions[entry["row"]] = sentences
    original = list(captions)
    for entry in plan["mismatched"]:
        captions[entry["row"]] = original[entry["caption_of"]]
    rng = random.Random(f"plant-captions:{split}:{seed}")
    for entry in plan["redrawn"]:
        source = entry["copy_of"]
        caption = captions[source]
        while caption == captions[source]:  # worded afresh, so no text filter sees a copy
            caption = caption_sentences(scenes[source], rng)
        captions[entry["row"]] = caption
        groups[entry["row"]] = groups[source]
    return captions, groups


def _planted_key(
    plan: dict[str, Any],
    ids: list[str],
    texts: list[RowText],
    spec: PlantSpec,
    seed: int,
    split: str,
    world: str,
) -> dict[str, Any]:
    """planted.json: per kind, each planted row's id, its key after `prepare`, and what was done."""

    from caption_debias.synth.plant import CURATE_KINDS, KEY_PREFIX

    def row(i: int) -> dict[str, Any]:
        return {"row": i, "id": ids[i], "key": KEY_PREFIX + ids[i]}

    return {
        "world": {"seed": seed, "split": split, "world": world, "rows": len(ids)},
        "fractions": spec.fractions(),
        "key_rule": f"prepare's key of a row is '{KEY_PREFIX}' + its id",
        "hallucinated": [
            {
                **row(e["row"]),
                "sentence": e["sentence"],
                "text": e["text"],
                "replaced": texts[e["row"]].sentences[e["sentence"]],
                "donor": ids[e["donor"]],
                "donor_sentence": e["donor_sentence"],
            }
            for e in plan["hallucinated"]
        ],
        "mismatched": [{**row(e["row"]), "caption_of": ids[e["caption_of"]]} for e in plan["mismatched"]],
        "redrawn": [
            {**row(e["row"]), "copy_of": ids[e["copy_of"]], "copy_of_key": KEY_PREFIX + ids[e["copy_of"]]}
            for e in plan["redrawn"]
        ],
        **{
            kind: [
                {**row(e["row"]), **({"copy_of_key": KEY_PREFIX + ids[e["source"]]} if "source" in e else {})}
                for e in plan[kind]
            ]
            for kind in CURATE_KINDS
            if kind in plan
        },
    }
