"""open_clip_train's flags with open_clip_train's meanings (issue 15): accumulation equals the
large-batch step, precisions, --resume latest|FILE, aliases, --logs/--name, tower locks,
gradient checkpointing, torch.compile, --report-to (wandb offline), --val-data."""

from __future__ import annotations

import json
import re
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
from train_fixtures import make_prepared, tiny_config

from caption_debias.errors import UserError
from caption_debias.train.config import TrainConfig


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("flags")
    return make_prepared(root, n=12)


def _cfg(data, images, out, **kw) -> TrainConfig:
    return tiny_config(data, images, out or None, **{"checkpoint_every": 100, "max_steps": 2, **kw})


def _lines(run: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines()]


def _final(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(sorted((Path(run) / "checkpoints").glob("step_*.pt"))[-1], weights_only=True)["model"]


@pytest.mark.slow  # over 30 s on 2 shared cores
@pytest.mark.parametrize("recipe", ["debias", "clip"])
def test_accum_freq_equals_the_large_batch_step(world, tmp_path, recipe):
    """2 micro-batches of 2 with --accum-freq 2 take the step of one batch of 4 (the objective,
    PCA term included, sees the whole batch; the gradients of the passes add up)."""
    from caption_debias.train.loop import train

    data, images = world
    big = train(_cfg(data, images, tmp_path / "big", recipe=recipe))
    acc = train(_cfg(data, images, tmp_path / "acc", recipe=recipe, batch_size=2, accum_freq=2))
    for a, b in zip(_lines(big), _lines(acc)):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5, abs=1e-6)
    # The weights after Adam are compared through the next step's loss above: Adam scales every
    # gradient to about lr, so one that is 0 in exact arithmetic (the key bias's) turns float noise
    # into +-lr. The gradients themselves are compared here.
    _same_gradients(data, images, recipe)
    # and the step is not the small batch's
    small = train(_cfg(data, images, tmp_path / "small", recipe=recipe, batch_size=2))
    assert _lines(small)[0]["loss"] != pytest.approx(_lines(big)[0]["loss"], rel=1e-3)
    resolved = json.loads((acc / "config.json").read_text())["resolved"]
    assert resolved["global_batch_size"] == 4 and resolved["accum_freq"] == 2


def _same_gradients(data, images, recipe: str) -> None:
    from caption_debias.augment import DebiasOptions
    from caption_debias.model.load import load_model
    from caption_debias.model.trim import TrimmedCLIP
    from caption_debias.train.config import TrainConfig
    from caption_debias.train.data import FolderImages, TrainSamples, collate, load_rows
    from caption_debias.train.loop import accumulated_backward, plain_backward, to_device
    from caption_debias.train.objective import objective_for

    torch.manual_seed(0)
    loaded = load_model("tiny")
    rows = load_rows(data, loaded.tokenizer)
    samples = TrainSamples(
        rows, FolderImages(images), loaded.preprocess, recipe, 77, 0, DebiasOptions("first", False, False, False)
    )
    batch = [samples[(0, i)] for i in range(4)]
    objective = objective_for(TrainConfig(recipe=recipe, pca_dim=2))
    net = TrimmedCLIP(loaded.model.train())
    device = torch.device("cpu")

    def grads(micro_batches):
        loaded.model.zero_grad(set_to_none=True)
        inputs = [to_device(collate(mb), objective.texts, device, None) for mb in micro_batches]
        if len(inputs) == 1:
            plain_backward(net, inputs[0], objective, True, nullcontext, None)
        else:
            accumulated_backward(net, inputs, objective, True, nullcontext, None)
        return {n: p.grad.clone() for n, p in loaded.model.named_parameters() if p.grad is not None}

    large, accumulated = grads([batch]), grads([batch[:2], batch[2:]])
    assert large.keys() == accumulated.keys()
    scale = max(g.abs().max() for g in large.values())
    for name in large:
        torch.testing.assert_close(accumulated[name], large[name], rtol=1e-4, atol=1e-6 * scale)


@pytest.mark.slow  # over 30 s on 2 shared cores
def test_precisions_as_open_clip_train(world, tmp_path):
    from open_clip.transformer import LayerNormFp32

    from caption_debias.model.load import load_model
    from caption_debias.train.loop import train

    data, images = world
    bf16 = train(_cfg(data, images, tmp_path / "bf16", precision="bf16"))
    state = _final(bf16)
    assert state["visual.conv1.weight"].dtype == torch.bfloat16
    assert state["transformer.resblocks.0.mlp.c_fc.weight"].dtype == torch.bfloat16
    assert state["ln_final.weight"].dtype == torch.float32  # norms stay fp32 (and compute in fp32)
    assert all(torch.isfinite(torch.tensor(d["loss"])) for d in _lines(bf16))
    loaded = load_model(str(bf16))  # eval/export read it back
    assert loaded.info["step"] == 2

    pure = train(_cfg(data, images, tmp_path / "pure", precision="pure_bf16"))
    assert all(v.dtype == torch.bfloat16 for v in _final(pure).values() if v.is_floating_point())

    amp = train(_cfg(data, images, tmp_path / "amp", precision="amp_bfloat16"))
    assert _final(amp)["visual.conv1.weight"].dtype == torch.float32
    assert json.loads((amp / "config.json").read_text())["resolved"]["precision"] == "amp_bf16"

    from caption_debias.train.precision import convert_model

    model = load_model("tiny").model
    convert_model(model, "fp16")
    assert isinstance(model.ln_final, LayerNormFp32) and model.visual.conv1.weight.dtype == torch.float16
    with pytest.raises(UserError, match="--precision 'half'"):
        _cfg(data, images, tmp_path / "x", precision="half").validate()


def test_old_bf16_runs_resume_as_amp_bf16(world, tmp_path):
    """A run folder written when --precision bf16 meant bf16 autocast (and --batch-size was global)
    resumes under today's names for the same run: amp_bf16 and the same global batch."""
    from caption_debias.train.run_setup import _comparable

    old_cfg = _cfg(*world, tmp_path / "r", precision="bf16", batch_size=8).to_dict()
    old = _comparable(old_cfg, {"world_size": 2})
    new = _comparable(
        _cfg(*world, tmp_path / "r", precision="amp_bf16", batch_size=4).to_dict(), {"global_batch_size": 8}
    )
    assert old["precision"] == new["precision"] == "amp_bf16"
    assert old["global_batch_size"] == new["global_batch_size"] == 8


@pytest.mark.slow  # over 30 s on 2 shared cores
def test_resume_from_a_checkpoint_file(world, tmp_path, monkeypatch):
    from caption_debias.train import loop

    data, images = world
    straight = loop.train(_cfg(data, images, tmp_path / "a", max_steps=4, checkpoint_every=1))
    real = loop.lr_at
    monkeypatch.setattr(
        loop, "lr_at", lambda s, *a: (_ for _ in ()).throw(KeyboardInterrupt) if s == 3 else real(s, *a)
    )
    with pytest.raises(KeyboardInterrupt):
        loop.train(_cfg(data, images, tmp_path / "b", max_steps=4, checkpoint_every=1))
    monkeypatch.setattr(loop, "lr_at", real)
    step2 = tmp_path / "b" / "checkpoints" / "step_00000002.pt"
    # from step 2 although step 3 is there, into a new run folder
    resumed = loop.train(_cfg(data, images, tmp_path / "c", max_steps=4, checkpoint_every=1, resume=str(step2)))
    assert [d["step"] for d in _lines(resumed)] == [3, 4]
    assert [d["loss"] for d in _lines(resumed)] == [d["loss"] for d in _lines(straight)[2:]]
    wa, wb = _final(straight), _final(resumed)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    with pytest.raises(UserError, match="no such checkpoint file"):
        loop.train(_cfg(data, images, tmp_path / "d", resume=str(tmp_path / "nope.pt")))
    with pytest.raises(UserError, match="changed options \\(lr\\)"):
        loop.train(_cfg(data, images, tmp_path / "e", max_steps=4, lr=0.1, resume=str(step2)))


def _resolved_cli(args: list[str], monkeypatch) -> dict:
    from typer.testing import CliRunner

    from caption_debias.cli.main import app

    seen = {}

    def fake_train(options):  # the front door, stopped before anything runs: only the resolved options matter here
        from caption_debias.api import Result

        seen.update(options.to_dict())
        return Result("train", Path(options.out or options.logs))

    monkeypatch.setattr("caption_debias.train.api.train", fake_train)
    res = CliRunner().invoke(app, ["train", "DATA", *args])
    assert res.exit_code == 0, res.output
    return seen


@pytest.mark.parametrize(
    "args, field, value",
    [
        (["--wd", "0.2"], "weight_decay", 0.2),
        (["--weight-decay", "0.3"], "weight_decay", 0.3),
        (["--warmup", "5"], "warmup_steps", 5),
        (["--warmup-steps", "6"], "warmup_steps", 6),
        (["--grad-clip-norm", "0.5"], "grad_clip", 0.5),
        (["--grad-clip", "0"], "grad_clip", None),
        (["--log-every-n-steps", "7"], "log_every", 7),
        (["--resume", "latest"], "resume", "latest"),
        (["--report-to", "tensorboard,wandb"], "report_to", "tensorboard,wandb"),
        (["--no-tensorboard"], "report_to", ""),
        (["--accum-freq", "4"], "accum_freq", 4),
        (["--precision", "amp_bf16"], "precision", "amp_bf16"),
    ],
)
def test_open_clip_train_spellings_and_aliases(args, field, value, tmp_path, monkeypatch):
    assert _resolved_cli(["--out", str(tmp_path / "r"), *args], monkeypatch)[field] == value


def test_config_file_takes_open_clip_train_keys(tmp_path, monkeypatch):
    conf = tmp_path / "c.toml"
    conf.write_text("wd = 0.2\nwarmup = 3\ngrad-clip-norm = 2.0\nresume = true\ntensorboard = false\n")
    seen = _resolved_cli(["--out", str(tmp_path / "r"), "--config", str(conf)], monkeypatch)
    assert (seen["weight_decay"], seen["warmup_steps"], seen["grad_clip"]) == (0.2, 3, 2.0)
    assert seen["resume"] == "latest" and seen["report_to"] == ""


def test_logs_and_name_make_the_run_folder(world, tmp_path):
    from caption_debias.train.loop import train

    data, images = world
    named = train(_cfg(data, images, None, logs=str(tmp_path / "logs"), name="exp1", max_steps=1))
    assert named == tmp_path / "logs" / "exp1" and (named / "checkpoints" / "step_00000001.pt").is_file()
    auto = train(_cfg(data, images, None, logs=str(tmp_path / "logs"), max_steps=1))
    assert auto.parent == tmp_path / "logs"
    assert re.fullmatch(r"\d{4}_\d\d_\d\d-\d\d_\d\d_\d\d-model_tiny-lr_0.001-b_4-j_0-p_fp32", auto.name), auto.name
    with pytest.raises(UserError, match="either --out"):
        _cfg(data, images, tmp_path / "o", logs=str(tmp_path / "logs")).validate()


def test_lock_image_and_text_as_open_clip_train(world, tmp_path):
    from caption_debias.model.load import load_model
    from caption_debias.train.loop import train

    data, images = world
    torch.manual_seed(0)
    start = load_model("tiny").model.state_dict()
    run = train(_cfg(data, images, tmp_path / "li", recipe="clip", lock_image=True))
    end = _final(run)
    assert all(torch.equal(end[k], start[k]) for k in start if k.startswith("visual."))
    assert not torch.equal(
        end["transformer.resblocks.0.mlp.c_fc.weight"], start["transformer.resblocks.0.mlp.c_fc.weight"]
    )

    # open_clip's groups from the end: the projection, then the last block with ln_final, ...
    run = train(_cfg(data, images, tmp_path / "lt", recipe="clip", lock_text=True, lock_text_unlocked_layers=2))
    end = _final(run)
    assert torch.equal(end["transformer.resblocks.0.mlp.c_fc.weight"], start["transformer.resblocks.0.mlp.c_fc.weight"])
    assert not torch.equal(
        end["transformer.resblocks.1.mlp.c_fc.weight"], start["transformer.resblocks.1.mlp.c_fc.weight"]
    )
    assert not torch.equal(end["text_projection"], start["text_projection"])
    assert torch.equal(end["token_embedding.weight"], start["token_embedding.weight"])
    assert not torch.equal(end["visual.conv1.weight"], start["visual.conv1.weight"])


def test_grad_checkpointing_gives_the_same_step(world, tmp_path):
    from caption_debias.train.loop import train

    data, images = world
    plain = train(_cfg(data, images, tmp_path / "p", recipe="clip", trim_padding=False))
    ckpt = train(_cfg(data, images, tmp_path / "c", recipe="clip", trim_padding=False, grad_checkpointing=True))
    for a, b in zip(_lines(plain), _lines(ckpt)):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-6)


def test_torchcompile_trains_through_dynamo(world, tmp_path, monkeypatch):
    """The compiled module takes the steps; the eager backend keeps this quick on a CPU
    (Inductor's code generation is the GPU machine's check), checkpoints keep plain keys."""
    from caption_debias.train.loop import train

    data, images = world
    real_compile = torch.compile
    compiled = []

    def compile_eager(module, **kw):
        compiled.append(type(module).__name__)
        return real_compile(module, backend="eager")

    monkeypatch.setattr(torch, "compile", compile_eager)
    plain = train(_cfg(data, images, tmp_path / "p", recipe="clip"))
    run = train(_cfg(data, images, tmp_path / "c", recipe="clip", torchcompile=True))
    assert compiled == ["TrimmedCLIP"]
    assert not any(k.startswith("_orig_mod") for k in _final(run))
    for a, b in zip(_lines(plain), _lines(run)):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)


def test_report_to_tensorboard_and_wandb_offline(world, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from caption_debias.train.loop import train

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    data, images = world
    run = train(_cfg(data, images, tmp_path / "run", report_to="tensorboard,wandb"))
    # The offline file is written by wandb's service process; run.finish() does not wait for it to
    # close the file. teardown() ends that process, so the file is whole however loaded the machine.
    import wandb

    wandb.teardown()
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    logs = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    run_id = (run / "wandb" / "run_id").read_text()
    assert len(logs) == 1 and logs[0].name == f"run-{run_id}.wandb"  # --resume continues this id
    blob = logs[0].read_bytes()
    assert b"train/loss" in blob and b"train/logit_scale" in blob


def test_report_to_unknown_is_one_line(world, tmp_path):
    with pytest.raises(UserError, match="--report-to 'mlflow'"):
        _cfg(*world, tmp_path / "r", report_to="mlflow").validate()


@pytest.mark.slow  # over 30 s on 2 shared cores
def test_val_data_recall_logged_like_the_loss(world, tmp_path):
    from caption_debias.train.loop import train

    data, images = world
    # 12 rows / batch 4 = 3 steps an epoch: validation after epochs 1 and 2 (steps 3, 6) and none between
    run = train(_cfg(data, images, tmp_path / "run", max_steps=6, val_data=str(data), report_to="tensorboard"))
    val = [d for d in _lines(run) if "val_t2i_r1" in d]
    assert [d["step"] for d in val] == [3, 6]
    for d in val:
        assert set(d) >= {"val_t2i_r1", "val_t2i_r5", "val_t2i_r10", "val_i2t_r1", "val_i2t_r10"}
        assert all(0.0 <= d[k] <= 100.0 for k in d if k.startswith("val_"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    assert "val/t2i_r1" in acc.Tags()["scalars"] and "train/loss" in acc.Tags()["scalars"]
    assert [e.step for e in acc.Scalars("val/t2i_r1")] == [3, 6]
