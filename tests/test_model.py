"""Model library: spec loading, Long-CLIP stretching against the formula, weights-only reads."""

from __future__ import annotations

import pytest
import torch

from caption_debias.errors import UserError
from caption_debias.model.load import load_model
from caption_debias.model.stretch import (
    knowledge_preserved_stretch,
    merged_state_dict,
    stretch_positional_embedding,
    uniform_stretch,
)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


def _longclip_reference(pre: torch.Tensor, keep: int = 20) -> torch.Tensor:
    """Long-CLIP's published loop, written out index by index."""
    length, width = pre.shape
    res = torch.zeros(4 * length - 3 * keep, width)
    res[:keep] = pre[:keep]
    for i in range(length - 1 - keep):
        a, b = pre[i + keep], pre[i + 1 + keep]
        res[4 * i + keep] = a
        res[4 * i + 1 + keep] = 3 * a / 4 + b / 4
        res[4 * i + 2 + keep] = 2 * a / 4 + 2 * b / 4
        res[4 * i + 3 + keep] = a / 4 + 3 * b / 4
    d = pre[length - 1] - pre[length - 2]
    for j in range(4):
        res[4 * length - 3 * keep - 4 + j] = pre[length - 1] + j * d / 4
    return res


def test_stretch_matches_longclip_formula():
    pre = torch.randn(77, 16, generator=torch.Generator().manual_seed(0))
    out = knowledge_preserved_stretch(pre, keep=20)
    assert out.shape == (248, 16)
    torch.testing.assert_close(out, _longclip_reference(pre), rtol=0, atol=1e-6)
    torch.testing.assert_close(out[:20], pre[:20], rtol=0, atol=0)
    torch.testing.assert_close(out[20 + 4 * 10 + 1], 0.75 * pre[30] + 0.25 * pre[31])


def test_uniform_stretch_keeps_ends_and_is_monotone_blend():
    pre = torch.arange(77, dtype=torch.float32).unsqueeze(1)
    out = uniform_stretch(pre, 248)
    assert out.shape == (248, 1)
    assert torch.all(out[1:] >= out[:-1])
    assert out[0, 0] == 0 and out[-1, 0] == 76


def test_stretched_model_freezes_head_and_encodes_248(tiny):
    model = load_model("tiny").model
    before = model.positional_embedding.detach().clone()
    assert stretch_positional_embedding(model, 248, keep_positions=20)
    assert model.context_length == 248 and model.attn_mask.shape == (248, 248)
    table = model.positional_embedding
    torch.testing.assert_close(table.detach(), knowledge_preserved_stretch(before, 20))
    text = torch.zeros(2, 248, dtype=torch.long)
    text[:, 0], text[:, 1:200], text[:, 200] = 49406, 320, 49407
    model.encode_text(text).sum().backward()
    trainable = dict(model.named_parameters())["parametrizations.positional_embedding.original"]
    assert trainable.shape == (228, table.shape[1]) and trainable.grad.abs().sum() > 0
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert not any("head" in n for n in names)  # positions < 20: a frozen buffer, not a parameter
    merged = merged_state_dict(model.state_dict())
    torch.testing.assert_close(merged["positional_embedding"], table.detach())
    # Already at the asked context: no second stretch.
    assert not stretch_positional_embedding(model, 248)


def test_stretch_rejects_wrong_length(tiny):
    model = load_model("tiny").model
    with pytest.raises(UserError, match="gives 248"):
        stretch_positional_embedding(model, 200)


def test_load_tiny_and_tokenizer(tiny):
    assert tiny.context_length == 77
    ids = tiny.tokenizer(["a photo of a cat " * 40])
    assert ids.shape == (1, 77) and ids[0, 0] == 49406 and ids[0, -1] == 49407


def test_a_plain_bpe_tokenizer_is_built_once_per_context_and_gives_open_clips_ids(tiny, tmp_path):
    """Loads of a model share one tokenizer per context (a build reads the whole BPE file); its ids are
    open_clip.get_tokenizer's, for a named model and for a local-dir export, at 77 and at 248."""
    import shutil

    import open_clip

    from caption_debias.demo import shipped_start

    folder = tmp_path / "start"
    shutil.copytree(shipped_start(), folder)
    texts = ["a photo of a cat " * 60, "Two dogs, one red ball."]
    again = load_model("tiny")
    assert again.tokenizer is tiny.tokenizer
    exported = load_model(f"local-dir:{folder}")
    assert exported.tokenizer is tiny.tokenizer
    exported.set_context(248)
    assert exported.tokenizer is not tiny.tokenizer and tiny.tokenizer.context_length == 77
    for spec, loaded in (("tiny", tiny), (f"local-dir:{folder}", exported)):
        want = open_clip.get_tokenizer(spec, context_length=loaded.context_length)
        assert torch.equal(loaded.tokenizer(texts), want(texts)), spec


def test_checkpoint_file_roundtrip_and_248_checkpoint(tmp_path, tiny):
    path = tmp_path / "w.pt"
    torch.save(tiny.model.state_dict(), path)
    again = load_model(str(path), pretrained="tiny")
    for k, v in tiny.model.state_dict().items():
        assert torch.equal(v, again.model.state_dict()[k]), k
    # A Long-CLIP style file already at 248 positions keeps its context (no resize down to 77).
    model = load_model("tiny").model
    stretch_positional_embedding(model, 248, freeze_head=False)
    long_path = tmp_path / "long.pt"
    torch.save({"state_dict": {"module." + k: v for k, v in model.state_dict().items()}}, long_path)
    long = load_model("tiny", pretrained=str(long_path))
    assert long.context_length == 248
    assert torch.equal(long.model.positional_embedding, model.positional_embedding)
    # Long-CLIP's own layout: a frozen table for positions < 20 and a `_res` table for the rest.
    sd = dict(model.state_dict())
    res = sd["positional_embedding"].clone()
    sd["positional_embedding"] = torch.cat([res[:20], torch.zeros_like(res[20:])])
    res[:20] = 0
    sd["positional_embedding_res"] = res
    torch.save(sd, tmp_path / "longclip-tiny.pt")
    lc = load_model(str(tmp_path / "longclip-tiny.pt"), pretrained="tiny")
    assert torch.equal(lc.model.positional_embedding, model.positional_embedding)
    from safetensors.torch import save_file

    st = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in tiny.model.state_dict().items()}, str(st))
    assert load_model(str(st), pretrained="tiny").context_length == 77


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_refuses_pickled_objects_and_bad_specs(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"state_dict": _Evil()}, path)
    with pytest.raises(UserError, match="refusing to unpickle"):
        load_model(str(path), pretrained="tiny")
    with pytest.raises(UserError, match="unknown model"):
        load_model("no-such-model")
    with pytest.raises(UserError, match="needs its architecture"):
        load_model(str(path))
    with pytest.raises(UserError, match="neither a file nor a known tag"):
        load_model("tiny", pretrained="nope")


def test_trimmed_text_forward_matches_open_clip(tiny):
    from caption_debias.model.trim import TrimmedCLIP, can_trim, encode_text_trimmed, used_length

    model = load_model("tiny").model
    stretch_positional_embedding(model, 248)
    assert can_trim(model)
    g = torch.Generator().manual_seed(0)
    text = torch.zeros(3, 248, dtype=torch.long)
    for i, n in enumerate((5, 40, 17)):
        text[i, 0], text[i, 1:n] = 49406, torch.randint(300, 40000, (n - 1,), generator=g)
        text[i, n] = 49407
    text[2, 1:11] = 0  # pads moved after SOT (DeBias)
    assert used_length(text) == 41
    with torch.no_grad():
        full = model.encode_text(text, normalize=True)
        cut = encode_text_trimmed(model, text[:, :41], normalize=True)
        torch.testing.assert_close(cut, full, atol=1e-5, rtol=1e-5)
        img = torch.randn(3, 3, 64, 64)
        img_f, (t1, t2), scale = TrimmedCLIP(model)(img, text[:, :41], text[:2, : used_length(text[:2])])
        b = model(img, text)
        torch.testing.assert_close(img_f, b[0])
        torch.testing.assert_close(t1, b[1], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(t2, b[1][:2], atol=1e-5, rtol=1e-5)
        assert scale == b[2]


def test_eval_and_export_say_when_positions_were_stretched_and_not_trained(tmp_path, monkeypatch):
    """A run's stretched start (step 0), evaluated, exported and its export evaluated: one line says the
    positions were stretched 77 -> 248 and not trained since; a run past its warm-up says nothing."""

    from train_fixtures import make_prepared, tiny_config
    from typer.testing import CliRunner

    from caption_debias.cli.main import app
    from caption_debias.train.loop import train

    monkeypatch.delenv("COLUMNS", raising=False)  # the line whole, unwrapped
    data, images = make_prepared(tmp_path, n=8)
    start = train(tiny_config(data, images, tmp_path / "start", max_steps=0, warmup_steps=10))
    trained = train(tiny_config(data, images, tmp_path / "trained", max_steps=2, warmup_steps=1))
    line = (
        "caption-debias: note: {name}'s text positions were stretched 77 -> 248 and not trained since (step 0): "
        "the likely cause of a lower short-text recall than its start's"
    )

    def run(*args: str) -> list[str]:
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == 0, (result.stderr, result.exception)
        return result.stderr.splitlines()

    evaluate = ["--data", str(data), "--image-root", str(images), "--device", "cpu", "--batch-size", "4"]
    exported = tmp_path / "export"
    assert line.format(name=start) in run("export", str(start), "--out", str(exported))
    assert line.format(name=start) in run("eval", str(start), *evaluate)
    assert line.format(name=f"local-dir:{exported}") in run("eval", f"local-dir:{exported}", *evaluate)
    for lines in (run("eval", str(trained), *evaluate), run("export", str(trained), "--out", str(tmp_path / "e2"))):
        assert not any("stretched" in text for text in lines), lines
    from caption_debias.model.describe import stretch_note

    in_warmup = {"step": 10, "stretched": {"from": 77, "to": 248, "warmup_steps": 200}}
    assert "stretched 77 -> 248 and trained only 10 steps, all in warm-up (200)" in stretch_note("r", in_warmup)
    assert stretch_note("r", {**in_warmup, "step": 200}) is None and stretch_note("tiny", {"shipped": "x"}) is None
