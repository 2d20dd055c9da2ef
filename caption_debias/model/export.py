"""Write an open_clip `local-dir:` folder: open_clip_config.json + open_clip_model.safetensors.

Plain open_clip then loads it with create_model_and_transforms("local-dir:DIR") and
get_tokenizer("local-dir:DIR"); the positional table is merged (frozen head + trained
tail) and the config carries the trained context (248 after stretching).
"""

from __future__ import annotations

import json
import os
import shutil
from functools import partial
from pathlib import Path

from caption_debias.errors import UserError

CONFIG_FILE = "open_clip_config.json"
WEIGHTS_FILE = "open_clip_model.safetensors"


def export(
    spec: str,
    out: str | Path,
    pretrained: str | None = None,
    overwrite: bool = False,
    quiet: bool = True,
    interpolate: float | None = None,
) -> Path:
    """Export a run folder (latest checkpoint) or any load_model spec to `out`.

    The folder holds only the model files, to be uploaded as is: its lock (locking.folder_lock)
    sits beside it, the config names no local path, the files have the umask's modes. Each file
    appears by rename, the config last: a folder holding open_clip_config.json holds the weights
    that go with it. Unless `quiet`, a line says what is loaded and one what is written.
    `interpolate`: WiSE-FT's alpha, the run mixed with its own start (model/interpolate.py).
    """
    from caption_debias.locking import LOCK_FILES, folder_lock

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    with folder_lock(out, "export", beside=True):
        # lock files inside are an older export's: not the user's, replaced without --overwrite
        old = [p for p in out.iterdir() if p.name not in LOCK_FILES]
        if old and not overwrite:
            raise UserError(f"{out} exists and is not empty; pass --overwrite to replace it")
        _export_locked(
            spec,
            out,
            pretrained,
            old + [out / name for name in LOCK_FILES if (out / name).exists()],
            quiet,
            interpolate,
        )
    return out


def _provenance(spec: str, info: dict) -> dict:
    """Where the weights came from, by name only: a published folder names no local path."""
    source = {"source": Path(spec).name if Path(spec).exists() else str(spec)}
    for key, value in info.items():
        if key == "tokenizer":
            continue
        source[key] = Path(value).name if key in ("run", "checkpoint") else value
    return source


def _file_mode() -> int:
    """0666 less the umask: the mode any plain file written here gets."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _export_locked(
    spec: str, out: Path, pretrained: str | None, old: list[Path], quiet: bool = True, interpolate: float | None = None
) -> None:
    import importlib.util

    from caption_debias.extras import missing_extra
    from caption_debias.model.describe import describe, stretch_note
    from caption_debias.progress import format_bytes, say

    if importlib.util.find_spec("torch") is None:  # said in one line, before the line saying what is loaded
        error = missing_extra(ModuleNotFoundError("No module named 'torch'", name="torch"))
        assert error is not None  # torch has an install hint (extras.py)
        raise error
    say(f"loading model {describe(spec, pretrained)}", quiet)  # before torch is imported
    from caption_debias.model.imports import import_open_clip

    tell = partial(say, quiet=quiet)
    import_open_clip([(spec, pretrained)], tell)  # said: seconds of silence otherwise
    from safetensors.torch import save_file

    from caption_debias.model.load import load_model
    from caption_debias.model.stretch import merge_frozen_head, merged_state_dict

    loaded = load_model(spec, pretrained, tell=tell)
    untrained = stretch_note(str(spec), loaded.info)
    if untrained:
        say(untrained, quiet)
    merge_frozen_head(loaded.model)
    state = merged_state_dict(loaded.model.state_dict())
    config = loaded.open_clip_config()
    config["caption_debias"] = _provenance(spec, loaded.info)
    if interpolate is not None:
        from caption_debias.model.interpolate import interpolate_run

        state = interpolate_run(spec, state, interpolate)
        config["caption_debias"]["interpolate"] = interpolate
    for p in sorted(old, key=lambda p: p.name != CONFIG_FILE):  # --overwrite: the earlier export, config first
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()
    weights_tmp, config_tmp = out / f".{WEIGHTS_FILE}.tmp", out / f".{CONFIG_FILE}.tmp"
    size = sum(v.numel() * v.element_size() for v in state.values())
    say(f"writing {out / WEIGHTS_FILE} ({format_bytes(size)}) and {CONFIG_FILE}", quiet)
    try:
        save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(weights_tmp))
        os.chmod(weights_tmp, _file_mode())  # safetensors writes 0600
        os.replace(weights_tmp, out / WEIGHTS_FILE)
        config_tmp.write_text(json.dumps(config, indent=2, default=list), "utf-8")
        os.replace(config_tmp, out / CONFIG_FILE)
    except OSError as exc:
        raise UserError(f"{out}: cannot write the export ({exc.strerror or exc})") from None
    finally:
        weights_tmp.unlink(missing_ok=True)
        config_tmp.unlink(missing_ok=True)
