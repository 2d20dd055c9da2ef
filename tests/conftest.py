"""Shared pytest set-up. Each area keeps its own fixtures in its own test modules."""

import os

# Tests never reach a hub; models are built from local configs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
