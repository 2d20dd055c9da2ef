"""tests/cli_process.run_cli, the forked CLI most tests use, answers as a fresh `caption-debias` process does:
the same exit status, stdout and stderr, in the given working folder and environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cli_process
import pytest
from cli_process import SCRIPT, _exit_code, run_cli


def fresh(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def answer(proc: subprocess.CompletedProcess) -> tuple:
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture()
def folders(tmp_path):
    """Two like folders, one per runner, so that relative paths give the same messages."""
    made = []
    for name in ("fresh", "forked"):
        folder = tmp_path / name
        folder.mkdir()
        rows = [{"key": f"k{i}", "image": f"{i}.jpg", "caption": f"A photo {i}. It shows a boat."} for i in range(6)]
        (folder / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n", "utf-8")
        made.append(folder)
    return made


ARGS = [
    ["--version"],
    ["prepare", "nope.jsonl", "--out", "out"],  # a relative path that is not there: one line, exit 2
    ["prepare", "t.jsonl", "--format", "table", "--out", "out", "-q"],
    ["prepare", "t.jsonl", "--format", "table", "--out", "out", "--shard-rows", "0"],  # a bad flag value
    ["curate", "t.jsonl", "--out", "c"],  # not a prepared folder
    ["stats", "--bogus"],  # click's usage error
]


@pytest.mark.parametrize("args", ARGS, ids=lambda a: " ".join(a)[:40])
def test_a_forked_run_answers_as_a_fresh_process(folders, args):
    want = fresh(*args, cwd=folders[0])
    got = run_cli(*args, cwd=folders[1])
    assert answer(got) == answer(want)
    assert sorted(p.name for p in folders[1].rglob("*")) == sorted(p.name for p in folders[0].rglob("*"))


def test_a_call_in_a_test_forks(monkeypatch):
    """Neither pytest's marker of the running test nor what the library sets in this process's environment
    (score's import, pack's resizer default) is another environment: the call is forked, not a fresh process."""
    import caption_debias.score  # noqa: F401

    monkeypatch.setenv("NO_ALBUMENTATIONS_UPDATE", os.environ.get("NO_ALBUMENTATIONS_UPDATE", "1"))
    fresh_runs, real = [], subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **kw: fresh_runs.append(a) or real(*a, **kw))
    assert run_cli("--version").returncode == 0
    assert fresh_runs == []


def test_the_environment_is_the_given_one(tmp_path):
    narrow, wide = ({**os.environ, "COLUMNS": str(n)} for n in (50, 150))
    assert answer(run_cli("prepare", "-h", env=narrow, cwd=tmp_path)) == answer(
        fresh("prepare", "-h", cwd=tmp_path, env=narrow)
    )
    assert run_cli("prepare", "-h", env=narrow).stdout != run_cli("prepare", "-h", env=wide).stdout


@pytest.mark.parametrize("code", [None, 0, 3, "bye"])
def test_system_exit_ends_the_run_as_it_ends_the_interpreter(code, capsys):
    want = subprocess.run([sys.executable, "-c", f"raise SystemExit({code!r})"], capture_output=True, text=True)
    assert _exit_code(code) == want.returncode and capsys.readouterr().err == want.stderr


def test_a_run_past_its_timeout_is_killed(folders):
    assert run_cli("prepare", "t.jsonl", "--format", "table", "--out", "p", "-q", cwd=folders[1]).returncode == 0
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli("view", "p", "--port", "0", "-q", cwd=folders[1], timeout=3)  # serves until stopped
    server = cli_process._server
    assert run_cli("--version").returncode == 0 and cli_process._server is server  # the server lived on
    assert server is not None and server.proc.poll() is None


def test_the_console_script_is_the_one_beside_this_python():
    assert Path(SCRIPT).parent == Path(sys.executable).parent and os.access(SCRIPT, os.X_OK)
