"""The model side of `score`: load any spec once per process, images and token-id texts -> normalised embeddings.

Images: `decode_image` is the one-row specification (a row's file or stored bytes -> the
model's eval transform, or why not); `encode_images` runs it on a few threads that stay a
couple of batches ahead of the model, as a DataLoader with workers would (Pillow's decoders
and torch's ops release the GIL, so decoding overlaps the forward pass).
Texts come from the stored `sentence_tokens` (augment.layout: [SOT] ids [EOT], cut at the
model's context with EOT last, open_clip's rule), never from re-tokenizing; a batch is cut
after its last EOT (model/trim.py), texts sorted by length so a batch wastes little.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from caption_debias import image_files, storage
from caption_debias.errors import UserError
from caption_debias.image_files import ImageProblem, ImageRoot

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
    spec: str, pretrained: str | None, device: str = "cpu", precision: str = "fp32", expect_sha256: str | None = None
) -> ScoreModel:
    """Any spec `eval` and `train` accept. A random-init model (an open_clip name without
    --pretrained) is seeded, so every worker holds the same one; `expect_sha256` (the driver's
    digest) makes a worker refuse a model that changed under it (a run folder's new checkpoint)."""
    import torch

    from caption_debias.model.load import load_model, no_weights_warnings

    with torch.random.fork_rng(devices=[]), no_weights_warnings():  # the driver warns in its own line
        torch.manual_seed(0)
        loaded = load_model(spec, pretrained, device=device)
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


def cached(spec: str, pretrained: str | None, device: str, precision: str, sha256: str | None) -> ScoreModel:
    """One model per process (workers keep theirs across shards)."""
    key = (spec, pretrained, device, precision)
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = load(spec, pretrained, device, precision, sha256)
    sm = _CACHE[key]
    if sha256 is not None and sm.identity["weights_sha256"] != sha256:
        raise UserError(f"{spec}: the model's weights changed during the run; rerun with --overwrite")
    return sm


def set_threads(workers: int) -> None:
    """Split the machine's cores between the worker processes (torch's intra-op threads)."""
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, workers)))


# -- images ---------------------------------------------------------------------------------


def decode_image(
    image: str,
    data: bytes | None,
    root: Path | ImageRoot | None,
    preprocess: Callable,
    draft_side: int | None = None,
) -> tuple[int, Any, str | None]:
    """Specification: (status, preprocessed tensor or None, error) of one row's image.

    Stored bytes (curate --embed-images) win over the file; a URL cannot be read here. Files
    are read through the image root's boundary and pictures decoded as every other stage
    decodes them (image_files: inside the root, regular files only, size and pixel limits,
    EXIF orientation, transparency onto white). `draft_side`: a JPEG is decoded at the smallest
    DCT scale whose sides are still >= it (Pillow's draft mode, libjpeg's scaling), which the
    preprocess then resizes as usual.
    """
    from PIL import UnidentifiedImageError

    try:
        if data is None:
            if storage.is_url(image):
                return MISSING, None, "a URL: score reads local files or stored image_bytes"
            if root is None:
                return MISSING, None, "no --image-root"
            data = (root if isinstance(root, ImageRoot) else ImageRoot(root)).read(image)
        im = image_files.open_image(data, image)
        if draft_side and im.format == "JPEG":
            im.draft("RGB", (draft_side, draft_side))
        im.load()  # decodes every byte: a truncated or corrupt file fails here
        rgb = image_files.to_rgb(im)
    except ImageProblem as exc:
        return (MISSING if exc.reason == image_files.MISSING else UNREADABLE), None, exc.detail
    except UnidentifiedImageError:
        return UNREADABLE, None, "not an image Pillow can identify"
    except Exception as exc:  # noqa: BLE001  Pillow's plugins raise many types on corrupt input
        return UNREADABLE, None, f"{type(exc).__name__}: {exc}"
    return OK, preprocess(rgb), None


def encode_images(
    sm: ScoreModel,
    images: Sequence[str],
    data: Sequence[bytes | None],
    root: Path | None,
    batch_size: int,
    threads: int,
    draft: bool = False,
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
    preprocess = sm.loaded.preprocess
    if n == 0:
        return out, status, errors

    draft_side = sm.image_side if draft else None
    boundary = ImageRoot(root) if root is not None else None

    def decode(i: int):
        return decode_image(images[i], data[i], boundary, preprocess, draft_side)

    ready: list[tuple[int, Any]] = []  # (row, tensor) decoded, not yet encoded

    def flush(final: bool) -> None:
        while len(ready) >= batch_size or (final and ready):
            rows, tensors = zip(*ready[:batch_size])
            del ready[:batch_size]
            out[list(rows)] = _encode_image_batch(sm, torch.stack(tensors))

    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending: deque = deque()
        ahead = max(1, PREFETCH_BATCHES) * batch_size + threads
        it = iter(range(n))
        for i in it:
            pending.append((i, pool.submit(decode, i)))
            if len(pending) >= ahead:
                break
        while pending:
            i, fut = pending.popleft()
            nxt = next(it, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(decode, nxt)))
            st, tensor, err = fut.result()
            status[i], errors[i] = st, err
            if st == OK:
                ready.append((i, tensor))
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
    out[:] = feats[where]
    return out
