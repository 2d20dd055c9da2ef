"""The `caption-debias` command line: a thin Typer layer over the library."""
