"""eval on prepared folders whose rows name members of img2dataset's tars, with the image root here or
on S3 (moto on loopback), and URL rows through their downloads: the same recalls as the loose files
of the same pictures (image_source under evaluate/benchmarks.py load_prepared)."""

from __future__ import annotations

import pytest

from caption_debias.errors import UserError
from caption_debias.evaluate.retrieval import as_data, evaluate
from caption_debias.model.load import load_model


@pytest.fixture(scope="module")
def model():
    import torch

    torch.manual_seed(5)
    return load_model("tiny")


VARIANTS = ("keep", "first")


def test_tar_members_evaluate_as_the_loose_files_do(wds, loose, model):
    on_files = evaluate(model, as_data(loose.prepared), variants=VARIANTS)
    data = as_data(wds.prepared)  # the root the manifest records: img2dataset's output folder
    assert data.source is not None and all("#" in image for image in data.images)
    assert evaluate(model, data, variants=VARIANTS) == on_files


def test_the_image_root_on_s3(wds, loose, model):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from image_worlds import moto_s3, upload

    on_files = evaluate(model, as_data(loose.prepared), variants=VARIANTS)
    with moto_s3() as (server, fs, bucket):
        root = upload(fs, wds.root, f"s3://{bucket}/images")
        assert evaluate(model, as_data(wds.prepared, root), variants=VARIANTS) == on_files
        tars = {p for p, _ in server.gets(".tar")}
        assert len(tars) == len(list(wds.root.glob("*.tar")))


def test_url_rows_through_their_downloads_and_a_missing_one_named(urls, wds):
    with pytest.raises(UserError, match=r"1 of 13 images missing, first: file://.*gone\.png .*failed_to_download"):
        as_data(urls.prepared, wds.root)
