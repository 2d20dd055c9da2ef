"""Dataset statistics of prepared folders: compute (polars value counts), plots (matplotlib), report (JSON, Markdown, HTML, terminal)."""

from caption_debias.api import make_callable

make_callable(__name__)  # caption_debias.stats(...) runs the stage: stats/api.py
