"""A prepared folder's rows, removals and thumbnails as people see them: view's page and stats' Samples read them."""
