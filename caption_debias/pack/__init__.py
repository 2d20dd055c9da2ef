"""`caption-debias pack`: a prepared (or curated) folder -> webdataset tars of resized images and their texts.

options.py (flags, which of them shape the output) -> images.py (find and resize one image with
img2dataset's resizer) -> tars.py (one tar's samples, written with webdataset's TarWriter) ->
state.py (resume sidecars) -> run.py (wires them, local pool or Ray); folder.py reads a packed
folder back by random access (wids), for `train` and for tests.
"""

from caption_debias.api import make_callable

make_callable(__name__)  # caption_debias.pack(...) runs the stage: pack/api.py
