"""Write an open_clip `local-dir:` folder: open_clip_config.json + open_clip_model.safetensors.

Plain open_clip then loads it with create_model_and_transforms("local-dir:DIR") and
get_tokenizer("local-dir:DIR"); the positional table is merged (frozen head + trained
tail) and the config carries the trained context (248 after stretching).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from caption_debias.errors import UserError

CONFIG_FILE = "open_clip_config.json"
WEIGHTS_FILE = "open_clip_model.safetensors"


def export(spec: str, out: str | Path, pretrained: str | None = None, overwrite: bool = False) -> Path:
    """Export a run folder (latest checkpoint) or any load_model spec to `out`."""
    from safetensors.torch import save_file

    from caption_debias.model.load import load_model
    from caption_debias.model.stretch import merge_frozen_head, merged_state_dict

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UserError(f"{out} exists and is not empty; pass --overwrite to replace it")
    loaded = load_model(spec, pretrained)
    merge_frozen_head(loaded.model)
    state = merged_state_dict(loaded.model.state_dict())
    config = loaded.open_clip_config()
    config["caption_debias"] = {"source": str(spec), **{k: v for k, v in loaded.info.items() if k != "tokenizer"}}
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(tmp / WEIGHTS_FILE))
    (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, default=list), "utf-8")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)  # the folder appears whole or not at all
    return out
