"""One options mechanism (caption_debias/options.py): every float option refuses NaN and infinities,
and every limit a field declares is refused in the same one line on the command line, in a --config
file and through the Python API; --config files are bounded (size, YAML aliases, UTF-8)."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest
from cli_process import run_cli
from test_cli_dialect import OPTION_CLASSES, _commands, _options_class

from caption_debias.errors import UserError
from caption_debias.options import check_value, field_kind, fields_of, flag_name, is_required

NOT_NUMBERS = ("nan", "inf", "-inf")


def _float_options() -> list[tuple[str, str]]:
    """(command, field) of every float option of every registered command."""
    found = []
    for command in sorted(OPTION_CLASSES):
        cls = _options_class(command)
        for p in _commands()[command].params:
            if p.param_type_name == "option" and p.name in fields_of(cls) and field_kind(cls, p.name) is float:
                found.append((command, p.name))
    return found


def _bounded_options() -> list[tuple[str, str, str]]:
    """(command, field, a value its limits refuse) of every option with choices or a bound."""
    found = []
    for command in sorted(OPTION_CLASSES):
        cls = _options_class(command)
        for p in _commands()[command].params:
            f = fields_of(cls).get(p.name)
            if p.param_type_name != "option" or f is None:
                continue
            meta = f.metadata
            if meta.get("choices"):
                found.append((command, p.name, "bogus"))
            elif meta.get("min") is not None:
                found.append((command, p.name, str(meta["min"] if meta["min_open"] else meta["min"] - 1)))
            elif meta.get("max") is not None:
                found.append((command, p.name, str(meta["max"] if meta["max_open"] else meta["max"] + 1)))
    return found


def _required_args(command: str) -> list[str]:
    """Stand-in values for a command's required arguments and options (never read: parsing fails first)."""
    args = []
    for p in _commands()[command].params:
        if p.required:
            value = "1" if field_kind(_options_class(command), p.name) is int else "x"
            args += [value] if p.param_type_name == "argument" else [p.opts[0], value]
    return args


def _invoke(*args: str):
    from typer.testing import CliRunner

    from caption_debias.cli.main import app

    return CliRunner().invoke(app, list(args))


def _one_line(exc: BaseException | None, *words: str) -> str:
    assert isinstance(exc, UserError), repr(exc)
    text = str(exc)
    assert "\n" not in text and all(w in text for w in words), text
    return text


def test_the_walks_find_the_options_they_are_about():
    floats = set(_float_options())
    assert {("curate", "min_clip_score"), ("curate", "drop_ungrounded"), ("train", "lr")} <= floats
    assert {c for c, _ in floats} >= {"prepare", "curate", "score", "pack", "stats", "train", "eval", "synth"}
    bounded = {(c, f) for c, f, _ in _bounded_options()}
    assert {("curate", "engine"), ("score", "batch_size"), ("view", "port"), ("pack", "resize_mode")} <= bounded


@pytest.mark.parametrize(("command", "name"), _float_options())
def test_every_float_flag_refuses_nan_and_infinities_in_one_line(command, name):
    flag = flag_name(fields_of(_options_class(command))[name])
    for value in NOT_NUMBERS:
        res = _invoke(command, flag, value)
        _one_line(res.exception, flag, "finite number")


@pytest.mark.parametrize(("command", "name"), _float_options())
def test_every_float_option_refuses_nan_in_a_config_file(command, name, tmp_path):
    for i, value in enumerate((".nan", "nan", ".inf", "-.inf")):  # YAML's NaN, and the word for it
        config = tmp_path / f"c{i}.yaml"
        config.write_text(f"{name}: {value}\n")
        res = _invoke(command, *_required_args(command), "--config", str(config))
        _one_line(res.exception, flag_name(fields_of(_options_class(command))[name]), "finite number")


@pytest.mark.parametrize("command", sorted(OPTION_CLASSES))
def test_every_float_field_refuses_nan_from_python(command):
    cls = _options_class(command)
    required = {
        f.name: ("x" if field_kind(cls, f.name) is str else 1) for f in dataclasses.fields(cls) if is_required(f)
    }
    for f in dataclasses.fields(cls):
        if field_kind(cls, f.name) is not float:
            continue
        for value in (math.nan, math.inf, -math.inf):
            with pytest.raises(UserError, match=f"{flag_name(f)} must be a finite number"):
                cls(**{**required, f.name: value}).validate()


@pytest.mark.parametrize(("command", "name", "bad"), _bounded_options())
def test_every_limit_of_a_field_is_refused_on_the_command_line_as_validate_refuses_it(command, name, bad):
    """The CLI's limits are the field's: the value validate() refuses is refused while parsing, in the same words."""
    cls = _options_class(command)
    with pytest.raises(UserError) as from_python:
        check_value(cls, name, bad)
    res = _invoke(command, flag_name(fields_of(cls)[name]), bad)
    assert _one_line(res.exception) == str(from_python.value)


_cli = run_cli


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path_factory.mktemp("prepared")
    rows = [{"key": f"k{i}", "image": f"{i}.jpg", "caption": f"A red car number {i}. It is parked."} for i in range(6)]
    (root / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepare([root / "t.jsonl"], root / "p", PrepareOptions(format="table", quiet=True))
    return root / "p"


@pytest.mark.parametrize(
    "args",
    [
        ["curate", "{p}", "--out", "{tmp}/c", "--min-clip-score", "nan"],
        ["curate", "{p}", "--out", "{tmp}/c", "--drop-ungrounded", "nan"],
        ["train", "{p}", "--out", "{tmp}/r", "--image-root", "{tmp}", "--model", "tiny", "--lr", "nan"],
        ["prepare", "{tmp}/t.jsonl", "--out", "{tmp}/q", "--log-interval", "inf"],
    ],
)
def test_the_reported_numbers_that_are_not_numbers_exit_2_with_one_line(args, prepared, tmp_path):
    done = _cli(*[a.format(p=prepared, tmp=tmp_path) for a in args])
    flag = next(a for a in args if a.startswith("--") and a not in ("--out", "--image-root", "--model"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"caption-debias: error: {flag} must be a finite number (got {args[-1]})"
    ], done.stderr


def test_an_image_root_url_reaches_the_library_as_typed(tmp_path):
    (tmp_path / "t.jsonl").write_text(json.dumps({"key": "a", "image": "a.jpg", "caption": "A dog."}) + "\n")
    for command in ("prepare", "curate", "pack", "stats", "eval", "train", "view"):
        params = {p.name: p for p in _commands()[command].params}
        assert "Path" not in str(params["image_root"].type_descriptor.annotation), command
    res = _invoke(
        "prepare", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "p"), "--image-root", "s3://bucket/imgs"
    )
    _one_line(res.exception, "--image-root s3://bucket/imgs:")


def test_choices_named_for_a_flag_are_the_library_modules():
    """Choices the options modules name themselves (the modules that use them load numpy or torch)."""
    from caption_debias.evaluate.options import RECALL_RULES, TEMPLATE_SETS
    from caption_debias.prepare.options import SUMMARY_MODES
    from caption_debias.text.summary import SUMMARY_MODES as MODES

    assert SUMMARY_MODES == MODES
    pytest.importorskip("torch")
    from caption_debias.evaluate.metrics import RULES
    from caption_debias.evaluate.zeroshot import TEMPLATE_SETS as TEMPLATES

    assert RECALL_RULES == RULES and TEMPLATE_SETS == TEMPLATES


# ---- --config files ------------------------------------------------------------------------------


def _config(path, text: str | bytes):
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path):
    config = _config(tmp_path / "c.yaml", b"top: 3\nsplit: caf\xe9\n")
    done = _cli("stats", str(tmp_path), "--config", config)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"caption-debias: error: --config {config}: not UTF-8 text (invalid continuation byte at byte 17)"
    ]


BOMBS = {
    # anchors defined inside the option's own value, each level ten times the one before
    "nested": "decontaminate:\n"
    + '  - &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    + "".join(f"  - &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))
    + "  - *a8\n",
    # one flat list of a 1,000-character string repeated through an alias: about 100 MB once expanded
    "flat": "decontaminate: [&s " + "x" * 1000 + ", " + ", ".join(["*s"] * 100_000) + "]\n",
}


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_a_yaml_alias_bomb_in_an_option_is_refused_at_once(kind, tmp_path):
    import resource

    config = _config(tmp_path / "bomb.yaml", BOMBS[kind])
    limit = 1536 << 20  # the whole command within 1.5 GiB of address space

    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-m", "caption_debias.cli.main", "curate", str(tmp_path), "--out", str(tmp_path / "o")]
        + ["--config", config],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=bounded,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    expected = "holds a nested list or table" if kind == "nested" else "expand to more than"
    assert line.startswith(f"caption-debias: error: --config {config}: ") and expected in line, line


def test_an_oversized_config_file_is_one_line(tmp_path):
    config = _config(tmp_path / "big.toml", "# padding\n" * 200_000)
    res = _invoke("stats", str(tmp_path), "--config", config)
    _one_line(res.exception, f"--config {config}: larger than")
