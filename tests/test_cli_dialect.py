"""One dialect: every command's flags follow the same rules, and the first-hour errors are one line."""

from __future__ import annotations

import pytest
from cli_process import run_cli

from caption_debias.options import API_ONLY  # fields the Python API takes that are no flag

_main = run_cli


@pytest.mark.parametrize("command", ["curate", "stats"])
def test_a_dump_file_given_for_a_prepared_folder_says_run_prepare_first(command, tmp_path):
    dump = tmp_path / "some.json"
    dump.write_text("[]")
    extra = ["--out", str(tmp_path / "o")] if command == "curate" else []
    proc = _main(command, str(dump), *extra)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        f"caption-debias: error: {dump}: a file, not a prepared folder; run `caption-debias prepare {dump} --out DIR` first"
    ]


# ---- the dialect, read off the registered commands -------------------------------------------------

# Commands that can run longer than a few seconds: each has --log-interval (plain progress lines).
LONG = {"prepare", "curate", "pack", "stats", "train", "eval", "probe", "demo", "export-captions", "urls", "ablate"}
# Commands with --out and no --overwrite, and why: a report rewritten on every run (nothing to resume),
# or train, whose run folder is continued with --resume latest and never deleted by a flag (as open_clip_train).
NO_OVERWRITE = {"stats", "probe", "demo", "eval", "train"}
# Names an output folder or file may not go by: it is --out.
OLD_OUTPUT_NAMES = {"--output", "--to", "--report", "--output-dir", "--out-dir", "--dest", "--save"}
# The options class each command builds from its parsed flags (one field per flag, named as the parameter).
OPTION_CLASSES = {
    "prepare": "caption_debias.prepare.options:PrepareOptions",
    "curate": "caption_debias.curate.options:CurateOptions",
    "pack": "caption_debias.pack.options:PackOptions",
    "stats": "caption_debias.stats.options:StatsOptions",
    "train": "caption_debias.train.config:TrainConfig",
    "score": "caption_debias.score.options:ScoreOptions",
    "eval": "caption_debias.evaluate.options:EvalOptions",
    "probe": "caption_debias.evaluate.options:ProbeOptions",
    "urls": "caption_debias.export.options:UrlsOptions",
    "export-captions": "caption_debias.export.options:ExportCaptionsOptions",
    "export": "caption_debias.model.options:ExportOptions",
    "synth": "caption_debias.synth.options:SynthOptions",
    "view": "caption_debias.view.options:ViewOptions",
    "demo": "caption_debias.demo:DemoOptions",
    "ablate": "caption_debias.ablate.options:AblateOptions",
}
# Parameters that are a command's own, not options: its positional inputs, --out, --config, and
# train's hidden older spelling of --report-to.
CLI_ONLY = {"out", "config", "no_tensorboard"}
# The flags most commands share come from one base each (caption_debias/options.py), worded once.
SHARED = {
    "quiet": "QuietOptions",
    "log_interval": "ProgressOptions",
    "overwrite": "OverwriteOptions",
    "image_root": "ImageRootOptions",
    "workers": "EngineOptions",
    "engine": "EngineOptions",
    "ray_address": "EngineOptions",
}
# Flags spelled as a shared one that mean something else, and why.
NOT_SHARED = {
    ("train", "workers"),  # DataLoader workers: default 0, not a stage's worker processes
    ("export-captions", "image_root"),  # a text prefix written before relative paths, never read from
}


def _options_class(name: str) -> type:
    import importlib

    module, cls = OPTION_CLASSES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def _commands() -> dict:
    import typer

    from caption_debias.cli.main import app

    return typer.main.get_command(app).commands


def _options(command) -> dict:
    """{long flag: parameter} of a command's visible options."""
    return {
        opt: p
        for p in command.params
        if p.param_type_name == "option" and not p.hidden
        for opt in p.opts
        if opt.startswith("--")
    }


def _dialect_problems(name: str, command) -> list[str]:
    problems = []
    opts = _options(command)
    for flag in ("--config", "--quiet"):
        if flag not in opts:
            problems.append(f"no {flag}")
    if "--quiet" in opts and "-q" not in opts["--quiet"].opts:
        problems.append("--quiet without -q")
    for old in OLD_OUTPUT_NAMES & set(opts):
        problems.append(f"{old} names an output: call it --out")
    if "--out" in opts and name not in NO_OVERWRITE and "--overwrite" not in opts:
        problems.append("--out without --overwrite")
    if name in LONG and "--log-interval" not in opts:
        problems.append("a long command without --log-interval")
    if "--log-interval" in opts and opts["--log-interval"].default != 30.0:
        problems.append("--log-interval default is not 30 s")
    if "--image-root" in opts and "Path" in str(opts["--image-root"].type_descriptor.annotation):
        problems.append("--image-root is a Path (s3://b/x would reach the library as s3:/b/x): type it str")
    if "--workers" in opts and "-j" not in opts["--workers"].opts:
        problems.append("--workers without -j")
    if "--ray-address" in opts and "--engine" not in opts:
        problems.append("--ray-address without --engine")
    for flag, p in opts.items():
        if not (p.help or "").strip():
            problems.append(f"{flag} has no help")
    return problems


def test_every_command_speaks_the_dialect():
    commands = _commands()
    assert {"prepare", "stats", "curate", "train", "export", "eval", "probe", "demo", "pack"} <= set(commands)
    problems = {name: _dialect_problems(name, cmd) for name, cmd in commands.items()}
    assert {name: p for name, p in problems.items() if p} == {}


def test_the_dialect_check_catches_an_inconsistent_command():
    import typer

    def bad(output: str = typer.Option(..., "--output"), workers: int = typer.Option(1, "--workers")) -> None:
        """A command that does not follow the dialect."""

    app = typer.Typer()
    app.command("bad")(bad)
    app.command("other")(bad)
    problems = _dialect_problems("urls", typer.main.get_command(app).commands["bad"])
    assert set(problems) >= {
        "no --config",
        "no --quiet",
        "--output names an output: call it --out",
        "a long command without --log-interval",
        "--workers without -j",
    }


@pytest.mark.parametrize("name", sorted(LONG | {"export", "synth"}))
def test_every_command_answers_dash_h(name):
    from typer.testing import CliRunner

    from caption_debias.cli.main import app

    res = CliRunner().invoke(app, [name, "-h"])
    assert res.exit_code == 0 and "Usage:" in res.output and "--out" in res.output, res.output


def test_every_command_reads_its_options_from_an_options_class():
    assert set(_commands()) == set(OPTION_CLASSES)


@pytest.mark.parametrize("name", sorted(OPTION_CLASSES))
def test_one_field_per_flag(name):
    """Every option of a command is one field of its options class, under the field's name: its
    flags, default and help are the field's (declared once, read by cli/common.py field_param)."""
    from caption_debias.cli.common import help_text
    from caption_debias.options import field_default, fields_of, flags_of, is_required

    fields = fields_of(_options_class(name))
    params = [p for p in _commands()[name].params if not getattr(p, "hidden", False)]
    options = [p for p in params if p.param_type_name == "option"]
    own = {p.name for p in options} - set(fields)
    assert own <= CLI_ONLY, f"{name}: options that are not fields of its class: {own}"
    for p in options:
        if p.name in CLI_ONLY:
            continue
        field = fields[p.name]
        declared = {flag for spelling in flags_of(field) for flag in spelling.split("/")}
        assert set(p.opts) | set(p.secondary_opts) == declared, (name, p.name)
        if is_required(field):
            assert p.required, (name, p.name)
        else:
            assert p.default == field_default(field), (name, p.name)
        assert p.help == help_text(_options_class(name), p.name), (name, p.name)  # the field's help, and its bounds
    # a positional argument that is an option too (train's DATA) is the field's
    for p in params:
        if p.param_type_name == "argument" and p.name in fields:
            assert p.help == fields[p.name].metadata["help"], (name, p.name)


@pytest.mark.parametrize("name", sorted(OPTION_CLASSES))
def test_every_field_is_a_flag(name):
    """The other way round: every field of a command's options class reaches its command line (and so
    --config), unless it is a tuning knob of the API alone (--max-missing-images was one by mistake)."""
    params = {p.name for p in _commands()[name].params}
    from caption_debias.options import fields_of

    assert set(fields_of(_options_class(name))) - params <= API_ONLY, name


@pytest.mark.parametrize("name", sorted(OPTION_CLASSES))
def test_shared_flags_come_from_the_shared_bases(name):
    """--quiet, --log-interval, --overwrite, --image-root, --workers, --engine and --ray-address are
    each one field of one base class: the same flag, default, limits and help in every command."""
    from caption_debias import options as base

    cls = _options_class(name)
    fields = base.fields_of(cls)
    visible = _options(_commands()[name])
    for field_name, base_name in SHARED.items():
        if (name, field_name) in NOT_SHARED or (
            field_name not in fields and f"--{field_name.replace('_', '-')}" not in visible
        ):
            continue
        shared_base = getattr(base, base_name)
        assert issubclass(cls, shared_base), f"{name}: {field_name} is not {base_name}'s"
        assert fields[field_name].metadata == base.fields_of(shared_base)[field_name].metadata, (name, field_name)
        assert fields[field_name].default == base.fields_of(shared_base)[field_name].default, (name, field_name)


def test_the_shared_bases_word_each_flag_once():
    from caption_debias import options as base
    from caption_debias.progress import DEFAULT_INTERVAL

    declared = {}
    for cls in (
        base.QuietOptions,
        base.ProgressOptions,
        base.OverwriteOptions,
        base.ImageRootOptions,
        base.EngineOptions,
    ):
        for name in cls.__dataclass_fields__:
            declared.setdefault(name, set()).add(base.fields_of(cls)[name].metadata["help"])
    assert all(len(helps) == 1 for helps in declared.values()), declared
    assert base.fields_of(base.ProgressOptions)["log_interval"].default == DEFAULT_INTERVAL


# ---- the command built from its options class (cli/common.py Command) ------------------------------


def _toy_app(extra_field: bool):
    """A command built from a small options class, with or without one more field, and what its run got."""
    from dataclasses import dataclass

    import typer

    from caption_debias.cli.common import Command, add_command, argument
    from caption_debias.options import ProgressOptions, option

    @dataclass(kw_only=True)
    class Toy(ProgressOptions):
        size: int = option(3, "How big.", min=1, metavar="N")

    @dataclass(kw_only=True)
    class Toy2(Toy):
        colour: str = option("red", "Which colour.", choices=("red", "blue"))

    seen: dict = {}

    def run(options, inputs: list[str] | None = None) -> None:
        """A toy command."""
        seen.update(options=options, inputs=inputs)

    app = typer.Typer()
    toy = Command(Toy2 if extra_field else Toy, run, args=(argument("inputs", list[str], "Inputs."),))
    add_command(app, "toy", toy)
    add_command(app, "other", Command(Toy, run, renamed={"--big": "--size"}))
    return app, seen


def test_a_field_added_to_an_options_class_is_a_flag_with_no_other_edit():
    from typer.testing import CliRunner

    app, seen = _toy_app(extra_field=False)
    assert "--colour" not in CliRunner().invoke(app, ["toy", "-h"]).output
    app, seen = _toy_app(extra_field=True)
    res = CliRunner().invoke(app, ["toy", "a", "b", "--size", "5", "--colour", "blue", "-q"])
    assert res.exit_code == 0, res.output
    assert seen["inputs"] == ["a", "b"] and (seen["options"].size, seen["options"].colour) == (5, "blue")
    assert seen["options"].quiet is True and seen["options"].log_interval == 30.0


def test_a_built_command_checks_with_the_field_and_shows_its_help_in_the_one_order():
    import typer
    from typer.testing import CliRunner

    from caption_debias.errors import UserError

    app, _ = _toy_app(extra_field=True)
    res = CliRunner().invoke(app, ["toy", "a", "--colour", "green"])
    assert isinstance(res.exception, UserError) and "unknown --colour 'green'" in str(res.exception)
    res = CliRunner().invoke(app, ["toy", "a", "--size", "0"])
    assert isinstance(res.exception, UserError) and "--size must be at least 1" in str(res.exception)
    command = typer.main.get_command(app).commands["toy"]
    # inputs, the command's own fields (the most derived class first), the shared ones last, --config
    assert [p.name for p in command.params] == ["inputs", "colour", "size", "quiet", "log_interval", "config"]
    size = next(p for p in command.params if p.name == "size")
    assert size.metavar == "N" and size.help == "How big. Range: x>=1."


def test_a_built_command_keeps_an_old_spelling():
    from typer.testing import CliRunner

    app, seen = _toy_app(extra_field=False)
    res = CliRunner().invoke(app, ["other", "--big", "4"])
    assert res.exit_code == 0 and seen["options"].size == 4, res.output
    assert "--big is now --size (the old spelling still works)" in res.output


# ---- --config --------------------------------------------------------------------------------------


def _table(path, n=30):
    import json

    rows = [{"key": f"k{i}", "image": f"i{i}.jpg", "caption": f"A photo of thing {i}. It is red."} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _invoke(*args: str):
    from typer.testing import CliRunner

    from caption_debias.cli.main import app

    return CliRunner().invoke(app, list(args))


def test_config_file_fills_options_and_flags_given_win_prepare(tmp_path):
    import json

    src = _table(tmp_path / "t.jsonl")
    (tmp_path / "c.yaml").write_text("format: table\nshard-rows: 4\nsegmenter: fast\nquiet: true\nsplit: dev\n")
    res = _invoke("prepare", str(src), "--out", str(tmp_path / "p"), "--config", str(tmp_path / "c.yaml"))
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert [s["rows"] for s in manifest["shards"]][:2] == [4, 4] and manifest["options"]["split"] == "dev"
    assert res.output == ""  # quiet came from the file
    res = _invoke(
        "prepare", str(src), "--out", str(tmp_path / "p2"), "--config", str(tmp_path / "c.yaml"), "--shard-rows", "10"
    )
    manifest = json.loads((tmp_path / "p2" / "manifest.json").read_text())
    assert [s["rows"] for s in manifest["shards"]] == [10, 10, 10]  # the flag typed wins over the file


def test_config_file_fills_options_and_flags_given_win_stats(tmp_path):
    import json

    src = _table(tmp_path / "t.jsonl")
    assert _invoke("prepare", str(src), "--out", str(tmp_path / "p"), "--format", "table", "-q").exit_code == 0
    (tmp_path / "c.toml").write_text('top = 1\nphrase_words = 2\nout = "' + str(tmp_path / "r") + '"\nquiet = true\n')
    res = _invoke("stats", str(tmp_path / "p"), "--config", str(tmp_path / "c.toml"), "--top", "4")
    assert res.exit_code == 0, res.output
    options = json.loads((tmp_path / "r" / "stats.json").read_text())["options"]
    assert options["phrase_words"] == 2 and options["top_phrases"] == 4
    # the positional folders may come from the file too, one or a list
    (tmp_path / "d.yaml").write_text(f"folders: {tmp_path / 'p'}\nout: {tmp_path / 'r2'}\nquiet: true\n")
    assert _invoke("stats", "--config", str(tmp_path / "d.yaml")).exit_code == 0
    assert (tmp_path / "r2" / "stats.json").is_file()


# A --config file's value reaches the options class and its validate(): {command: (args, file, error)}.
CONFIG_REACHES_THE_OPTIONS = {
    "eval": (["tiny"], "data: [DIR]\nvariants: keep,bogus\n", "unknown caption variant 'bogus'"),
    "probe": (["tiny", "--out", "DIR/r"], "data: DIR\nbenchmark: bogus\n", "unknown benchmark 'bogus'"),
    "urls": (["DIR", "--out", "DIR/l.parquet"], "strip: bogus\n", "unknown --strip 'bogus'"),
    "export-captions": (["DIR", "--out", "DIR/c.jsonl"], "augment: debias\ncopies: 0\n", "--copies must be at least 1"),
    "synth": (["--out", "DIR/w"], "n: 4\nplant_redrawn: 0.1\n", "--plant-redrawn goes with --plant"),
    "demo": (["--out", "DIR/d"], "quick: true\npreset: v1\n", "--quick is --preset quick"),
    "ablate": (["DIR/plan.toml", "--out", "DIR/a"], "device: gpu\n", "--device 'gpu'"),
}


@pytest.mark.parametrize("name", sorted(CONFIG_REACHES_THE_OPTIONS))
def test_config_file_values_reach_the_options_class(name, tmp_path):
    from caption_debias.errors import UserError

    args, text, error = CONFIG_REACHES_THE_OPTIONS[name]
    (tmp_path / "c.yaml").write_text(text.replace("DIR", str(tmp_path)))
    res = _invoke(name, *[a.replace("DIR", str(tmp_path)) for a in args], "--config", str(tmp_path / "c.yaml"))
    assert isinstance(res.exception, UserError) and error in str(res.exception), res.output


def test_config_file_with_an_unknown_key_is_one_line(tmp_path):
    (tmp_path / "c.toml").write_text("top = 1\nshard_rowz = 3\n")
    proc = _main("stats", str(tmp_path), "--config", str(tmp_path / "c.toml"))
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(
        f"caption-debias: error: --config {tmp_path / 'c.toml'}: unknown option 'shard_rowz' for `stats`"
    )


def test_an_old_flag_spelling_works_and_says_so_once(tmp_path):
    src = _table(tmp_path / "t.jsonl")
    proc = _main("prepare", str(src), "--format", "table", "--output", str(tmp_path / "p"), "-q")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "caption-debias prepare: --output is now --out (the old spelling still works)"
    ]
    assert (tmp_path / "p" / "manifest.json").is_file()


def test_train_reads_config_through_the_same_helper_and_suggests_a_near_key(tmp_path):
    (tmp_path / "c.yaml").write_text("warmup-step: 3\n")
    proc = _main("train", str(tmp_path), "--out", str(tmp_path / "r"), "--config", str(tmp_path / "c.yaml"))
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        f"caption-debias: error: --config {tmp_path / 'c.yaml'}: unknown option 'warmup-step' for `train` "
        "(did you mean 'warmup_steps'?)"
    ]


def test_quiet_means_nothing_printed(tmp_path):
    src = _table(tmp_path / "t.jsonl")
    runs = [
        ["synth", "--out", str(tmp_path / "w"), "--n", "2", "-q"],
        ["prepare", str(src), "--format", "table", "--out", str(tmp_path / "p"), "-q"],
        ["stats", str(tmp_path / "p"), "--out", str(tmp_path / "r"), "-q"],
        ["export-captions", str(tmp_path / "p"), "--out", str(tmp_path / "c.jsonl"), "-q"],
    ]
    for args in runs:
        proc = _main(*args)
        assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == "", (args, proc.stdout, proc.stderr)
