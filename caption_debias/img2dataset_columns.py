"""The URL list's columns: written by `caption-debias urls`, carried through img2dataset, read back by train.

img2dataset overwrites a column named `key` with its own 9-digit sample id, so the prepared key
travels in `caption_key` (passed with --save_additional_columns) and comes back in each
sample's KEY.json and in img2dataset's per-shard Parquet metadata, to join on.
"""

KEY_COLUMN = "caption_key"
URL_COLUMN = "url"
CAPTION_COLUMN = "caption"
