"""A real multi-node Ray cluster on this machine, for tests: a head and more raylets, started and stopped here.

Each node is `ray start --block` in a process of its own (one node = one raylet, `cpus` CPUs),
all on 127.0.0.1 with ports picked free, Ray's files in a short temp folder of their own and
token authentication on (as Ray >= 2.52 starts a head): one fresh token in a file, named by
`RAY_AUTH_TOKEN_PATH` in every node's and driver's environment. Nothing outside the test
is touched: not ~/.ray, not /tmp/ray, not another Ray on the machine.

Stopping ends exactly the processes this cluster started: every node's environment carries a
token (`CLUSTER_ENV`) that Ray's own processes (GCS, raylets, agents, workers) inherit; the
`ray start --block` processes are asked to stop their nodes (SIGTERM, Ray's graceful path),
then whatever still carries the token is killed. `ray stop` is never used (it stops every
Ray on the machine).

    with ray_cluster(tmp_path, nodes=2, cpus=1) as cluster:
        subprocess.run([...caption-debias..., "--engine", "ray"], env=cluster.driver_env())

tests/test_ray_cluster.py's `two_node_cluster` fixture starts one for its module, after the S3
server whose credentials the nodes must inherit.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

CLUSTER_ENV = "CAPTION_DEBIAS_TEST_RAY_CLUSTER"
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30
OBJECT_STORE_BYTES = 80 * 1024**2  # Ray's floor is 75 MiB; two nodes on a small shared machine
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_cli() -> str:
    """The `ray` script beside this Python (the venv's), so nodes run the Ray the driver imports."""
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else shutil.which("ray") or "ray"


@dataclass
class RayCluster:
    """A running cluster: its GCS address, the token file, the node processes."""

    address: str
    token_file: Path
    temp_dir: Path
    mark: str
    cpus_per_node: int
    nodes: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def auth_env(self) -> dict[str, str]:
        """What every process of the cluster needs to speak to it: token authentication and the token's file."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_file)}

    def driver_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment for a driver process (a caption-debias command) that joins this cluster."""
        env = {k: v for k, v in (base if base is not None else os.environ).items() if k not in AUTH_ENV}
        return {**env, **self.auth_env(), "RAY_ADDRESS": self.address}

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(p.read_text("utf-8", "replace")[-chars:] for p in self.logs if p.exists())


def _node_env(cluster: RayCluster) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in AUTH_ENV}
    return {**env, **cluster.auth_env(), CLUSTER_ENV: cluster.mark, "RAY_USAGE_STATS_ENABLED": "0"}


def _node_command(cluster: RayCluster, head: bool, gcs_port: int) -> list[str]:
    ports = {
        "--node-manager-port": _free_port(),
        "--object-manager-port": _free_port(),
        "--dashboard-agent-listen-port": _free_port(),
        "--dashboard-agent-grpc-port": _free_port(),
        "--runtime-env-agent-port": _free_port(),
        "--metrics-export-port": _free_port(),
    }
    cmd = [_ray_cli(), "start", "--block", "--node-ip-address=127.0.0.1", f"--num-cpus={cluster.cpus_per_node}"]
    cmd += ["--num-gpus=0", f"--object-store-memory={OBJECT_STORE_BYTES}", "--disable-usage-stats"]
    cmd += [f"{flag}={port}" for flag, port in ports.items()]
    if head:
        cmd += ["--head", f"--port={gcs_port}", "--include-dashboard=false", f"--temp-dir={cluster.temp_dir}"]
        cmd += [f"--ray-client-server-port={_free_port()}"]
    else:
        cmd += [f"--address={cluster.address}"]
    return cmd


def _start_node(cluster: RayCluster, head: bool, gcs_port: int) -> None:
    log = cluster.temp_dir / f"node-{len(cluster.nodes)}.log"
    cluster.logs.append(log)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            _node_command(cluster, head, gcs_port),
            env=_node_env(cluster),
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the test's Ctrl-C is the test's; stop() ends the node
        )
    cluster.nodes.append(proc)


_WAIT_FOR_NODES = """
import sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
want, deadline = int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
while sum(1 for n in ray.nodes() if n["Alive"]) < want and time.monotonic() < deadline:
    time.sleep(0.5)
sys.exit(0 if sum(1 for n in ray.nodes() if n["Alive"]) >= want else 1)
"""


def _wait_for_nodes(cluster: RayCluster, want: int) -> None:
    """Until the GCS lists `want` alive nodes (asked by a short-lived driver: never this process's own Ray)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for proc in cluster.nodes:
            if proc.poll() is not None:
                raise RuntimeError(f"a Ray node exited with {proc.returncode}:\n{cluster.log_tail()}")
        left = str(max(1.0, deadline - time.monotonic()))
        env = {**_node_env(cluster), "RAY_ADDRESS": cluster.address}
        probe = [sys.executable, "-c", _WAIT_FOR_NODES, cluster.address, str(want), left]
        if subprocess.run(probe, env=env, capture_output=True).returncode == 0:
            return
        time.sleep(1)  # the GCS was not up yet: ask again
    raise RuntimeError(f"the Ray cluster did not reach {want} nodes in {START_TIMEOUT_S} s:\n{cluster.log_tail()}")


def start_cluster(nodes: int = 2, cpus: int = 1) -> RayCluster:
    """Start a head and `nodes - 1` more raylets of `cpus` CPUs each; returns once every node is alive."""
    temp_dir = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    token_file = temp_dir / "auth_token"
    token_file.write_text(uuid.uuid4().hex + uuid.uuid4().hex, "utf-8")
    token_file.chmod(0o600)
    gcs_port = _free_port()
    cluster = RayCluster(f"127.0.0.1:{gcs_port}", token_file, temp_dir, uuid.uuid4().hex, cpus)
    try:
        _start_node(cluster, True, gcs_port)
        _wait_for_nodes(cluster, 1)
        for _ in range(nodes - 1):
            _start_node(cluster, False, gcs_port)
        _wait_for_nodes(cluster, nodes)
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def _carrying_mark(mark: str) -> list:
    """Every process whose environment holds CLUSTER_ENV=mark: the ones this cluster started, however deep."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(CLUSTER_ENV) == mark:
                found.append(proc)
        except psutil.Error:
            pass
    return found


def stop_cluster(cluster: RayCluster) -> None:
    """Stop the nodes, then kill whatever this cluster started and still runs."""
    import psutil

    for proc in reversed(cluster.nodes):  # all at once: each drains its own node
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # `ray start --block` stops its node's processes on SIGTERM
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for proc in cluster.nodes:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    left = _carrying_mark(cluster.mark)
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=STOP_TIMEOUT_S)
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)


def cluster_processes(cluster: RayCluster) -> list[int]:
    """Pids of the processes this cluster started that are still running (empty once stopped)."""
    return [p.pid for p in _carrying_mark(cluster.mark)]


@contextmanager
def ray_cluster(nodes: int = 2, cpus: int = 1) -> Iterator[RayCluster]:
    cluster = start_cluster(nodes, cpus)
    try:
        yield cluster
    finally:
        stop_cluster(cluster)
