"""Exports from a prepared folder for other tools: URL lists for img2dataset, captions for other trainers."""
