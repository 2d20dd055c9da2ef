"""Shared pytest set-up. Each area keeps its own fixtures in its own test modules."""

import os

# Tests never reach a hub; models are built from local configs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A pytest-xdist worker (`make test`) starts with COLUMNS=80 and LINES=24 in its environment, which a serial run
# and a command run from a shell do not have; the commands would wrap their lines at that width
# (progress.say keeps a width the environment states), so each worker runs the tests as a serial run does.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)
