"""`caption-debias train`'s options and TrainConfig agree: one option per field, same default, same help."""

from __future__ import annotations

import inspect
import typing
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
import typer

from caption_debias.cli import train_cmd
from caption_debias.cli.common import help_text
from caption_debias.cli.main import app
from caption_debias.train.config import TrainConfig

CLI_ONLY = {"config", "no_tensorboard"}  # a file of TrainConfig values; an older spelling of --report-to


def _train_command():
    return typer.main.get_command(app).commands["train"]


def test_every_field_is_an_option_with_its_default_and_help():
    params = {p.name: p for p in _train_command().params if p.name not in CLI_ONLY}
    config = {f.name: f for f in fields(TrainConfig)}
    assert set(params) == set(config)
    config_types = typing.get_type_hints(TrainConfig)
    cli_types = inspect.signature(train_cmd.train.callback()).parameters
    for name, f in config.items():
        p = params[name]
        assert f.default is not MISSING and p.default == f.default, name
        assert p.help == help_text(TrainConfig, name) and p.help, name  # the field's help, then its bounds
        assert p.required is False, name
        assert cli_types[name].annotation == config_types[name], name  # the field's own type


@pytest.mark.parametrize("name", ["batch_size", "lr", "recipe", "trim_padding", "report_to", "grad_clip", "resume"])
def test_a_flag_left_out_resolves_to_the_config_default(name, tmp_path, monkeypatch):
    """What the command hands the library when nothing is given: TrainConfig()'s values."""
    seen = {}

    def fake_train(options):  # the front door, stopped before anything runs: only the options matter here
        from caption_debias.api import Result

        seen.update(options.to_dict())
        return Result("train", Path(options.out))

    monkeypatch.setattr("caption_debias.train.api.train", fake_train)
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["train", str(tmp_path), "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert seen[name] == getattr(TrainConfig(), name)
