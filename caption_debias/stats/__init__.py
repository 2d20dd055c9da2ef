"""Dataset statistics of prepared folders: compute (polars value counts), plots (matplotlib), report (JSON, Markdown, HTML, terminal)."""
