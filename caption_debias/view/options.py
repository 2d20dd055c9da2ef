"""ViewOptions: every option of `caption-debias view`, the one source of defaults and help.

The CLI (cli/view_cmd.py) reads each flag's default and help text from these fields, as
`train` reads TrainConfig's; view/server.py `run_view` serves the page or writes the snapshot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from caption_debias.errors import UserError
from caption_debias.options import ImageRootOptions, QuietOptions, option

# what Starlette's host check compares (no port, no scheme): a name, '*.' + a name, an IPv4 or a [IPv6]
_HOST = re.compile(r"\*|(\*\.)?[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]+\]")


@dataclass
class ViewOptions(ImageRootOptions, QuietOptions):
    """Every option of `caption-debias view` (the CLI reads defaults and --help from here).
    With --quiet it still prints the address (or the snapshot's path): what the command is for."""

    host: str = option("127.0.0.1", "Address to listen on (loopback by default: only this machine).")
    port: int = option(8765, "Port to listen on (0: any free port).", min=0, max=65535)
    allowed_host: list[str] = option(
        [],
        "Also answer requests naming this host (repeatable; the listening address and localhost always are; "
        "'*' answers any: no guard against DNS rebinding).",
    )
    static: str | None = option(
        None, "Write a self-contained snapshot to this .html file (or folder/index.html) and exit."
    )
    sample: int = option(200, "--static: how many kept rows to sample.", min=0)
    per_reason: int = option(6, "--static: removed rows per removal reason.", min=0)
    seed: int = option(0, "--static: seed of the sample.")
    model: str | None = option(
        None,
        "Find images by text with this model (any spec score takes: demo-start, a name with --pretrained, "
        "local-dir:DIR, a checkpoint, a train run): its text tower against the folders' image_embedding, so give "
        "the model that scored them.",
        metavar="SPEC",
    )
    pretrained: str | None = option(None, "With --model: its pretrained tag or checkpoint file.")
    tags: str | None = option(
        None,
        "A JSON-lines file the page writes your tags to (created when missing): tag rows, filter by a tag, "
        "export a tag as a keys file. The data folders stay read-only.",
        metavar="FILE",
    )

    def check(self) -> None:
        self.check_image_root(urls=True)  # a root on a store is read through caption_debias.image_source
        for name in self.allowed_host:
            if not isinstance(name, str) or not _HOST.fullmatch(name):
                raise UserError(
                    f"--allowed-host {name!r}: a host name or address (example.org, *.example.org, 10.0.0.5, [::1]) or '*'"
                )
