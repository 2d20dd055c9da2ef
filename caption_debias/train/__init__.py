"""`caption-debias train`; calling the package runs it (caption_debias/api.py)."""

from caption_debias.api import make_callable

make_callable(__name__)  # caption_debias.train(...) runs the stage: train/api.py
