"""ViewOptions: every option of `caption-debias view`, the one source of defaults and help.

The CLI (cli/view_cmd.py) reads each flag's default and help text from these fields, as
`train` reads TrainConfig's; view/app.py `run_view` serves the page or writes the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

from caption_debias.options import ImageRootOptions, QuietOptions, option


@dataclass
class ViewOptions(ImageRootOptions, QuietOptions):
    """Every option of `caption-debias view` (the CLI reads defaults and --help from here).
    With --quiet it still prints the address (or the snapshot's path): what the command is for."""

    host: str = option("127.0.0.1", "Address to listen on (loopback by default: only this machine).")
    port: int = option(8765, "Port to listen on (0: any free port).", min=0, max=65535)
    static: str | None = option(
        None, "Write a self-contained snapshot to this .html file (or folder/index.html) and exit."
    )
    sample: int = option(200, "--static: how many kept rows to sample.", min=0)
    per_reason: int = option(6, "--static: removed rows per removal reason.", min=0)
    seed: int = option(0, "--static: seed of the sample.")

    def check(self) -> None:
        self.check_image_root()
