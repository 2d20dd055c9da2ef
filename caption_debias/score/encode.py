"""The model side of `score`: load any spec once per process, images and token-id texts -> normalised embeddings.

Images: `decode_image` is the one-row specification (a row's stored bytes or its image under
the root -> the model's eval transform, or why not); `encode_images` reads a shard's images
through one ImageSource (rows grouped by tar, each tar read once) and decodes them on a few
threads that stay a couple of batches ahead of the model, as a DataLoader with workers would
(Pillow's decoders and torch's ops release the GIL, so decoding overlaps the forward pass).
Texts come from the stored `sentence_tokens` (augment.layout: [SOT] ids [EOT], cut at the
model's context with EOT last, open_clip's rule), never from re-tokenizing; a batch is cut
after its last EOT (model/trim.py), texts sorted by length so a batch wastes little.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from caption_debias import image_files
from caption_debias.errors import UserError
from caption_debias.image_files import ImageProblem
from caption_debias.image_source import ImageSource
from caption_debias.progress import add_work, advance

OK, MISSING, UNREADABLE = 0, 1, 2
STATUS_REASON = {MISSING: "image_missing", UNREADABLE: "image_unreadable"}
PREFETCH_BATCHES = 2  # decoded batches waiting for the model: enough to hide decoding, bounded memory


@dataclass
class ScoreModel:
    loaded: Any  # model.load.LoadedModel
    identity: dict[str, Any]  # what the manifest records: name, spec, pretrained, weights_sha256, context_length
    device: str
    precision: str
    sot: int
    eot: int

    @property
    def context(self) -> int:
        return int(self.loaded.context_length)

    def autocast(self):
        import torch

        if self.precision == "amp":
            return torch.autocast(self.device, dtype=torch.bfloat16 if self.device == "cpu" else torch.float16)
        return nullcontext()

    @property
    def image_side(self) -> int:
        """The model's input side in pixels (the larger one of a non-square input)."""
        size = getattr(self.loaded.model.visual, "image_size", 224)
        return int(max(size) if isinstance(size, (tuple, list)) else size)

    @property
    def input_dtype(self):
        import torch

        return torch.bfloat16 if self.precision == "bf16" else torch.float32


def weights_sha256(model) -> str:
    """sha256 over the state dict as loaded (names, dtypes, shapes, bytes in name order): the
    same weights give the same digest whatever file format or path they came from."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(dtype=_byte_view_dtype()).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _byte_view_dtype():
    import torch

    return torch.uint8


def _check_tokenizer(loaded, spec: str) -> None:
    """The stored ids are open_clip's CLIP BPE: a model with another tokenizer cannot read them."""
    from open_clip.tokenizer import SimpleTokenizer

    from caption_debias.text.tokenize import get_tokenizer

    probe = "A Photo, of  'Two' CATS!"
    tok = loaded.tokenizer
    if not isinstance(tok, SimpleTokenizer) or tok.encode(probe) != get_tokenizer().encode(probe):
        raise UserError(
            f"{spec}: the model's tokenizer is not CLIP BPE; score reads the stored sentence_tokens (CLIP BPE ids) "
            "and cannot score with it"
        )


def load(
    spec: str,
    pretrained: str | None,
    device: str = "cpu",
    precision: str = "fp32",
    expect_sha256: str | None = None,
    tell: Callable[[str], None] | None = None,
) -> ScoreModel:
    """Any spec `eval` and `train` accept. A random-init model (an open_clip name without
    --pretrained) is seeded, so every worker holds the same one; `expect_sha256` (the driver's
    digest) makes a worker refuse a model that changed under it (a run folder's new checkpoint)."""
    import torch

    from caption_debias.model.load import load_model, no_weights_warnings

    with torch.random.fork_rng(devices=[]), no_weights_warnings():  # the driver warns in its own line
        torch.manual_seed(0)
        loaded = load_model(spec, pretrained, device=device, tell=tell)
    _check_tokenizer(loaded, spec)
    digest = weights_sha256(loaded.model)
    if expect_sha256 is not None and digest != expect_sha256:
        raise UserError(
            f"{spec}: the model's weights changed during the run (sha256 {digest[:12]} here, {expect_sha256[:12]} "
            "when it started); rerun with --overwrite"
        )
    if precision == "bf16":
        loaded.model.to(dtype=torch.bfloat16)
    loaded.model.eval()
    tok = loaded.tokenizer
    identity = {
        "name": loaded.name,
        "spec": str(spec),
        "pretrained": pretrained,
        "weights_sha256": digest,
        "context_length": int(loaded.context_length),
        "embed_dim": int(_embed_dim(loaded.model)),
        "source": {k: v for k, v in loaded.info.items() if k != "tokenizer"},
    }
    return ScoreModel(loaded, identity, device, precision, int(tok.sot_token_id), int(tok.eot_token_id))


def _embed_dim(model) -> int:
    proj = getattr(model, "text_projection", None)
    if proj is not None:
        return int(proj.shape[1]) if hasattr(proj, "shape") else int(proj.out_features)
    return int(model.visual.output_dim)


_CACHE: dict[tuple, ScoreModel] = {}


def cached(
    spec: str,
    pretrained: str | None,
    device: str,
    precision: str,
    sha256: str | None,
    tell: Callable[[str], None] | None = None,
) -> ScoreModel:
    """One model per process (workers keep theirs across shards); `tell` hears which weights are read."""
    key = (spec, pretrained, device, precision)
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = load(spec, pretrained, device, precision, sha256, tell)
    sm = _CACHE[key]
    if sha256 is not None and sm.identity["weights_sha256"] != sha256:
        raise UserError(f"{spec}: the model's weights changed during the run; rerun with --overwrite")
    return sm


def set_threads(workers: int) -> None:
    """Split the machine's cores between the worker processes (torch's intra-op threads)."""
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, workers)))


# -- images ---------------------------------------------------------------------------------


def decode_bytes(data: bytes, name: str, preprocess: Callable, draft_side: int | None = None) -> Any:
    """The model's eval transform of an image's bytes, decoded as every other stage decodes them
    (image_files: size and pixel limits, EXIF orientation, transparency onto white); ImageProblem
    when it is not a picture. `draft_side`: a JPEG is decoded at the smallest DCT scale whose
    sides are still >= it (Pillow's draft mode, libjpeg's scaling), which the preprocess then
    resizes as usual."""
    with image_files.decoding(None):
        im, _ = image_files.decode_drafted(data, name, draft_side)
        rgb = image_files.to_rgb(im)
    return preprocess(rgb)


def _status(exc: ImageProblem) -> tuple[int, None, str]:
    return (MISSING if exc.reason == image_files.MISSING else UNREADABLE), None, exc.detail


def decode_image(
    image: str,
    data: bytes | None,
    root: str | Path | ImageSource | None,
    preprocess: Callable,
    draft_side: int | None = None,
    key: object = None,
) -> tuple[int, Any, str | None]:
    """Specification: (status, preprocessed tensor or None, error) of one row's image.

    Stored bytes (curate --embed-images) win over the root; else the image is read through the
    root's ImageSource (a file, a tar member, a parquet sample, or a URL row's download under
    the root, found by its `key`), one row alone.
    """
    try:
        if data is None:
            if root is None:
                return MISSING, None, "no --image-root"
            source = root if isinstance(root, ImageSource) else ImageSource(str(root))
            data = source.read(image, key)
        return OK, decode_bytes(data, image, preprocess, draft_side), None
    except ImageProblem as exc:
        return _status(exc)


def _stored(
    images: Sequence[str], data: Sequence[bytes | None], decode: Callable, threads: int, ahead: int
) -> Iterator[tuple[int, Any]]:
    """(row, decode(bytes) or ImageProblem) of the rows with stored bytes, in row order, at most
    `ahead` decoded ahead of the caller."""

    def one(i: int):
        try:
            return decode(data[i], images[i])
        except ImageProblem as exc:
            return exc

    rows = iter(i for i, d in enumerate(data) if d is not None)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending: deque = deque((i, pool.submit(one, i)) for i in itertools.islice(rows, ahead))
        while pending:
            i, fut = pending.popleft()
            nxt = next(rows, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(one, nxt)))
            yield i, fut.result()


def decoded_rows(
    images: Sequence[str],
    data: Sequence[bytes | None],
    source: ImageSource | None,
    decode: Callable[[bytes, str], Any],
    threads: int,
    ahead: int,
    keys: Sequence[object] | None = None,
) -> Iterator[tuple[int, Any]]:
    """(row, tensor or ImageProblem) of every row, in row order: stored bytes decoded on a pool,
    the others read through the source (a shard's rows grouped by tar, each tar read once, in
    member order) and decoded on its threads."""
    no_root = [(i, ImageProblem(image_files.MISSING, "no --image-root")) for i, d in enumerate(data) if d is None]
    parts: list[Iterator[tuple[int, Any]]] = [_stored(images, data, decode, threads, ahead)]
    if source is None:
        parts.append(iter(no_root))
    elif no_root:
        wanted = [image if d is None else None for image, d in zip(images, data)]
        parts.append(source.in_row_order(wanted, decode, keys, threads))
    return heapq.merge(*parts, key=lambda item: item[0])


def encode_images(
    sm: ScoreModel,
    images: Sequence[str],
    data: Sequence[bytes | None],
    root: str | Path | ImageSource | None,
    batch_size: int,
    threads: int,
    draft: bool = False,
    keys: Sequence[object] | None = None,
) -> tuple[np.ndarray, list[int], list[str | None]]:
    """([N, D] float32 normalised embeddings, NaN where not OK; status per row; error per row).

    Batches are the OK rows in order, `batch_size` at a time: the same rows give the same
    batches, so the bits never depend on how the work was split across processes.
    """
    import torch

    n = len(images)
    dim = sm.identity["embed_dim"]
    out = np.full((n, dim), np.nan, np.float32)
    status: list[int] = [OK] * n
    errors: list[str | None] = [None] * n
    if n == 0:
        return out, status, errors
    add_work(n)
    draft_side = sm.image_side if draft else None
    preprocess = sm.loaded.preprocess
    source = None if root is None else root if isinstance(root, ImageSource) else ImageSource(str(root))
    ready: list[tuple[int, Any]] = []  # (row, tensor) decoded, not yet encoded

    def flush(final: bool) -> None:
        while len(ready) >= batch_size or (final and ready):
            rows, tensors = zip(*ready[:batch_size])
            del ready[:batch_size]
            out[list(rows)] = _encode_image_batch(sm, torch.stack(tensors))
            advance(len(rows))

    def decode(data: bytes, name: str):
        return decode_bytes(data, name, preprocess, draft_side)

    ahead = max(1, PREFETCH_BATCHES) * batch_size + threads
    for i, result in decoded_rows(images, data, source, decode, threads, ahead, keys):
        if isinstance(result, ImageProblem):
            status[i], _, errors[i] = _status(result)
            advance(1)
        else:
            ready.append((i, result))
            flush(False)
    flush(True)
    return out, status, errors


def _encode_image_batch(sm: ScoreModel, batch) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    with torch.inference_mode(), sm.autocast():
        feats = sm.loaded.model.encode_image(batch.to(sm.device, dtype=sm.input_dtype))
    return F.normalize(feats.float(), dim=-1).cpu().numpy()


# -- texts ----------------------------------------------------------------------------------


def text_ids(ids: np.ndarray, sm: ScoreModel) -> np.ndarray:
    """[SOT] ids [EOT] at the model's context (cut with EOT last when longer)."""
    from caption_debias.augment import layout

    return layout(ids, sm.context, sm.sot, sm.eot)


def _token_batches(lengths: list[int], order: list[int], budget: int, batch_size: int):
    """Consecutive texts (sorted by length) in batches of at most `budget` padded tokens (a full
    batch at the model's context), so short sentences go many at a time; `budget` 0: `batch_size` each."""
    if not budget:
        for s in range(0, len(order), batch_size):
            yield order[s : s + batch_size]
        return
    start = 0
    for end in range(1, len(order) + 1):
        width = lengths[end - 1] + 2  # the longest so far (sorted) with SOT and EOT
        if end - start > 1 and (end - start) * width > budget:
            yield order[start : end - 1]
            start = end - 1
    if start < len(order):
        yield order[start:]


def encode_texts(sm: ScoreModel, texts: Sequence[np.ndarray], batch_size: int) -> np.ndarray:
    """[N, D] float32 normalised embeddings of token-id sequences (without SOT/EOT).

    Identical sequences are encoded once (and so get identical embeddings); the distinct
    ones go by length, shortest first (stable), each batch cut after its last EOT.
    """
    import torch
    import torch.nn.functional as F

    from caption_debias.model.trim import can_trim, encode_text_trimmed, used_length

    n = len(texts)
    dim = sm.identity["embed_dim"]
    out = np.zeros((n, dim), np.float32)
    if n == 0:
        return out
    index: dict[bytes, int] = {}
    where = np.empty(n, np.int64)
    unique: list[np.ndarray] = []
    for i, t in enumerate(texts):
        key = np.asarray(t, np.int32).tobytes()
        j = index.get(key)
        if j is None:
            j = index[key] = len(unique)
            unique.append(np.asarray(t, np.int64))
        where[i] = j
    order = sorted(range(len(unique)), key=lambda j: len(unique[j]))
    add_work(len(unique))
    feats = np.zeros((len(unique), dim), np.float32)
    model = sm.loaded.model
    trim = can_trim(model)
    with torch.inference_mode(), sm.autocast():
        for part in _token_batches(
            [len(unique[j]) for j in order], order, batch_size * sm.context if trim else 0, batch_size
        ):
            tokens = torch.from_numpy(np.stack([text_ids(unique[j], sm) for j in part])).to(sm.device)
            if trim:
                f = encode_text_trimmed(model, tokens[:, : used_length(tokens)])
            else:
                f = model.encode_text(tokens)
            feats[part] = F.normalize(f.float(), dim=-1).cpu().numpy()
            advance(len(part))
    out[:] = feats[where]
    return out
