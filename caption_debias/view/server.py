"""`caption-debias view`: describe the folders, then serve the app (uvicorn on a loopback port) or
write the --static snapshot."""

from __future__ import annotations

import socket
import threading
from typing import Callable

from caption_debias.errors import UserError
from caption_debias.folder_rows.thumbs import ThumbCache
from caption_debias.view.data import ViewData
from caption_debias.view.options import ViewOptions
from caption_debias.view.security import allowed_hosts

INDEX_DELAY_S = 3.0
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, or one clear line when the address is taken or not ours to bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno in (98, 48, 10048):  # EADDRINUSE on Linux, macOS, Windows
            raise UserError(f"port {port} on {host} is in use; pick another with --port") from None
        raise UserError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _index_quietly(data: ViewData) -> None:
    """Build the index ahead of the first filter; a fault here is said by the page that needs the index
    (the folder may be rewritten right now), not as a thread's traceback."""
    try:
        data.index()
    except Exception:  # noqa: BLE001
        pass


def serve(
    data: ViewData,
    host: str = "127.0.0.1",
    port: int = 8765,
    announce=print,
    thumbs_dir=None,
    allowed: tuple[str, ...] = (),
    tags=None,
    text_search=None,
) -> None:
    """Serve until Ctrl-C; the first page is served before the index exists."""
    import uvicorn

    from caption_debias.view.app import create_app

    sock = bind(host, port)
    # the index is built on the page's first /api/meta (sent once the first page is shown), or a moment
    # after start when no page asks: the first page does not share the CPU with it
    index = threading.Timer(INDEX_DELAY_S, _index_quietly, args=(data,))
    index.daemon = True
    index.start()
    app = create_app(
        data, ThumbCache(thumbs_dir), hosts=allowed_hosts(host, allowed), tags=tags, text_search=text_search
    )
    if host not in LOOPBACK:
        announce(f"warning: listening on {host}: whoever reaches it sees every row and image (no authentication)")
        if not allowed:
            announce("note: only requests naming 127.0.0.1 or localhost are answered; add --allowed-host NAME")
    shown = f"[{host}]" if ":" in host else host
    announce(f"caption-debias view: http://{shown}:{sock.getsockname()[1]}/ (Ctrl-C to stop)")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


def run_view(folders: list[str], options: ViewOptions, announce: Callable[[str], None] = print) -> None:
    """`caption-debias view`: describe the folders (unless quiet), then write the --static snapshot or serve."""
    options.validate()
    data = ViewData(folders, options.image_root)
    if not options.quiet:
        for line in describe(data):
            announce(line)
    if options.static is not None:
        from caption_debias.view.static import write_static

        path = write_static(
            data, options.static, sample=options.sample, per_reason=options.per_reason, seed=options.seed
        )
        announce(f"snapshot: {path}")
        return
    tags = None
    if options.tags is not None:
        from caption_debias.view.tags import TagFile

        tags = TagFile(options.tags)
        if not options.quiet:
            announce(f"tags: {options.tags} ({len(tags.tags):,} rows tagged; the page writes only there)")
    search = None
    if options.model is not None:
        from caption_debias.view.text_search import TextSearch, scored_with

        search = TextSearch(options.model, options.pretrained)
        if not options.quiet:
            announce(f"text search: {options.model} (loaded at the first query)")
            for f in data.folders:
                scorer = scored_with(f.ds.manifest)
                if scorer is not None and scorer != options.model:
                    announce(
                        f"warning: {f.name} was scored with {scorer}, not {options.model}: text and images may not match"
                    )
    serve(
        data,
        host=options.host,
        port=options.port,
        announce=announce,
        allowed=tuple(options.allowed_host),
        tags=tags,
        text_search=search,
    )


def describe(data: ViewData) -> list[str]:
    lines: list[str] = []
    for f in data.folders:
        extra = f", {f.removed.height:,} removed" if f.removed is not None else ""
        recorded = "" if data.image_root_given else " (recorded in its manifest; --image-root to change)"
        root = (
            f"images under {f.image_root}{recorded}"
            if f.image_root
            else "no image root (thumbnails from image_bytes only)"
        )
        lines.append(f"{f.name}: {f.kind}, {f.ds.rows:,} rows{extra}; {root}")
    return lines
