"""Bias probes: exact attention capture from open_clip's text layers, per-position averaging, the report."""

import json

import pytest
import torch
from eval_fixtures import make_images, write_prepared

from caption_debias import html_report
from caption_debias.evaluate.probe import attention_by_position, capture_text_attention
from caption_debias.model.load import load_model

TEXTS = ["A red square.", "A blue circle sits on a grey table near the window. It is small.", ""]


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(11)
    return load_model("tiny")


def test_capture_leaves_features_unchanged_and_weights_are_causal_rows(tiny):
    tokens = tiny.tokenizer(TEXTS)
    with torch.no_grad():
        plain = tiny.model.encode_text(tokens)
        with capture_text_attention(tiny.model) as captured:
            hooked = tiny.model.encode_text(tokens)
        after = tiny.model.encode_text(tokens)  # hooks removed again
    assert torch.allclose(plain, hooked, atol=1e-5) and torch.equal(plain, after)
    assert len(captured) == len(tiny.model.transformer.resblocks)
    for w in captured:
        assert w.shape == (3, tiny.context_length, tiny.context_length)
        assert torch.allclose(w.sum(-1), torch.ones(3, tiny.context_length), atol=1e-5)
        assert float(w.triu(diagonal=1).abs().max()) == 0.0  # causal: nothing from later positions


def test_first_layer_weights_match_a_by_hand_softmax(tiny):
    model = tiny.model
    tokens = tiny.tokenizer(TEXTS)
    with torch.no_grad():
        with capture_text_attention(model) as captured:
            model.encode_text(tokens)
        block = model.transformer.resblocks[0]
        x = block.ln_1(model.token_embedding(tokens) + model.positional_embedding)
        mha = block.attn
        q, k, _ = torch.nn.functional.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, dim=-1)
        heads, hd = mha.num_heads, mha.embed_dim // mha.num_heads
        q = q.view(3, -1, heads, hd).transpose(1, 2)
        k = k.view(3, -1, heads, hd).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / hd**0.5 + model.attn_mask
        expected = scores.softmax(-1).mean(1)  # mean over heads
    assert torch.allclose(captured[0], expected, atol=1e-5)


def test_attention_by_position_averages_over_captions_reaching_it(tiny):
    tokens = tiny.tokenizer(TEXTS)
    eot = tokens.argmax(-1)
    out = attention_by_position(tiny, TEXTS, batch_size=2)  # two batches
    counts = out["count"]
    assert counts[0] == 3 and counts[int(eot.max()) + 1] == 0
    for p in range(tiny.context_length):
        assert counts[p] == int((eot >= p).sum())
        assert (out["mean"][p] is None) == (counts[p] == 0)
    with torch.no_grad(), capture_text_attention(tiny.model) as captured:
        tiny.model.encode_text(tokens)
    rows = torch.stack(captured).mean(0)[torch.arange(3), eot]  # [3, L]
    longest = int(eot.argmax())
    p = int(eot.min()) + 1  # only the longer captions reach p
    reach = eot >= p
    assert out["mean"][p] == pytest.approx(float(rows[reach, p].double().mean()), rel=1e-5)
    assert out["mean"][int(eot.max())] == pytest.approx(float(rows[longest, eot.max()]), rel=1e-5)


def test_probe_cli_writes_json_png_and_self_contained_html(tmp_path):
    from typer.testing import CliRunner

    from caption_debias.cli.main import app

    rows = make_images(tmp_path, 8, seed=4)
    prepared = write_prepared(tmp_path / "prep", rows)  # manifest has no image root: give it
    report = tmp_path / "report"
    r = CliRunner().invoke(
        app,
        [
            "probe",
            "tiny",
            "tiny",
            "--data",
            str(prepared),
            "--image-root",
            str(tmp_path),
            "--out",
            str(report),
            "--device",
            "cpu",
        ],
    )
    assert r.exit_code == 0, r.output
    result = json.loads((report / "probe.json").read_text())
    assert list(result["models"]) == ["tiny", "tiny#2"]
    m = result["models"]["tiny"]
    assert m["filler_curve"]["n"] == [0, 1, 2, 3, 4, 5] and len(m["filler_curve"]["t2i_r1"]) == 6
    assert m["filler_curve"]["t2i_r1"][0] == m["order"]["first2"]["t2i"]["r1"]  # filler:0 is first2
    assert set(m["position"]) == {"keep", "move", "remove"} and set(m["order"]) == {"first2", "swap2", "first"}
    assert len(m["attention"]["mean"]) == 77 and m["attention"]["count"][0] == 8
    assert result["data"]["images"] == 8
    for png in ("attention.png", "filler.png"):
        assert (report / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (report / "index.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and 'src="http' not in page
    assert html_report.CSS in page  # the shared page builder
    assert "tiny#2" in page and "swap2" in page
