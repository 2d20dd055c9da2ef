"""train says in one line when its schedule cannot do what the options suggest, and config.json
records what ran (the precision used, not only the one asked for)."""

from __future__ import annotations

import json

import pytest
from train_fixtures import make_prepared, tiny_config


@pytest.mark.parametrize(
    "warmup,total,expected",
    [
        (200, 20, "the lr peaks at 1e-07, 10% of --lr 1e-06"),
        (200, 10, "the lr peaks at 5e-08, 5%, under 10%, of --lr 1e-06"),
        (20, 20, "the lr peaks at 1e-06, 100% of --lr 1e-06"),
        (19, 20, None),
        (200, 0, None),
    ],
)
def test_schedule_note(warmup, total, expected):
    from caption_debias.train.loop import lr_at
    from caption_debias.train.run_setup import schedule_note

    note = schedule_note(warmup, total, 1e-6)
    if expected is None:
        assert note is None
        return
    assert expected in note and "\n" not in note
    assert f"{max(lr_at(s, 1e-6, warmup, total) for s in range(total)):.3g}" in note  # the peak the loop uses


def test_train_notes_a_warmup_longer_than_the_run_and_records_fp32_for_amp_on_cpu(tmp_path, capsys):
    from caption_debias.train.loop import train

    data, images = make_prepared(tmp_path, n=8)
    cfg = tiny_config(
        data, images, tmp_path / "run", max_steps=2, warmup_steps=200, lr=1e-6, precision="amp", device="cpu"
    )
    run = train(cfg)
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "never leaves warm-up" in line]
    assert len(notes) == 1 and "--warmup-steps 200 >= the run's 2 steps" in notes[0], err
    saved = json.loads((run / "config.json").read_text())
    assert saved["config"]["precision"] == "amp"  # what was asked
    assert saved["resolved"]["precision"] == "fp32"  # what ran
    assert saved["resolved"]["schedule_note"] == notes[0].removeprefix("caption-debias: ")
