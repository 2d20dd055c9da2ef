"""`caption-debias view`: a read-only web page over prepared and curated folders (data, app, static; the rows and thumbnails it shows: folder_rows/)."""
