"""Atomic file writing for prepare's steps: the stage runner's (caption_debias/runner.py), named here
so the steps' imports stay where they were."""

from __future__ import annotations

from caption_debias.runner import (  # noqa: F401  (re-exported)
    WriteFailed,
    atomic_output,
    os_error_text,
    sha256_file,
    temp_path,
    write_json,
    write_shard,
    write_text,
)
