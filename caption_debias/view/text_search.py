"""`view --model SPEC`: find images by text. The model's text tower encodes the query; the rows whose
image_embedding (`score --keep-embeddings`) lies nearest by cosine come back, most similar first.

The image side is the folder's own embeddings (view/neighbours.py reads them once), so the query is
only meaningful with the model that scored the folder: the first lines of `view` say when the
manifest names another. The model is loaded on the first query (torch and open_clip are imported
only then), once per server.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

import numpy as np

from caption_debias.errors import UserError

MAX_QUERY_CHARS = 1_000


class TextSearch:
    def __init__(self, spec: str, pretrained: str | None = None):
        self.spec, self.pretrained = spec, pretrained
        self._loaded: Any = None
        self._lock = threading.Lock()

    def _model(self):
        with self._lock:
            if self._loaded is None:
                from caption_debias.model.load import load_model

                self._loaded = load_model(self.spec, self.pretrained)
                self._loaded.model.eval()
            return self._loaded

    def encode(self, text: str) -> np.ndarray:
        """The query's unit-length text embedding (float32)."""
        import torch

        loaded = self._model()
        with torch.no_grad():
            e = loaded.model.encode_text(loaded.tokenizer([text]))
            e = torch.nn.functional.normalize(e.float(), dim=-1)
        return e[0].numpy().astype(np.float32)

    def search(self, neighbours, cards_of, text: str, k: int) -> dict[str, Any]:
        from caption_debias.view.neighbours import MAX_K, nearest_to

        text = (text or "").strip()
        if not text:
            raise ValueError("type some text to search the images for")
        if len(text) > MAX_QUERY_CHARS:
            raise ValueError(f"a text query is at most {MAX_QUERY_CHARS:,} characters")
        if not 1 <= k <= MAX_K:
            raise ValueError(f"k must be in 1..{MAX_K}")
        addresses, matrix = neighbours.table("image")
        query = self.encode(text)
        if len(query) != matrix.shape[1]:
            raise UserError(
                f"--model {self.spec} embeds text in {len(query)} dimensions, the folder's images in "
                f"{matrix.shape[1]}: give the model that scored the folder"
            )
        found = nearest_to(addresses, matrix, query, k)
        rows = cards_of([a for a, _ in found])
        for card, (_, sim) in zip(rows, found):
            card["similarity"] = sim
        return {"query": text, "model": self.spec, "rows": rows}


def scored_with(manifest: Mapping[str, Any]) -> str | None:
    """The model spec a folder's manifest says scored it, or None."""
    model = ((manifest.get("scoring") or {}).get("model")) or {}
    return model.get("spec") or model.get("name")
