"""`caption-debias view`: a read-only web page over prepared and curated folders (data, thumbs, app, static)."""
