"""Retrieval benchmarks read straight from their public layouts (no re-saved copies).

Each loader returns a RetrievalData: image paths, and every caption as its sentences with
the index of its image. Layouts and caption conventions: docs/evaluation.md.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.image_files import MISSING, ImageProblem, ImageRoot, path_problem

SKIPPED_WHY = "image path absolute or outside the image root (after symlinks), or unusable"


@dataclass
class RetrievalData:
    name: str
    images: list[Path]  # one entry per image, absolute or relative to the cwd
    captions: list[list[str]]  # one entry per caption: its sentences
    text_image: list[int]  # caption index -> image index
    definition: str = ""  # what exactly was read (for reports)
    info: dict = field(default_factory=dict)
    # image_source.lookup.ImageLookup when `images` are references under an image root read through
    # caption_debias.image_source (tar members, parquet samples, a root on a store); None: local paths
    source: Any = field(default=None, repr=False, compare=False)
    # Image features per model (weakly keyed by the nn.Module), so eval + probe encode images once.
    image_features: weakref.WeakKeyDictionary = field(
        default_factory=weakref.WeakKeyDictionary, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if len(self.captions) != len(self.text_image):
            raise ValueError("captions and text_image differ in length")

    @property
    def n_images(self) -> int:
        return len(self.images)

    def check_images(self) -> None:
        """One clear error when image files are missing, before any model work."""
        if self.source is not None:
            return self._check_stored()
        missing = [p for p in self.images if not Path(p).is_file()]
        if missing:
            first = Path(missing[0])
            why = " (not a regular file)" if first.exists() else ""  # a FIFO, device or folder: never opened
            raise UserError(f"{self.name}: {len(missing)} of {len(self.images)} images missing, first: {first}{why}")

    def _check_stored(self) -> None:
        """Every image found under the source's root (one pass per tar: ImageSource.stream)."""
        found = self.source.source.map([str(i) for i in self.images], lambda data, name: None)
        missing = [(i, p) for i, p in zip(self.images, found) if isinstance(p, ImageProblem) and p.reason == MISSING]
        if missing:
            image, why = missing[0]
            where = self.source.root.where(str(image))
            raise UserError(f"{self.name}: {len(missing)} of {len(self.images)} images missing, first: {where} ({why})")


def outside_root(rel, root: ImageRoot | None = None) -> bool:
    """An image path the image root refuses: absolute, climbing out, holding a control character, or
    (given the root) a symlink out of it or a symlink loop. A missing file is not refused here:
    RetrievalData.check_images names it."""
    if not isinstance(rel, str):
        return False
    if root is None:
        return path_problem(rel) is not None
    try:
        root.resolve(rel)
    except ImageProblem as exc:
        return exc.reason != MISSING
    return False


class _Builder:
    """Collects (image, caption) pairs, merging captions of the same image path."""

    def __init__(self, segmenter: str):
        from caption_debias.text.segment import get_segmenter

        self.segmenter = get_segmenter(segmenter)
        self.index: dict[str, int] = {}
        self.images: list[Path] = []
        self.captions: list[list[str]] = []
        self.text_image: list[int] = []
        self.outside_root = 0  # pairs skipped: image path outside the image root (or unusable)
        self._roots: dict[Path, ImageRoot] = {}

    def inside(self, root: Path, rel) -> Path | None:
        """root / rel, or None (counted) when the root refuses rel (outside_root)."""
        guard = self._roots.get(root)
        if guard is None:
            guard = self._roots[root] = ImageRoot(root)
        if outside_root(rel, guard):
            self.outside_root += 1
            return None
        return root / rel

    def sentences(self, caption: str) -> list[str]:
        return [caption[s:e].strip() for s, e in self.segmenter.spans(caption) if caption[s:e].strip()]

    def add(self, image: Path, caption: str | None = None, sentences: Sequence[str] | None = None) -> None:
        key = str(image)
        if key not in self.index:
            self.index[key] = len(self.images)
            self.images.append(image)
        sents = list(sentences) if sentences is not None else self.sentences(caption or "")
        self.captions.append(sents)
        self.text_image.append(self.index[key])

    def build(self, name: str, definition: str, **info) -> RetrievalData:
        if self.outside_root:
            definition += f"; {self.outside_root} pairs skipped: {SKIPPED_WHY}"
        if not self.images:
            raise UserError(f"{name}: no image-caption pairs found ({definition})")
        info.setdefault("segmenter", self.segmenter.name)
        info["skipped_outside_image_root"] = self.outside_root
        return RetrievalData(name, self.images, self.captions, self.text_image, definition, info)


def _need(path: Path, what: str) -> Path:
    if not path.exists():
        raise UserError(f"{path}: not found ({what})")
    return path


def _find_dir(root: Path, marker: str, children: Iterable[str]) -> Path:
    """root itself when it holds `marker`, else the first child folder that does."""
    for cand in [root, *(root / c for c in children)]:
        if (cand / marker).exists():
            return cand
    raise UserError(f"{root}: expected {marker} inside (or under {', '.join(children)})")


def _read_json(path: Path):
    try:
        with open(path, encoding="utf-8-sig") as fh:  # -sig: a leading byte-order mark is skipped
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable JSON ({exc})") from None


def _iter_jsonlines(path: Path):
    with open(path, encoding="utf-8-sig") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError:
                    raise UserError(f"{path}:{n}: not a JSON line") from None


def load_urban1k(path: Path, image_root: Path | None, segmenter: str) -> RetrievalData:
    root = _find_dir(path, "caption", ["Urban1k", "urban1k"])
    images = image_root or root / "image"
    b = _Builder(segmenter)
    texts = sorted(_need(root / "caption", "Urban1k captions").glob("*.txt"), key=lambda p: (len(p.stem), p.stem))
    for txt in texts:
        jpg = b.inside(images, f"{txt.stem}.jpg")
        if jpg is not None:
            b.add(jpg, txt.read_text("utf-8-sig").strip())
    return b.build("urban1k", "Urban1k: caption/N.txt with image/N.jpg")


def load_docci(path: Path, image_root: Path | None, segmenter: str, split: str = "test") -> RetrievalData:
    root = path.parent if path.is_file() else _find_dir(path, "docci_descriptions.jsonlines", ["docci"])
    desc = path if path.is_file() else root / "docci_descriptions.jsonlines"
    images = image_root or root / "images"
    b = _Builder(segmenter)
    for row in _iter_jsonlines(_need(desc, "DOCCI descriptions")):
        if row.get("split") == split:
            image = b.inside(images, row["image_file"])
            if image is not None:
                b.add(image, row["description"])
    return b.build("docci", f"DOCCI {split} split of {desc.name}")


def _dci_rows(path: Path, image_root: Path | None):
    root = _find_dir(path, "splits.json", ["densely_captioned_images"])
    splits = _read_json(root / "splits.json")
    images = image_root or root / "photos"
    for split in ("train", "valid", "test"):  # all 7,805 annotated images, as in the paper
        for name in splits.get(split, []):
            ann = _read_json(_need(root / "annotations" / name, "DCI annotation listed in splits.json"))
            yield images, ann["image"], ann.get("short_caption") or "", ann.get("extra_caption") or ""


def load_dci(path: Path, image_root: Path | None, segmenter: str) -> RetrievalData:
    b = _Builder(segmenter)
    for images, rel, short, extra in _dci_rows(path, image_root):
        image = b.inside(images, rel)
        if image is not None:
            # Joined with "\n" (a sentence boundary) so the splitter never glues the two parts.
            b.add(image, "\n".join(x.strip() for x in (short, extra) if x.strip()))
    return b.build("dci", "DCI: all images of splits.json, short_caption + extra_caption")


def load_long_dci(path: Path, image_root: Path | None, segmenter: str) -> RetrievalData:
    b = _Builder(segmenter)
    skipped = 0
    for images, rel, _short, extra in _dci_rows(path, image_root):
        if not extra.strip():
            skipped += 1
        elif (image := b.inside(images, rel)) is not None:
            b.add(image, extra.strip())
    return b.build("long-dci", "Long-DCI: extra_caption only, empty ones skipped", skipped_empty=skipped)


def load_coco(path: Path, image_root: Path | None, segmenter: str) -> RetrievalData:
    if path.is_file():
        ann_path = path
        guess = [path.parent.parent / "val2017", path.parent / "val2017"]
    else:
        ann_path = _need(path / "annotations" / "captions_val2017.json", "COCO val2017 captions")
        guess = [path / "val2017", path / "images" / "val2017"]
    images = image_root or next((g for g in guess if g.is_dir()), guess[0])
    doc = _read_json(ann_path)
    b = _Builder(segmenter)
    files = {im["id"]: b.inside(images, im["file_name"]) for im in doc.get("images", [])}
    for im_id in sorted(files):  # every image first, so image order is the file's id order
        if (file := files[im_id]) is not None:
            b.index[str(file)] = len(b.images)
            b.images.append(file)
    for ann in doc.get("annotations", []):
        if ann.get("image_id") not in files:
            raise UserError(f"{ann_path}: caption {ann.get('id')} names unknown image {ann.get('image_id')}")
        if (file := files[ann["image_id"]]) is not None:
            b.add(file, ann["caption"].strip())
    return b.build("coco", f"COCO captions from {ann_path.name}, all captions of every image")


def load_flickr30k(path: Path, image_root: Path | None, segmenter: str, full: bool = False) -> RetrievalData:
    """Karpathy split file (dataset_flickr30k.json): test split, or every image with full=True."""
    karpathy = path if path.is_file() else _need(path / "dataset_flickr30k.json", "Karpathy split file")
    root = karpathy.parent
    images = image_root or next(
        (g for g in (root / "flickr30k-images", root / "images") if g.is_dir()), root / "flickr30k-images"
    )
    doc = _read_json(karpathy)
    b = _Builder(segmenter)
    for im in doc.get("images", []):
        if full or im.get("split") == "test":
            image = b.inside(images, im["filename"])
            if image is not None:
                for sent in im.get("sentences", []):
                    b.add(image, sent["raw"].strip())
    what = "all images" if full else "Karpathy test split"
    return b.build("flickr30k-full" if full else "flickr30k", f"Flickr30k {what} of {karpathy.name}")


def load_sharegpt4v_1k(path: Path, image_root: Path | None, segmenter: str, sam_only: bool) -> RetrievalData:
    """First 1,000 records of the 1.2M file (Long-CLIP's held-out set) or first 1,000 SAM records."""
    from caption_debias.readers.sharegpt4v import first_gpt_turn, iter_array
    from caption_debias.records import Reject

    file = (
        path if path.is_file() else _need(path / "share-captioner_coco_lcs_sam_1246k_1107.json", "ShareGPT4V-PT file")
    )
    images = image_root or file.parent
    b = _Builder(segmenter)
    taken = 0
    for item in iter_array(file):
        if isinstance(item, Reject):
            raise UserError(f"{file}: {item.reason} at byte {item.location}")
        _offset, el = item
        image = el.get("image", "") if isinstance(el, dict) else ""
        if sam_only and not image.startswith("sam/"):
            continue
        caption, problem = first_gpt_turn(el) if isinstance(el, dict) else (None, "not an object")
        if problem or not isinstance(caption, str):
            raise UserError(f"{file}: record {taken + 1} unusable ({problem or 'caption not text'})")
        taken += 1  # a record skipped for its image path still counts: the set is the file's first 1,000
        if (found := b.inside(images, image)) is not None:
            b.add(found, caption)
        if taken == 1000:
            break
    name = "sharegpt4v-1k-sam" if sam_only else "sharegpt4v-1k"
    what = "first 1,000 SAM records" if sam_only else "first 1,000 records"
    return b.build(name, f"ShareGPT4V-1k: {what} of {file.name}")


def load_prepared(path: Path, image_root: Any = None, name: str | None = None) -> RetrievalData:
    """A prepared folder: rows grouped by image (several rows of one image = its captions), under its
    image root by the one rule (image_source.roots.folder_root: `image_root` given, else recorded,
    else its lineage's). Loose files under a local root are paths; tar members, parquet samples, URL
    rows' downloads and any root on a store are read through caption_debias.image_source (`_load_stored`)."""
    from caption_debias.dataset import PreparedDataset
    from caption_debias.image_source.roots import folder_root

    ds = PreparedDataset.open(path)
    found = folder_root(path, image_root, ds.manifest)
    if found is None:
        raise UserError(f"{path}: give --image-root (the manifest records no image root)")
    table = ds.read(["key", "image", "sentences"])
    rows = list(zip(*(table.column(c).to_pylist() for c in ("key", "image", "sentences"))))
    info = {"segmenter": (ds.manifest.get("segmenter") or {}).get("name")}
    if found.remote or any(_stored_kind(image) for _, image, _ in rows):
        return _load_stored(path, found.resolved, rows, name, info)
    root = Path(found.resolved)
    index: dict[str, int] = {}
    images: list[Path] = []
    captions: list[list[str]] = []
    text_image: list[int] = []
    skipped = 0  # prepare never writes such paths; a folder made by other means might
    guard = ImageRoot(root)
    for _, image, sents in rows:
        if outside_root(image, guard):
            skipped += 1
            continue
        if image not in index:
            index[image] = len(images)
            images.append(root / image)
        captions.append(list(sents))
        text_image.append(index[image])
    return _prepared_data(path, name, images, captions, text_image, skipped, info)


def _stored_kind(image) -> bool:
    """Whether a row's image is read through image_source: a URL, a tar member or a parquet sample."""
    from caption_debias.image_source import refs

    try:
        return refs.parse(image).kind != refs.FILE
    except ImageProblem:
        return False


def _load_stored(path: Path, root: str, rows, name: str | None, info: dict) -> RetrievalData:
    """The rows' images as references under `root` read by ImageLookup (URL rows: their downloads' members)."""
    from caption_debias.image_source import ImageSource
    from caption_debias.image_source.lookup import ImageLookup

    lookup = ImageLookup(ImageSource(root))
    index: dict[str, int] = {}
    images: list[str] = []
    captions: list[list[str]] = []
    text_image: list[int] = []
    skipped, missing = 0, []
    for key, image, sents in rows:
        try:
            ref = str(lookup.source.locate(image, key))
        except ImageProblem as exc:
            if exc.reason == MISSING:
                missing.append(f"{image} ({exc.detail})")
            else:
                skipped += 1
            continue
        if ref not in index:
            index[ref] = len(images)
            images.append(ref)
        captions.append(list(sents))
        text_image.append(index[ref])
    if missing:
        raise UserError(f"{name or path.name}: {len(missing)} of {len(rows)} images missing, first: {missing[0]}")
    data = _prepared_data(path, name, images, captions, text_image, skipped, info)
    data.source = lookup
    return data


def _prepared_data(path, name, images, captions, text_image, skipped: int, info: dict) -> RetrievalData:
    definition = f"prepared folder {path} (sentences as prepared)"
    if skipped:
        definition += f"; {skipped} rows skipped: {SKIPPED_WHY}"
    if not images:
        raise UserError(f"{path}: prepared folder has no rows ({definition})")
    return RetrievalData(
        name or path.name, images, captions, text_image, definition, {**info, "skipped_outside_image_root": skipped}
    )


Loader = Callable[[Path, "Path | None", str], RetrievalData]
BENCHMARKS: dict[str, Loader] = {
    "urban1k": load_urban1k,
    "docci": load_docci,
    "dci": load_dci,
    "long-dci": load_long_dci,
    "coco": load_coco,
    "flickr30k": load_flickr30k,
    "flickr30k-full": lambda p, r, s: load_flickr30k(p, r, s, full=True),
    "sharegpt4v-1k": lambda p, r, s: load_sharegpt4v_1k(p, r, s, sam_only=False),
    "sharegpt4v-1k-sam": lambda p, r, s: load_sharegpt4v_1k(p, r, s, sam_only=True),
}


def load_benchmark(
    name: str | None, data: str | Path, image_root: str | Path | None = None, segmenter: str = "fast"
) -> RetrievalData:
    """name=None (or 'prepared') reads a prepared folder; otherwise one of BENCHMARKS."""
    from caption_debias.image_source.roots import resolve_root

    path = storage.as_path(data) if name in (None, "prepared") else Path(data)  # prepared folders may be URLs
    if not path.exists():
        raise UserError(f"{path}: no such file or folder")
    if name in (None, "prepared"):
        return load_prepared(path, image_root)
    if name not in BENCHMARKS:
        raise UserError(f"unknown benchmark {name!r} (choose from prepared, {', '.join(BENCHMARKS)})")
    root = None if image_root is None or str(image_root) == "" else resolve_root(image_root)
    if root is not None and root.remote:
        raise UserError(
            f"--image-root {root.typed}: a benchmark layout reads a local folder (a URL root is for prepared folders)"
        )
    try:
        return BENCHMARKS[name](path, None if root is None else Path(root.resolved), segmenter)
    except (KeyError, TypeError, AttributeError) as exc:  # a field missing or of the wrong kind
        raise UserError(f"{path}: not a {name} layout ({type(exc).__name__}: {exc})") from None
