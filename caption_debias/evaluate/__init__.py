"""`caption-debias evaluate`; calling the package runs it (caption_debias/api.py)."""

from caption_debias.api import make_callable

make_callable(__name__)  # caption_debias.evaluate(...) runs the stage: evaluate/api.py
