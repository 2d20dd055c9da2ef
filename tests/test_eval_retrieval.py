"""Retrieval and zero-shot figures against an independent plain-open_clip computation; the eval CLI."""

import json

import pytest
import torch
from cli_process import run_cli
from eval_fixtures import make_images, write_prepared
from pictures import picture, write
from PIL import Image

from caption_debias.errors import UserError
from caption_debias.evaluate.benchmarks import RetrievalData
from caption_debias.evaluate.retrieval import as_data, evaluate, run_retrieval
from caption_debias.evaluate.variants import make_variant
from caption_debias.evaluate.zeroshot import zeroshot
from caption_debias.model.load import load_model


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalworld")
    rows = make_images(root, 14, seed=1)
    # Two extra captions for image 0 so images have several captions.
    rows += [(rows[0][0], ["A second caption.", "It names nothing."]), (rows[0][0], ["Third one here."])]
    return root, write_prepared(root / "prepared", rows, image_root=root)


def _plain_open_clip_recall(seed, data: RetrievalData, variant: str):
    """Independent: open_clip's own factory, transforms and tokenizer; ranks by argsort."""
    import open_clip

    from caption_debias.model.load import register_shipped_configs

    register_shipped_configs()
    torch.manual_seed(seed)
    model, _, preprocess = open_clip.create_model_and_transforms("tiny")
    model.eval()
    tokenizer = open_clip.get_tokenizer("tiny")
    with torch.no_grad():
        img = model.encode_image(torch.stack([preprocess(Image.open(p).convert("RGB")) for p in data.images]))
        txt = model.encode_text(tokenizer([make_variant(s, variant) for s in data.captions]))
    img, txt = img / img.norm(dim=-1, keepdim=True), txt / txt.norm(dim=-1, keepdim=True)
    sim = txt @ img.t()
    ti = torch.tensor(data.text_image)
    t2i_rank = (sim.argsort(dim=1, descending=True) == ti.view(-1, 1)).float().argmax(dim=1)
    order = sim.t().argsort(dim=1, descending=True)
    i2t_rank = torch.stack([torch.nonzero(ti[order[i]] == i).min() for i in range(len(data.images))])
    return {
        name: {f"r{k}": 100.0 * float((r < k).double().mean()) for k in (1, 5, 10)}
        for name, r in (("t2i", t2i_rank), ("i2t", i2t_rank))
    }


def test_recall_agrees_with_plain_open_clip(world):
    root, prepared = world
    data = as_data(prepared, root)
    assert data.n_images == 14 and len(data.captions) == 16
    torch.manual_seed(5)
    loaded = load_model("tiny")
    got = evaluate(loaded, data, variants=("keep", "remove", "filler:2"))
    assert set(got) == {"keep", "remove", "filler:2"}
    for variant in got:
        expected = _plain_open_clip_recall(5, data, variant)
        for direction in ("t2i", "i2t"):
            assert got[variant][direction] == pytest.approx(expected[direction], abs=1e-9), (variant, direction)


def test_images_are_encoded_once_per_model(world, monkeypatch):
    from caption_debias.evaluate import retrieval

    root, prepared = world
    data = as_data((prepared, root))
    loaded = load_model("tiny")
    calls = []
    real = retrieval.encode_images
    monkeypatch.setattr(retrieval, "encode_images", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = run_retrieval(loaded, data, ["keep"]).table
    again = run_retrieval(loaded, data, ["keep", "first"]).table
    assert len(calls) == 1 and again["keep"] == first["keep"]


def test_missing_or_url_images_are_user_errors(tmp_path):
    rows = make_images(tmp_path, 3)
    write_prepared(tmp_path / "p", rows + [("img/none.png", ["Missing image."])], image_root=tmp_path)
    with pytest.raises(UserError, match="1 of 4 images missing"):
        evaluate(load_model("tiny"), tmp_path / "p")
    write_prepared(tmp_path / "u", [("https://x.org/a.jpg", ["A url."])], image_root=tmp_path)
    with pytest.raises(UserError, match="URL"):
        as_data(tmp_path / "u")


def test_zeroshot_matches_an_independent_classifier(tmp_path):
    import open_clip
    from open_clip.zero_shot_metadata import SIMPLE_IMAGENET_TEMPLATES

    colours = {"red_thing": (220, 30, 30), "green_thing": (30, 200, 40), "blue_thing": (30, 40, 220)}
    for name, rgb in colours.items():
        for i in range(3):
            write(picture((64, 64), tuple(max(0, c - 20 * i) for c in rgb)), tmp_path / name / f"{i}.png")
    torch.manual_seed(2)
    loaded = load_model("tiny")
    got = zeroshot(loaded, tmp_path, "simple")
    assert got["classes"] == 3 and got["images"] == 9
    # Independent: mean of normalised template features per class, argmax.
    tok = open_clip.get_tokenizer("tiny")
    with torch.no_grad():
        weights = []
        for name in sorted(colours):
            f = loaded.model.encode_text(
                tok([t(name.replace("_", " ")) for t in SIMPLE_IMAGENET_TEMPLATES]), normalize=True
            )
            weights.append(torch.nn.functional.normalize(f.mean(0), dim=0))
        weights = torch.stack(weights)
        hits = 0
        for label, name in enumerate(sorted(colours)):
            for i in range(3):
                x = loaded.preprocess(Image.open(tmp_path / name / f"{i}.png").convert("RGB")).unsqueeze(0)
                hits += int((loaded.model.encode_image(x, normalize=True) @ weights.t()).argmax()) == label
    assert got["top1"] == pytest.approx(100.0 * hits / 9)
    assert got["top5"] == 100.0  # only 3 classes


def _cli(*args):
    """In-process run (no second torch import), for commands expected to succeed."""
    from typer.testing import CliRunner

    from caption_debias.cli.main import app

    return CliRunner().invoke(app, list(args))


_cli_process = run_cli  # the real console entry point, to see how errors reach the user


def test_eval_cli_json_shapes(world, tmp_path):
    root, prepared = world
    one = tmp_path / "one.json"
    r = _cli(
        "eval",
        "tiny",
        "--data",
        str(prepared),
        "--image-root",
        str(root),
        "--variants",
        "keep,first",
        "--out",
        str(one),
        "--device",
        "cpu",
        "-q",
    )
    assert r.exit_code == 0, r.output
    table = json.loads(one.read_text())
    assert set(table) == {"keep", "first"} and set(table["keep"]) == {"t2i", "i2t", "recall_rule"}
    assert set(table["keep"]["t2i"]) == {"r1", "r5", "r10"} and table["keep"]["recall_rule"] == "pessimistic"
    r = _cli(
        "eval",
        "tiny",
        "--data",
        str(prepared),
        "--out",
        str(one),
        "--device",
        "cpu",
        "-q",
        "--recall-rule",
        "clip_benchmark",
    )
    assert r.exit_code == 0, r.output
    assert json.loads(one.read_text())["keep"]["recall_rule"] == "clip_benchmark"
    many = tmp_path / "many.json"
    r = _cli("eval", "tiny", "tiny", "--data", str(prepared), "--out", str(many), "--device", "cpu")
    assert r.exit_code == 0, r.output
    nested = json.loads(many.read_text())
    assert set(nested) == {"tiny", "tiny#2"} and set(nested["tiny"]) == {"prepared"}
    assert set(nested["tiny"]["prepared"]) == {"keep"}
    assert "T2I R@1/5/10" in r.output


def test_eval_cli_bad_input_is_one_line(world, tmp_path):
    root, prepared = world
    r = _cli_process("eval", "tiny", "--data", str(prepared), "--variants", "keep,nope")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "unknown caption variant" in r.stderr
    r = _cli_process("eval", "tiny", "--benchmark", "docci", "--benchmark", "coco", "--data", str(prepared))
    assert r.returncode == 2 and "in pairs" in r.stderr and "Traceback" not in r.stderr
    r = _cli_process("eval", "tiny", "--data", str(prepared), "--recall-rule", "argsort")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--recall-rule 'argsort'" in r.stderr


def test_identical_captions_tie_and_count_as_misses(world):
    root, prepared = world
    data = as_data(prepared, root)
    same = RetrievalData("same", data.images[:3], [["One shared summary."]] * 3, [0, 1, 2])
    got = evaluate(load_model("tiny"), same, variants=("keep",))
    assert got["keep"]["i2t"]["r1"] == 0.0  # each image sees three equal captions: ties are misses
    assert got["keep"]["i2t"]["r5"] == 100.0


@pytest.mark.parametrize("workers", [0, 1])
def test_unreadable_image_is_one_line_even_from_a_worker(tmp_path, workers):
    from caption_debias.evaluate.retrieval import encode_images

    rows = make_images(tmp_path, 2)
    (tmp_path / rows[1][0]).write_bytes(b"not an image")
    with pytest.raises(UserError) as err:
        encode_images(load_model("tiny"), [tmp_path / r for r, _ in rows], batch_size=1, workers=workers)
    assert str(err.value).startswith(str(tmp_path / rows[1][0]) + ": unreadable image") and "\n" not in str(err.value)


def test_eval_table_shows_every_recall_whatever_the_model_names_are_called(world, tmp_path):
    """Two models with long names on an 80-column terminal: every figure of every model is on screen
    (a side-by-side table squeezed to the width used to cut them, and the names, to nothing)."""
    import shutil

    from typer.testing import CliRunner

    from caption_debias.cli.main import app
    from caption_debias.demo import shipped_start

    root, prepared = world
    specs = []
    for arm in ("longclip", "debias"):
        folder = tmp_path / f"runs-of-the-objects-world-seed-0-{arm}-300-steps-exported"
        shutil.copytree(shipped_start(), folder)
        specs.append(f"local-dir:{folder}")
    out = tmp_path / "two.json"
    args = ["eval", *specs, "--data", str(prepared), "--image-root", str(root), "--variants", "keep,remove"]
    r = CliRunner(env={"COLUMNS": "80"}).invoke(app, [*args, "--out", str(out), "--device", "cpu"])
    assert r.exit_code == 0, r.output
    screen = r.output
    assert max(len(line) for line in screen.splitlines()) <= 80 and "…" not in screen
    results = json.loads(out.read_text())
    assert set(results) == set(specs)
    for spec in specs:
        assert spec in "".join(screen.split())  # the whole label, whichever way it wrapped
        for variant in ("keep", "remove"):
            for way in ("t2i", "i2t"):
                figures = " / ".join(f"{results[spec]['prepared'][variant][way][k]:.1f}" for k in ("r1", "r5", "r10"))
                assert figures in screen
