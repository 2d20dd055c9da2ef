"""ViewOptions: every option of `caption-debias view`, the one source of defaults and help.

The CLI (cli/view_cmd.py) reads each flag's default and help text from these fields, as
`train` reads TrainConfig's; view/server.py `run_view` serves the page or writes the snapshot.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from caption_debias.errors import UserError
from caption_debias.options import option

# what Starlette's host check compares (no port, no scheme): a name, '*.' + a name, an IPv4 or a [IPv6]
_HOST = re.compile(r"\*|(\*\.)?[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]+\]")


@dataclass
class ViewOptions:
    """Every option of `caption-debias view` (the CLI reads defaults and --help from here)."""

    image_root: str | None = option(
        None, "Folder the `image` paths are relative to (default: the one curate used, when it is there)."
    )
    host: str = option("127.0.0.1", "Address to listen on (loopback by default: only this machine).")
    port: int = option(8765, "Port to listen on (0: any free port).")
    allowed_host: list[str] = option(
        [],
        "Also answer requests naming this host (repeatable; the listening address and localhost always are; "
        "'*' answers any: no guard against DNS rebinding).",
    )
    static: str | None = option(
        None, "Write a self-contained snapshot to this .html file (or folder/index.html) and exit."
    )
    sample: int = option(200, "--static: how many kept rows to sample.")
    per_reason: int = option(6, "--static: removed rows per removal reason.")
    seed: int = option(0, "--static: seed of the sample.")
    quiet: bool = option(False, "Print only the address (or the snapshot's path).")

    def validate(self) -> "ViewOptions":
        if not 0 <= self.port <= 65535:
            raise UserError(f"--port must be in 0..65535 (got {self.port})")
        if self.sample < 0:
            raise UserError(f"--sample must be at least 0 (got {self.sample})")
        if self.per_reason < 0:
            raise UserError(f"--per-reason must be at least 0 (got {self.per_reason})")
        for name in self.allowed_host:
            if not _HOST.fullmatch(name):
                raise UserError(
                    f"--allowed-host {name!r}: a host name or address (example.org, *.example.org, 10.0.0.5, [::1]) or '*'"
                )
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
