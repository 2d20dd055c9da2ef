"""Shared pytest set-up: the environment, and the image worlds every image test reads. Each other area keeps
its own fixtures in its own test modules."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the fixture modules beside the tests (image_worlds, ...)

# Tests never reach a hub; models are built from local configs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A pytest-xdist worker (`make test`) starts with COLUMNS=80 and LINES=24 in its environment, which a serial run
# and a command run from a shell do not have; the commands would wrap their lines at that width
# (progress.say keeps a width the environment states), so each worker runs the tests as a serial run does.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)
    # One torch thread per process: `make test` runs a worker per core, and a tiny model's ops split over two
    # threads on a busy core spend more CPU waiting on each other than they save (docs/benchmarks.md).
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# -- the image worlds (tests/image_worlds.py), built once per session, shared by the image tests -------
# A module that needs another world defines a fixture of the same name; pytest takes the module's.


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    from image_worlds import built, url_world

    return built(tmp_path_factory, "urls", url_world)


@pytest.fixture(scope="module")
def wds(tmp_path_factory, urls):
    from image_worlds import built, i2d_world

    return built(tmp_path_factory, "wds", lambda base: i2d_world(base, "webdataset", urls))


@pytest.fixture(scope="module")
def pq_out(tmp_path_factory, urls):
    from image_worlds import built, i2d_world

    return built(tmp_path_factory, "pq", lambda base: i2d_world(base, "parquet", urls))


@pytest.fixture(scope="module")
def loose(tmp_path_factory, wds):
    from image_worlds import built, loose_world

    return built(tmp_path_factory, "loose", lambda base: loose_world(base, wds))


@pytest.fixture(scope="module")
def packed(tmp_path_factory, loose):
    from image_worlds import built, packed_world

    return built(tmp_path_factory, "packed", lambda base: packed_world(base, loose))


@pytest.fixture(scope="module", autouse=True)
def environment_kept():
    """A test module leaves os.environ as it found it (imports' own writes aside): tests/cli_process.py forks the
    CLI only for the session's environment, so one leaked variable would make every later call of the worker a fresh
    interpreter that imports torch again."""
    from cli_process import environment_changes

    before = dict(os.environ)
    yield
    changed = environment_changes(before, dict(os.environ))
    assert not changed, (
        f"the module left os.environ changed: {changed} (a test: use monkeypatch.setenv or restore it; an import "
        "that writes it: add it to tests/cli_process.py's WRITTEN_BY_LIBRARIES)"
    )


@pytest.fixture(scope="session")
def browser():
    """One system Chromium per test process (tests/browser_support.py); each test opens its own context
    (browser_support.watched_page, or new_context / new_page), so no cookie, storage or page is shared."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from browser_support import chromium

    with chromium(sync_api) as b:
        yield b


@pytest.fixture(scope="module")
def ray_runtime():
    """A local Ray runtime inside the test process (no external service), shut down after the module."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 1024**2)
    yield
    ray.shutdown()


# -- worlds several modules share (built once per module that asks) -------------------------


@pytest.fixture(scope="module")
def score_world(tmp_path_factory):
    """A prepared folder with images for score (tests/score_fixtures.py)."""
    from score_fixtures import build_world

    return build_world(tmp_path_factory)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """The real prepare -> curate -> score -> curate chain (tests/lineage_fixtures.py)."""
    from lineage_fixtures import build_chain

    return build_chain(tmp_path_factory)
