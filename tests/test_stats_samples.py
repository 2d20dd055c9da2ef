"""The stats report's Samples section: rows per source with summaries marked, two removals per reason
with their images, the `view` command for more."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest
from view_fixtures import curated_world


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return curated_world(tmp_path_factory.mktemp("samples"))


def test_samples_section_shows_rows_summaries_and_removals(world, tmp_path):
    from caption_debias.stats.compute import compute_stats
    from caption_debias.stats.report import write_report

    files = write_report(compute_stats([world["curated"]]), tmp_path / "report")
    page = files["html"].read_text()
    section = page[page.index("<h2>Samples</h2>") :]
    table = pq.read_table(world["curated"] / "shards").to_pylist()
    for row in table[:3]:  # the first rows of the one source, in file order
        assert f'<div class="k">{row["key"]}</div>' in section
        for sentence, flagged in zip(row["sentences"], row["summary_mask"]):
            if flagged:
                assert re.search(r'<span class="s-(open|close|mid)" title="[^"]+">' + re.escape(sentence), section)
    assert f'<div class="k">{table[3]["key"]}</div>' not in section
    removed = [json.loads(line) for line in (world["curated"] / "removed.jsonl").read_text().splitlines()]
    reasons = {r["reason"] for r in removed}
    shown = re.findall(r'<div class="k">([^<]+)</div><div><span class="why">([^<]+)</span>', section)
    assert {reason for _, reason in shown} == reasons
    for reason in reasons:  # two per reason (or all when fewer), the first ones in removed.jsonl
        expect = [r["key"] for r in removed if r["reason"] == reason][:2]
        assert [k for k, why in shown if why == reason] == expect
    # images inline: kept rows' thumbnails as JPEG, a missing one a placeholder saying so
    no_picture = sum(why in ("image_missing", "image_unreadable") for _, why in shown)
    kept = {r["key"] for r in table}
    by_key = {r["key"]: r for r in removed}
    matched = [k for k, _ in shown if by_key[k].get("detail", {}).get("match") in kept]  # the kept row beside it
    assert matched and section.count('<div class="m matched">') == len(matched)
    assert section.count('src="data:image/jpeg;base64,') == 3 + len(shown) - no_picture + len(matched)
    assert "shorter side below --min-image-side" in section  # each removal's signal in words, its value too
    assert section.count('src="data:image/svg+xml;base64,') == no_picture
    assert "image not found" in section and "matched <code>table/c2</code> by image sha256" in section
    assert f"caption-debias view {world['curated']}" in section
    assert not re.search(r'(src|href)="(https?:)?//', page)
    md = files["markdown"].read_text()
    assert "## Samples" in md and f"`{table[0]['key']}`" in md and "caption-debias view" in md


def test_prepared_folder_without_image_root_gets_placeholders_and_the_flag_fixes_it(world, tmp_path):
    from caption_debias.stats.compute import compute_stats
    from caption_debias.stats.report import write_report

    stats = compute_stats([world["prepared"]])
    page = write_report(stats, tmp_path / "a")["html"].read_text()
    section = page[page.index("<h2>Samples</h2>") :]
    assert "no --image-root" in section and 'src="data:image/jpeg' not in section
    page = write_report(stats, tmp_path / "b", image_root=str(world["images"]))["html"].read_text()
    assert page[page.index("<h2>Samples</h2>") :].count('src="data:image/jpeg') == 3
    assert "<h2>Samples</h2>" not in write_report(stats, tmp_path / "c", samples=False)["html"].read_text()


def _section(files) -> str:
    page = files["html"].read_text()
    return page[page.index("<h2>Samples</h2>") :]


@pytest.fixture(scope="module")
def wds(tmp_path_factory):
    from image_worlds import built, i2d_world, url_world

    urls = built(tmp_path_factory, "urls", url_world)
    return built(tmp_path_factory, "wds", lambda base: i2d_world(base, "webdataset", urls))


def test_samples_of_a_folder_whose_rows_name_tar_members_show_the_members(wds, tmp_path):
    from caption_debias.stats.compute import compute_stats
    from caption_debias.stats.report import write_report

    section = _section(write_report(compute_stats([wds.prepared]), tmp_path / "r"))
    assert section.count('src="data:image/jpeg;base64,') == 3 and "data:image/svg+xml" not in section


def test_samples_of_an_s3_folder_with_its_image_root_on_s3(wds, tmp_path):
    """Once dropped without a word (the report of an s3:// folder had no Samples section)."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from image_worlds import moto_s3, upload

    from caption_debias.stats.compute import compute_stats
    from caption_debias.stats.report import write_report

    with moto_s3() as (server, fs, bucket):
        root = upload(fs, wds.root, f"s3://{bucket}/images")
        folder = upload(fs, wds.prepared, f"s3://{bucket}/prepared")
        files = write_report(compute_stats([folder]), tmp_path / "r", image_root=root)
        section = _section(files)
        assert section.count('src="data:image/jpeg;base64,') == 3 and "data:image/svg+xml" not in section
        assert f"caption-debias view {folder}" in section


def test_a_scored_folder_is_named_scored_not_curated(tmp_path_factory, world, tmp_path):
    from score_fixtures import tiny_scored

    from caption_debias.stats.compute import compute_stats
    from caption_debias.stats.report import write_report

    scored = tiny_scored(tmp_path_factory.mktemp("scored"), 6, {})
    files = write_report(compute_stats([world["curated"], scored["scored"]]), tmp_path / "r")
    section = _section(files)
    assert "(curated)</span>" in section and "(scored)</span>" in section
    assert section.count("(curated)</span>") == 1
    assert "Removed by curate:" in section


def test_passes_of_one_dataset_are_counted_once_with_one_funnel(world, tmp_path):
    """stats prepared curated curated-again (issue 37): the headline counts the last pass's rows, not the
    same rows three times, and the removal funnel is drawn once, for the last pass."""
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.stats.compute import compute_stats
    from caption_debias.stats.curation import lineage_groups
    from caption_debias.stats.report import write_report

    again = tmp_path / "curated-again"
    curate([world["curated"]], again, CurateOptions(image_root=str(world["images"]), min_image_side=90, quiet=True))
    stats = compute_stats([world["prepared"], world["curated"], again])
    rows = json.loads((again / "manifest.json").read_text("utf-8"))["counts"]["written"]
    assert stats["one_dataset"] == {"last_pass": "curated-again", "records": rows, "passes": 3}
    assert [name for name, _ in lineage_groups(stats)] == ["curated-again"]
    assert [d.get("later_pass") for d in stats["datasets"]] == ["curated", "curated-again", None]
    page = write_report(stats, tmp_path / "report")["html"].read_text()
    assert "records in curated-again, the last of 3 passes of one dataset" in page
    assert stats["records"] > rows  # the sum over folders is still there, and no longer the headline
    assert compute_stats([again, world["prepared"]])["one_dataset"]["last_pass"] == "curated-again"  # any order
    from train_fixtures import make_prepared

    unrelated, _ = make_prepared(tmp_path / "other", n=4)
    apart = compute_stats([again, unrelated])
    assert "one_dataset" not in apart and len(lineage_groups(apart)) == 1  # two datasets: summed as before
