"""Images wherever they live: one source under every stage that opens images.

Which root a folder's images are under is one rule, in roots.py (`folder_root`, `inputs_root`:
given > recorded > lineage; trust.py's rule on recorded roots). The root is a local folder or an fsspec URL (s3://, gs://, hf://, file://, memory://). A row's
`image` names (refs.py):

| `image` | read from |
|---|---|
| `dir/x.jpg` | the file under the root (image_files.ImageRoot: inside the real root, regular, capped) |
| `NNNNN.tar#KEY.jpg` | the member of the tar under the root (img2dataset webdataset output, pack's tars) |
| `NNNNN.parquet#KEY` | the sample KEY of img2dataset's parquet output (the jpg/png/webp column) |
| a URL (with the row's key) | img2dataset's output under the root, joined on `caption_key` |

    from caption_debias.image_source import ImageSource, resolve_root

    root = resolve_root(options.image_root)          # where typed: absolute, symlinks followed, or UserError
    source = ImageSource(root, threads=4)
    for i, facts in source.stream(images, facts_of_bytes, keys=keys):
        ...                                          # facts, or an ImageProblem (image_missing / image_unreadable)

Every failure is an image_files.ImageProblem with reason image_missing or image_unreadable and
a one-line detail; every decode stays image_files' (the caller's `fn` does it).
"""

from caption_debias.image_source.counts import (
    DEFAULT_MAX_MISSING,
    ImageCounts,
    check_max_missing,
    check_missing,
    missing_line,
    no_root_line,
)
from caption_debias.image_source.downloads import Downloads
from caption_debias.image_source.refs import Ref
from caption_debias.image_source.roots import (
    Root,
    carries_images,
    folder_root,
    inputs_root,
    recorded_root,
    resolve_root,
)
from caption_debias.image_source.source import FetchStats, ImageSource

__all__ = [
    "DEFAULT_MAX_MISSING",
    "Downloads",
    "FetchStats",
    "ImageCounts",
    "ImageSource",
    "Ref",
    "Root",
    "check_max_missing",
    "carries_images",
    "check_missing",
    "folder_root",
    "inputs_root",
    "missing_line",
    "no_root_line",
    "recorded_root",
    "resolve_root",
]
