"""The web app: a Starlette application over `ViewData`, served by uvicorn on a loopback port.

Routes: `/` (the page), `/assets/*` (its JS and CSS, shipped in the package), `/api/meta`,
`/api/page`, `/api/row`, `/api/pair`, `/api/thumb` (JSON and thumbnails), and
`/image/{folder}/{path}` (an original image, only from inside that folder's image root).
Everything is read-only: the app never writes to the folders or the image root.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any, Callable

from caption_debias.errors import UserError
from caption_debias.view.data import Query, ViewData
from caption_debias.view.files import Refused, read_inside
from caption_debias.view.options import ViewOptions
from caption_debias.view.thumbs import ThumbCache, placeholder_svg

ASSETS = Path(__file__).parent / "assets"
INDEX_DELAY_S = 3.0


def parse_query(params) -> Query:
    def num(v: str | None) -> float | None:
        return None if v in (None, "") else float(v)

    ranges = []
    for spec in params.getlist("range"):
        col, _, rest = spec.partition(":")
        lo, _, hi = rest.partition(":")
        ranges.append((col, num(lo), num(hi)))
    return Query(
        view="removed" if params.get("view") == "removed" else "kept",
        reason=params.get("reason") or None,
        sources=tuple(s for s in params.getlist("source") if s),
        text=(params.get("q") or "").strip(),
        ranges=tuple(ranges),
        sort=params.get("sort") or None,
        descending=params.get("desc") in ("1", "true"),
        offset=max(0, int(params.get("offset") or 0)),
        limit=int(params.get("limit") or 48),
    )


def create_app(data: ViewData, thumbs: ThumbCache | None = None):
    from starlette.applications import Starlette
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    thumbs = thumbs or ThumbCache()

    def bad(msg: str, status: int = 400) -> JSONResponse:
        return JSONResponse({"error": msg}, status_code=status)

    def ints(request, *names: str) -> list[int]:
        return [int(request.query_params[n]) for n in names]

    async def index(request):
        return FileResponse(ASSETS / "index.html", headers={"Cache-Control": "no-store"})

    def meta(request):
        data.index()
        return JSONResponse(data.meta())

    def page(request):
        try:
            return JSONResponse(data.page(parse_query(request.query_params)))
        except (ValueError, UserError) as exc:
            return bad(str(exc))

    def row(request):
        try:
            if "removed" in request.query_params:
                f, i = ints(request, "f", "removed")
                return JSONResponse(data.removed_row(f, i))
            return JSONResponse(data.detail(*ints(request, "f", "s", "r")))
        except (KeyError, ValueError, IndexError):
            return bad("no such row", 404)

    def pair(request):
        try:
            return JSONResponse(data.pair(*ints(request, "f", "removed")))
        except (KeyError, ValueError, IndexError):
            return bad("no such row", 404)

    def thumb(request):
        p = request.query_params
        try:
            f = int(p["f"])
            source = (
                data.image_source(f, None, None, int(p["removed"]))
                if "removed" in p
                else data.image_source(f, int(p["s"]), int(p["r"]), None)
            )
        except (KeyError, ValueError, IndexError):
            return bad("no such row", 404)
        headers = {"Cache-Control": "max-age=3600"}
        try:
            jpeg = thumbs.for_source(source)
        except Refused as why:
            headers["X-Thumb"] = f"placeholder: {why}"
            return Response(placeholder_svg(str(why)), media_type="image/svg+xml", headers=headers)
        return Response(jpeg, media_type="image/jpeg", headers=headers)

    def image(request):
        try:
            folder = data.folders[int(request.path_params["folder"])]
        except (ValueError, IndexError):
            return bad("no such folder", 404)
        if folder.image_root is None:
            return bad("no image root for this folder", 404)
        try:
            blob = read_inside(folder.image_root, request.path_params["path"])
        except Refused as why:
            return bad(f"refused: {why}", 403 if "outside" in str(why) or "absolute" in str(why) else 404)
        import mimetypes

        kind = mimetypes.guess_type(request.path_params["path"])[0] or "application/octet-stream"
        if not kind.startswith("image/"):
            kind = "application/octet-stream"
        return Response(blob, media_type=kind, headers={"Content-Disposition": "inline"})

    return Starlette(
        routes=[
            Route("/", index),
            Route("/api/meta", meta),
            Route("/api/page", page),
            Route("/api/row", row),
            Route("/api/pair", pair),
            Route("/api/thumb", thumb),
            Route("/image/{folder:int}/{path:path}", image),
            Mount("/assets", StaticFiles(directory=ASSETS), name="assets"),
        ]
    )


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


def serve(data: ViewData, host: str = "127.0.0.1", port: int = 8765, announce=print, thumbs_dir=None) -> None:
    """Serve until Ctrl-C; the first page is served before the index exists."""
    import uvicorn

    sock = bind(host, port)
    # the index is built on the page's first /api/meta (sent once the first page is shown), or a moment
    # after start when no page asks: the first page does not share the CPU with it
    index = threading.Timer(INDEX_DELAY_S, data.index)
    index.daemon = True
    index.start()
    app = create_app(data, ThumbCache(thumbs_dir))
    if host not in ("127.0.0.1", "localhost", "::1"):
        announce(f"warning: listening on {host}: whoever reaches it sees every row and image (no authentication)")
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
    serve(data, host=options.host, port=options.port, announce=announce)


def describe(data: ViewData) -> list[str]:
    lines: list[Any] = []
    for f in data.folders:
        extra = f", {f.removed.height:,} removed" if f.removed is not None else ""
        root = f"images under {f.image_root}" if f.image_root else "no image root (thumbnails from image_bytes only)"
        lines.append(f"{f.name}: {f.kind}, {f.ds.rows:,} rows{extra}; {root}")
    return lines
