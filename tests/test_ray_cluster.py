"""--engine ray on a real two-node Ray cluster (tests/ray_cluster.py: a head and a second raylet on this
machine, one CPU each, token authentication on): score, curate and pack at their default flags finish,
and every file they write equals the local engine's on the same input, byte for byte
(sentence_grounding included).

The commands run as a user runs them, `caption-debias ... --engine ray` in a process of their own
that joins the cluster through RAY_ADDRESS and the cluster's token. Twice: with images and folders
as local paths, which both nodes of this machine see; and with no shared folder for images: real
img2dataset tars and every folder on an S3 server (moto on loopback), whose address and
credentials each node's `ray start` gets in its environment, as docs/scale.md tells a cluster's nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytest.importorskip("open_clip")

from curate_fixtures import make_world
from image_worlds import built, i2d_world, moto_s3, upload, url_world
from ray_cluster import AUTH_ENV, cluster_processes, ray_cluster

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

DEMO_START = Path(__file__).resolve().parents[1] / "caption_debias" / "assets" / "demo-start"
TIMED = {"created", "elapsed_s"}  # a manifest records when and how long
RUNTIME_OPTIONS = {"engine", "ray_address", "workers"}  # recorded in the manifest's options, shape nothing


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "caption_debias.cli.main", *args, "-q"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


def ok(env: dict[str, str], *args: str) -> None:
    done = run(env, *args)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stderr[-3000:]}"


def local_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in AUTH_ENV}


def files(folder: Path) -> dict[str, bytes]:
    """Every file of an output folder (lock files aside); JSON without the time keys and the runtime options."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if not path.is_file() or rel.startswith(".caption-debias.lock"):
            continue
        data = path.read_bytes()
        if path.suffix == ".json":
            doc = json.loads(data)
            if isinstance(doc, dict):
                doc = {k: v for k, v in doc.items() if k not in TIMED}
                if isinstance(doc.get("options"), dict):
                    doc["options"] = {k: v for k, v in doc["options"].items() if k not in RUNTIME_OPTIONS}
            data = json.dumps(doc, sort_keys=True).encode()
        out[rel] = data
    return out


def assert_same_files(ray_out: Path, local_out: Path) -> None:
    got, want = files(ray_out), files(local_out)
    assert sorted(got) == sorted(want)
    differ = [name for name in want if got[name] != want[name]]
    assert differ == [], f"files that differ from the local engine's: {differ}"


@pytest.fixture(scope="module")
def store():
    """moto's S3 server for the module: (server, s3fs filesystem, bucket); its AWS variables are set
    in this process while it runs, so the nodes started after it inherit them."""
    with moto_s3() as started:
        yield started


@pytest.fixture(scope="module")
def two_node_cluster(store):
    """A head and a second raylet on this machine, one CPU each, token authentication on, started
    with the store's credentials and endpoint in their environment."""
    pytest.importorskip("psutil")
    with ray_cluster(nodes=2, cpus=1) as cluster:
        yield cluster
    assert cluster_processes(cluster) == [], "processes of the test cluster outlived it"


@pytest.fixture(scope="module")
def wds(tmp_path_factory):
    """A URL set downloaded by img2dataset into webdataset tars (4 tars) and prepared."""
    urls = built(tmp_path_factory, "urls", url_world)
    return built(tmp_path_factory, "wds", lambda base: i2d_world(base, "webdataset", urls))


def fetched(fs, url: str, local: Path) -> Path:
    """A copy of the objects under the s3:// URL `url` in the local folder `local`."""
    prefix = url[len("s3://") :].rstrip("/") + "/"
    fs.invalidate_cache()
    for obj in fs.find(prefix):
        path = local / obj[len(prefix) :]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(fs.cat_file(obj))
    return local


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The curate tests' world (faulty images, near duplicates), prepared into 4 shards."""
    return make_world(tmp_path_factory.mktemp("cluster") / "world")


def test_score_curate_pack_on_two_nodes_equal_the_local_engine(two_node_cluster, world, tmp_path):
    cluster, env = two_node_cluster, two_node_cluster.driver_env()
    images, prepared = str(world["images"]), str(world["prepared"])
    assert cluster_processes(cluster)  # the nodes run, started by the fixture
    score = ["--model", f"local-dir:{DEMO_START}", "--image-root", images]
    out = {name: tmp_path / name for name in ("scored", "scored-ray", "scored-ray-2", "curated", "curated-ray")}
    # score: default flags (one actor, which must fit a one-CPU node), and one actor on each node
    ok(local_env(), "score", prepared, "--out", str(out["scored"]), *score)
    ok(env, "score", prepared, "--out", str(out["scored-ray"]), *score, "--engine", "ray")
    ok(env, "score", prepared, "--out", str(out["scored-ray-2"]), *score, "--engine", "ray", "--workers", "2")
    assert_same_files(out["scored-ray"], out["scored"])
    assert_same_files(out["scored-ray-2"], out["scored"])
    manifest = json.loads((out["scored"] / "manifest.json").read_text())
    assert len(manifest["shards"]) >= 2 and manifest["counts"]["removed"] > 0  # work for both nodes; bad images
    # curate of the scored folder: images checked, duplicates by Ray Data group-bys, ungrounded sentences marked
    curate = ["--image-root", images, "--drop-ungrounded", "0.0"]
    ok(local_env(), "curate", str(out["scored"]), "--out", str(out["curated"]), *curate)
    ok(env, "curate", str(out["scored"]), "--out", str(out["curated-ray"]), *curate, "--engine", "ray")
    assert_same_files(out["curated-ray"], out["curated"])
    # pack of the curated folder
    pack = ["--image-root", images, "--samples-per-shard", "4", "--image-size", "32"]
    ok(local_env(), "pack", str(out["curated"]), "--out", str(tmp_path / "packed"), *pack)
    ok(env, "pack", str(out["curated"]), "--out", str(tmp_path / "packed-ray"), *pack, "--engine", "ray")
    assert_same_files(tmp_path / "packed-ray", tmp_path / "packed")
    assert len(list((tmp_path / "packed").glob("*.tar"))) >= 2


def test_a_driver_without_the_clusters_token_gets_one_line(two_node_cluster, world, tmp_path):
    env = {**local_env(), "RAY_ADDRESS": two_node_cluster.address, "RAY_AUTH_MODE": "token"}
    env["RAY_AUTH_TOKEN_PATH"] = str(tmp_path / "wrong-token")
    (tmp_path / "wrong-token").write_text("0" * 64)
    done = run(env, "curate", str(world["prepared"]), "--out", str(tmp_path / "out"), "--engine", "ray")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "authentication token" in done.stderr and "RAY_AUTH_TOKEN_PATH" in done.stderr


def test_images_and_folders_on_s3_two_nodes_equal_the_local_engine(two_node_cluster, store, wds, tmp_path):
    """No shared folder for images: img2dataset's tars and every folder on the store. score is told
    the root once; curate and pack take the one its manifest carries."""
    _, fs, bucket = store
    env = two_node_cluster.driver_env()
    images = upload(fs, wds.root, f"s3://{bucket}/images")
    assert len(fs.glob(f"{bucket}/images/*.tar")) >= 3  # several tars: tasks for both nodes

    def s3(name: str) -> str:
        return f"s3://{bucket}/{name}"

    def same(name: str) -> dict[str, bytes]:
        ray_out = fetched(fs, s3(f"{name}-ray"), tmp_path / f"{name}-ray")
        local_out = fetched(fs, s3(name), tmp_path / name)
        assert_same_files(ray_out, local_out)
        return files(local_out)

    ok(local_env(), "prepare", images, "--format", "img2dataset", "--out", s3("prepared"))
    score = ["--model", f"local-dir:{DEMO_START}", "--image-root", images]
    ok(local_env(), "score", s3("prepared"), "--out", s3("scored"), *score)
    ok(env, "score", s3("prepared"), "--out", s3("scored-ray"), *score, "--engine", "ray")
    same("scored")
    manifest = json.loads((tmp_path / "scored" / "manifest.json").read_text())
    assert manifest["counts"]["written"] == len(wds.refs) and manifest["counts"]["removed"] == 0
    assert manifest["images"]["root"] == images and manifest["images"]["missing"] == 0
    ok(local_env(), "curate", s3("scored"), "--out", s3("curated"), "--drop-ungrounded", "0.0")
    ok(env, "curate", s3("scored"), "--out", s3("curated-ray"), "--drop-ungrounded", "0.0", "--engine", "ray")
    same("curated")
    manifest = json.loads((tmp_path / "curated" / "manifest.json").read_text())
    assert manifest["images"]["checked"] == len(wds.refs) and manifest["images"]["missing"] == 0
    pack = ["--samples-per-shard", "4", "--image-size", "32"]
    ok(local_env(), "pack", s3("curated"), "--out", s3("packed"), *pack)
    ok(env, "pack", s3("curated"), "--out", s3("packed-ray"), *pack, "--engine", "ray")
    packed = same("packed")
    assert len([name for name in packed if name.endswith(".tar")]) >= 2
