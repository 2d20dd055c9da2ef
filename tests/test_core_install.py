"""The data tools work without the optional packages: prepare and stats import none of them,
the CLIP vocabulary ships with the package, and a missing optional package is one clear line."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from install_support import OPTIONAL, cli_imports

from caption_debias.text.tokenize import VOCAB_FILE, find_vocab_path

# open_clip's optional integrations: imported by `import open_clip` unless caption_debias.model.imports
# keeps them out for a model that does not use them (timm imports wandb)

# Runs the CLI in a fresh interpreter; BLOCKED modules are made unimportable first (as if
# not installed), and the optional modules that got imported are printed last.


def test_prepare_and_stats_import_no_optional_package(tmp_path):
    table = tmp_path / "t.jsonl"
    rows = [
        {"key": "a", "image": "a.jpg", "caption": "A red car on a road. The car is old. Overall, a calm scene."},
        {"key": "b", "image": "b.jpg", "caption": "Caf\u00e9 &amp; bar at 08:45. Dr. Smith waves \u201chi\u201d."},
    ]
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    # as installed here, and as if none of the optional packages were installed
    for run, blocked in (("all", ()), ("core", OPTIONAL)):
        out, report = tmp_path / f"prepared-{run}", tmp_path / f"report-{run}"
        for args in (
            ["prepare", str(table), "--out", str(out), "--format", "table", "--quiet"],
            ["stats", str(out), "--out", str(report)],
        ):
            got, err = cli_imports(args, blocked)
            assert got == {"code": 0, "imported": [], "integrations": []}, (args, blocked, err)
        assert json.loads((out / "manifest.json").read_text())["counts"]["written"] == 2
        assert (report / "stats.json").is_file()


def test_a_missing_extra_is_one_line_naming_it(tmp_path):
    got, err = cli_imports(["export", str(tmp_path / "run"), "--out", str(tmp_path / "x")], blocked=("torch",))
    assert got["code"] == 2
    assert (
        err.strip() == "caption-debias: error: torch is not installed: pip install 'caption-debias[train]' (or torch)"
    )
    table = tmp_path / "t.jsonl"
    table.write_text(json.dumps({"key": "a", "image": "a.jpg", "caption": "A dog."}) + "\n", encoding="utf-8")
    got, err = cli_imports(
        ["prepare", str(table), "--out", str(tmp_path / "p"), "--segmenter", "spacy", "--quiet"], blocked=("spacy",)
    )
    assert got["code"] == 2
    assert (
        err.strip()
        == "caption-debias: error: --segmenter spacy needs spacy: pip install 'caption-debias[spacy]' (or spacy)"
    )


def test_shipped_vocabulary_is_open_clips():
    spec = importlib.util.find_spec("open_clip")  # located, not imported (it imports torch)
    if spec is None:
        pytest.skip("open_clip is not installed")
    theirs = Path(next(iter(spec.submodule_search_locations))) / VOCAB_FILE
    assert Path(find_vocab_path()).read_bytes() == theirs.read_bytes()


ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))


def test_every_importable_folder_of_the_package_is_a_configured_package():
    """setuptools warns (40 lines at install) about a folder Python could import, such as
    caption_debias/view/assets, that the `packages` list leaves out; each one is listed, and each
    listed package's data files are named in package-data."""
    cfg = _pyproject()["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = set()
    for folder in [ROOT / "caption_debias", *(ROOT / "caption_debias").rglob("*")]:
        if not folder.is_dir() or folder.name == "__pycache__" or not folder.name.isidentifier():
            continue
        if any(f.is_file() for f in folder.iterdir()):
            found.add(".".join(folder.relative_to(ROOT).parts))
    assert found - listed == set()
    data = cfg["package-data"]["caption_debias.view.assets"]
    served = {f.name for f in (ROOT / "caption_debias" / "view" / "assets").iterdir() if f.is_file()}
    assert served and all(any(Path(name).match(pattern) for pattern in data) for name in served)


def test_the_make_targets_the_test_markers_name_exist():
    import re

    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text("utf-8"), flags=re.M))
    for marker in _pyproject()["tool"]["pytest"]["ini_options"]["markers"]:
        for target in re.findall(r"make ([\w-]+)", marker):
            assert target in targets, f"{marker!r} names `make {target}`, which the Makefile lacks"


# A bad flag or a missing input is answered before torch loads (seconds, not the 20 s of a torch
# import under load): with torch blocked, each of these still says what is wrong with the command.
BEFORE_TORCH = [
    (["eval", "tiny", "--data", "{tmp}/nope"], "{tmp}/nope: no such folder"),
    (["eval", "tiny", "--data", "{p}", "--recall-rule", "bogus"], "unknown --recall-rule 'bogus'"),
    (["eval", "tiny", "--data", "{p}", "--device", "gpu"], "--device 'gpu': use auto, cpu, cuda, cuda:N or mps"),
    (["probe", "tiny", "--data", "{tmp}/nope", "--out", "{tmp}/r"], "{tmp}/nope: no such folder"),
    (["train", "{tmp}/nope", "--out", "{tmp}/r"], "{tmp}/nope: no such folder"),
    (["train", "{p}", "--out", "{tmp}/r", "--lr", "nan"], "--lr must be a finite number (got nan)"),
    (["train", "{p}", "--out", "{tmp}/r", "--precision", "fp8"], "unknown --precision 'fp8'"),
    (["score", "{tmp}/nope", "--out", "{tmp}/s", "--model", "tiny"], "{tmp}/nope: no such folder"),
    (["score", "{p}", "--out", "{tmp}/s", "--model", "tiny", "--batch-size", "0"], "--batch-size must be at least 1"),
    (["curate", "{p}", "--out", "{tmp}/c", "--score-model", "tiny", "--keep-top-alignment", "0"], "(0, 100]"),
]


@pytest.fixture(scope="module")
def prepared_core(tmp_path_factory) -> Path:
    """A folder prepared by a data-only install (every optional package blocked), read by the model commands."""
    folder = tmp_path_factory.mktemp("core")
    table = folder / "t.jsonl"
    table.write_text(json.dumps({"key": "a", "image": "a.jpg", "caption": "A dog. It runs."}) + "\n", encoding="utf-8")
    got, err = cli_imports(["prepare", str(table), "--out", str(folder / "p"), "--format", "table", "-q"], OPTIONAL)
    assert got["code"] == 0, err
    return folder / "p"


@pytest.mark.parametrize(("args", "error"), BEFORE_TORCH)
def test_flags_and_inputs_are_checked_before_torch_loads(args, error, tmp_path, prepared_core):
    given = [a.format(tmp=tmp_path, p=prepared_core) for a in args]
    got, err = cli_imports(given, blocked=("torch", "open_clip"))
    assert got["code"] == 2 and got["imported"] == [], (given, err)
    (line,) = err.strip().splitlines()
    assert error.format(tmp=tmp_path) in line, line


def test_yaml_config_files_need_no_extra(tmp_path):
    """pyyaml is a core dependency: a data-only install reads `prepare --config x.yaml` (it once said: install [train])."""
    import tomllib

    from caption_debias.extras import install_hint

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text("utf-8"))["project"]
    assert any(d.startswith("pyyaml") for d in project["dependencies"])
    assert not any(d.startswith("pyyaml") for extra in project["optional-dependencies"].values() for d in extra)
    assert install_hint("yaml") is None
    table = tmp_path / "t.jsonl"
    table.write_text(json.dumps({"key": "a", "image": "a.jpg", "caption": "A dog."}) + "\n", encoding="utf-8")
    (tmp_path / "c.yaml").write_text("format: table\nshard-rows: 1\nquiet: true\n")
    got, err = cli_imports(
        ["prepare", str(table), "--out", str(tmp_path / "p"), "--config", str(tmp_path / "c.yaml")], OPTIONAL
    )
    assert got == {"code": 0, "imported": [], "integrations": []}, err
    assert json.loads((tmp_path / "p" / "manifest.json").read_text())["options"]["shard_rows"] == 1


MODEL_COMMANDS = {
    "score": [
        "score",
        "{d}",
        "--out",
        "{o}/s",
        "--model",
        "demo-start",
        "--image-root",
        "{i}",
        "--reference-images",
        "4",
    ],
    "train": ["train", "{d}", "--image-root", "{i}", "--model", "tiny", "--out", "{o}/r", "--max-steps", "1"],
    "eval": ["eval", "demo-start", "--data", "{d}", "--image-root", "{i}", "--device", "cpu"],
    "probe": ["probe", "tiny", "--data", "{d}", "--image-root", "{i}", "--device", "cpu", "--out", "{o}/p"],
    "export": ["export", "demo-start", "--out", "{o}/e"],
}


@pytest.mark.parametrize(
    "command", ["score", "train", "eval", *(pytest.param(c, marks=pytest.mark.slow) for c in ("probe", "export"))]
)
def test_model_commands_import_no_open_clip_integration_their_model_does_not_use(command, tmp_path):
    """Model commands of plain CLIP models (tiny, demo-start) leave out what `import open_clip`
    would pull in: transformers, timm and through timm wandb (seconds of a start), and say what
    they import and read while they do."""
    from train_fixtures import make_prepared

    data, images = make_prepared(tmp_path, n=8)
    args = [a.format(d=data, i=images, o=tmp_path) for a in MODEL_COMMANDS[command]]
    got, err = cli_imports(args + ["--batch-size", "4"] * (command != "export"))
    assert got["code"] == 0 and got["integrations"] == [], (got, err)
    lines = err.splitlines()
    assert "caption-debias: importing torch and open_clip" in lines, err
    reads = ("caption-debias: reading weights", "caption-debias: building tiny")  # a long path wraps
    weights = next((n for n, line in enumerate(lines) if line.startswith(reads)), None)
    assert weights is not None and lines.index("caption-debias: importing torch and open_clip") < weights, err
    if command == "score":
        quiet, err = cli_imports([*args, "--overwrite", "-q"])
        assert quiet["code"] == 0 and err == "", err


def test_a_model_that_uses_an_integration_gets_it(tmp_path):
    """A config naming a timm vision tower or a Hugging Face text tower, and an hf-hub: spec (its
    config not on disk before the load), import them; an adapter imported without its package is
    imported again for such a model."""
    from caption_debias.model.imports import integrations

    def folder(name: str, cfg: dict) -> str:
        (tmp_path / name).mkdir()
        (tmp_path / name / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
        return f"local-dir:{tmp_path / name}"

    timm = folder("timm", {"embed_dim": 8, "vision_cfg": {"timm_model_name": "resnet18"}, "text_cfg": {}})
    hf = folder("hf", {"embed_dim": 8, "vision_cfg": {}, "text_cfg": {"hf_model_name": "bert-base-uncased"}})
    assert integrations([("tiny", None), ("demo-start", None), ("ViT-B-16", "openai")]) == set()
    assert integrations([("tiny", None), (timm, None)]) == {"timm"}
    assert integrations([(hf, None)]) == {"transformers"}
    assert integrations([("hf-hub:org/model", None)]) == {"timm", "transformers"}
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed")
    code = f"""
import sys
from caption_debias.model.imports import import_open_clip
open_clip = import_open_clip([("tiny", None)])
assert sys.modules["open_clip.timm_model"].timm is None and "wandb" not in sys.modules
import_open_clip([({timm!r}, None)])
print(sys.modules["open_clip.timm_model"].timm is not None)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "True", done.stderr
