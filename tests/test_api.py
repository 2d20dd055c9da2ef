"""The Python API (caption_debias/api.py, docs/api.md): docs/api.md's example runs as written;
the calls print nothing by default, return counts and paths, name unknown options, and
`import caption_debias` stays light."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import caption_debias as cd

ROOT = Path(__file__).resolve().parents[1]


def _doc_example() -> str:
    text = (ROOT / "docs" / "api.md").read_text("utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/api.md holds one example"
    return blocks[0]


@pytest.mark.slow
def test_the_documented_example_runs(tmp_path):
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, "-c", _doc_example()], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "24 records, 24 rows in 1 shard(s)"
    assert json.loads(lines[1].replace("'", '"'))["image_missing"] == 0  # the recorded image root was used
    assert lines[2].startswith("packed/00000.tar") and lines[4].startswith("2 steps")
    assert (tmp_path / "stats-report" / "report.html").is_file() and (tmp_path / "run" / "config.json").is_file()
    assert set(json.loads(lines[5].replace("'", '"'))) == {"r1", "r5", "r10"}


def test_calls_are_quiet_return_counts_and_paths(tmp_path, capfd):
    table = tmp_path / "t.jsonl"
    rows = [{"key": f"k{i}", "image": f"{i}.jpg", "caption": f"A red car number {i}. It is parked."} for i in range(5)]
    rows.append({"key": "bad", "image": "", "caption": "No image."})
    table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = cd.prepare(table, tmp_path / "p", format="table", shard_rows=2)
    assert capfd.readouterr() == ("", "")  # no progress, no summary
    assert result.command == "prepare" and result.out == tmp_path / "p"
    assert result.counts["read"] == 6 and result.counts["written"] == 5 and result.counts["rejected"] == 1
    assert [p.name for p in result.paths["shards"]] == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    assert result.paths["rejects"].read_text().count("\n") == 1
    stats = cd.stats(result.out, tmp_path / "report")
    assert stats.counts == {"records": 5} and stats.paths["html"].is_file()
    assert capfd.readouterr() == ("", "")
    cd.prepare(table, tmp_path / "p", format="table", shard_rows=2, quiet=False)
    assert "records read 6, written 5, rejected 1" in capfd.readouterr().err  # asked for: the summary


def test_unknown_options_name_the_close_ones():
    with pytest.raises(TypeError, match=r"unknown option 'shard_row' \(did you mean shard_rows\?\)"):
        cd.prepare("x.jsonl", "out", shard_row=3)
    with pytest.raises(TypeError, match="unknown option 'image_roots'"):
        cd.pack("x", "out", image_roots="y")


def test_the_stages_stay_callable_after_their_modules_are_imported():
    import caption_debias.curate.run  # noqa: F401  (binds caption_debias.curate to the subpackage)

    assert callable(cd.curate) and cd.curate is sys.modules["caption_debias.curate"]
    assert {"prepare", "curate", "pack", "stats", "train", "evaluate", "Result"} <= set(dir(cd))


def test_importing_the_package_loads_no_stage():
    code = "import sys, caption_debias as cd; cd.Result; print(sorted(m for m in ('torch', 'polars', 'pyarrow', 'open_clip', 'caption_debias.prepare.run') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_evaluate_takes_one_eval_options_or_keywords_not_both(tmp_path):
    from caption_debias.errors import UserError
    from caption_debias.evaluate.options import EvalOptions
    from caption_debias.synth.world import write_world

    torch = pytest.importorskip("torch")
    write_world(tmp_path / "w", 8, seed=0)
    prepared = cd.prepare(tmp_path / "w" / "sharegpt4v.json", tmp_path / "p", image_root=str(tmp_path / "w"))
    torch.manual_seed(0)  # `tiny` without weights is a random init: the same one for both calls
    by_keywords = cd.evaluate("tiny", prepared.out, batch_size=4, variants="keep,first")
    options = EvalOptions(data=[str(prepared.out)], batch_size=4, variants="keep,first", quiet=True)
    torch.manual_seed(0)
    by_options = cd.evaluate("tiny", options=options)
    assert set(by_options.data) == {"keep", "first"} and by_options.data == by_keywords.data
    with pytest.raises(TypeError, match="not both"):
        cd.evaluate("tiny", prepared.out, options=options)
    with pytest.raises(TypeError, match=r"unknown option 'batchsize' \(did you mean batch_size\?\)"):
        cd.evaluate("tiny", prepared.out, batchsize=4)
    with pytest.raises(UserError, match="unknown caption variant 'bogus'"):
        cd.evaluate("tiny", options=EvalOptions(data=[str(prepared.out)], variants="bogus"))


QUIET_CALLS = """
import json, sys
import caption_debias as cd
from caption_debias.synth.world import write_world

write_world("w", 8, seed=0)
prepared = cd.prepare("w/sharegpt4v.json", "p", image_root="w")
scored = cd.score(prepared.out, "s", model="tiny", batch_size=4, reference_images=4)
evaluated = cd.evaluate("tiny", prepared.out, batch_size=4)
print(json.dumps({"score": [scored.command, scored.counts["read"], scored.counts["written"], len(scored.paths["shards"])],
                  "eval": sorted(evaluated.data)}))
"""


@pytest.mark.slow  # two random-init models on a CPU
def test_score_is_a_stage_and_model_calls_print_nothing(tmp_path):
    """cd.score joins the stages; with a random init (`tiny`, no weights) neither it nor cd.evaluate
    lets open_clip's "No pretrained weights loaded" WARNING through (a fresh process: pytest's own
    log capture would hide it)."""
    pytest.importorskip("open_clip")
    done = subprocess.run(
        [sys.executable, "-c", QUIET_CALLS], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["score"] == ["score", 8, 8, 1] and got["eval"] == ["keep"]


def test_options_objects_and_flag_spellings_are_accepted(tmp_path):
    from caption_debias.prepare.options import PrepareOptions

    table = tmp_path / "t.jsonl"
    table.write_text(
        "".join(json.dumps({"key": f"k{i}", "image": "a.jpg", "caption": "A dog."}) + "\n" for i in range(3))
    )
    options = PrepareOptions(format="table", shard_rows=2, quiet=True)
    assert cd.prepare(table, tmp_path / "p", options=options).counts["written"] == 3
    with pytest.raises(TypeError, match="not both"):
        cd.prepare(table, tmp_path / "p", options=options, shard_rows=3)
    with pytest.raises(TypeError, match="options= takes a PrepareOptions"):
        cd.prepare(table, tmp_path / "p", options=object())
    # the flag's other spelling (stats --top) is the option's Python name too
    assert cd.stats(tmp_path / "p", top=1).data["options"]["top_phrases"] == 1
