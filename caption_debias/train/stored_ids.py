"""Whether a model reads the shards' stored token ids as they are (prepared and packed rows alike), or
its texts must be tokenized again. Its own module: train/data.py and train/packed_source.py both ask."""

from __future__ import annotations

from typing import Any


def uses_stored_ids(tokenizer: Any, manifest: Any) -> bool:
    """True when the model tokenizes exactly like the shards (open_clip CLIP BPE, lower-case clean)."""
    from open_clip.tokenizer import SimpleTokenizer

    name = (manifest.get("tokenizer") or {}).get("name", "clip-bpe")
    if not isinstance(tokenizer, SimpleTokenizer) or name != "clip-bpe":
        return False
    probe = "A Photo, of  'Two' CATS!"
    from caption_debias.text.tokenize import get_tokenizer

    return tokenizer.encode(probe) == get_tokenizer().encode(probe)
