"""Schema data files (JSON); read them through caption_debias.schema."""
