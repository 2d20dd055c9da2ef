"""The web app: a Starlette application over `ViewData` (served by view/server.py).

Routes: `/` (the page), `/assets/*` (its JS and CSS, shipped in the package), `/api/meta`,
`/api/page`, `/api/row`, `/api/pair`, `/api/keys` (every key a filter selects), `/api/map` and
`/api/map/values` (an embedding map's points and a column's values; `by=image` or `by=caption`), `/api/thumb` (JSON and thumbnails), and
`/image/{folder}/{path}` (an original image, only from inside that folder's image root).
Everything is read-only: the app never writes to the folders or the image root.

Answers: 400 for a malformed request, 404 for a row or file that is not there (a negative or
huge number too), 503 with one line while a folder rewritten on disk is not whole, and never a
traceback. Every response carries the headers of view/security.py. Thumbnails and originals
are made on a few threads of their own (THUMB_THREADS), so pages never wait behind decodes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import quote

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.folder_rows import cards
from caption_debias.folder_rows.files import Refused
from caption_debias.folder_rows.images import ImageBytes, NoImage, source_for
from caption_debias.folder_rows.query import parse_query
from caption_debias.folder_rows.thumbs import ThumbCache, placeholder_svg
from caption_debias.view import json_text
from caption_debias.view.data import FolderChanged, Generation, ViewData
from caption_debias.view.security import INLINE_FORMATS, allowed_hosts, wrap

ASSETS = Path(__file__).parent / "assets"
THUMB_THREADS = 4  # thumbnail and image requests at once (the rest wait): pages keep the other threads
CHUNK = 1 << 16
TAGS_BODY_MAX = 16 << 20  # one tag change: up to 100,000 keys


def _number(params, name: str) -> int:
    """A row or folder number from the URL (KeyError when missing or not a number: the 404 of a row
    that is not there; whether it is in range, negative ones included, the data layer says)."""
    try:
        return int(params[name])
    except ValueError:
        raise KeyError(name) from None


def _json(body, status: int = 200):
    from starlette.responses import Response

    return Response(json_text.dumps(body).encode("ascii"), status_code=status, media_type="application/json")


def _error(msg: str, status: int = 400):
    return _json({"error": msg}, status)


def _failed(exc: Exception):
    """A fault not foreseen here: one line on stderr and in the answer, never a traceback."""
    print(f"caption-debias view: {type(exc).__name__}: {exc}", file=sys.stderr)
    return _error(f"internal error: {type(exc).__name__}", 500)


def _image_response(source: ImageBytes, name: str):
    """The original file as a picture when Pillow reads it as a raster format browsers show, else a
    download of a picture browsers do not show (TIFF, ...); streamed from one open file (never read
    whole into memory). A file Pillow does not read as a picture is refused: the route serves images,
    not whatever a folder's rows name."""
    from starlette.responses import StreamingResponse

    from caption_debias.image_files import ImageProblem, decoding, open_image

    fh = source.open()
    try:
        with decoding(None):
            fmt = open_image(fh).format  # the header only
    except (ImageProblem, OSError, ValueError, SyntaxError):  # Pillow's own errors for what is no picture
        fmt = None
    if fmt is None:
        fh.close()
        return _error("refused: not a picture (the image route serves only files that read as images)", 415)
    fh.seek(0)
    kind = INLINE_FORMATS.get(fmt or "")
    disposition = "inline" if kind else f"attachment; filename*=UTF-8''{quote(Path(name).name)}"

    def chunks():
        with fh:
            while block := fh.read(CHUNK):
                yield block

    headers = {"Content-Disposition": disposition}
    return StreamingResponse(chunks(), media_type=kind or "application/octet-stream", headers=headers)


class Routes:
    """The app's answers over one ViewData and one ThumbCache."""

    def __init__(self, data: ViewData, thumbs: ThumbCache, tags=None, text_search=None):
        import anyio

        self.data, self.thumbs, self.tags = data, thumbs, tags  # tags: view/tags.py TagFile, or None
        self.text_search = text_search  # view/text_search.py TextSearch (view --model), or None
        self.limiter = anyio.CapacityLimiter(THUMB_THREADS)

    def answer(self, fn, generation: bool = False):
        """JSON of fn(a reading of the folders), or the one-line error that says why not."""
        try:
            gen, body = self.data.consistent(lambda g: (g, fn(g)))
        except FolderChanged as exc:
            return _error(str(exc), 503)
        except (KeyError, IndexError):
            return _error("no such row", 404)
        except (ValueError, UserError) as exc:
            return _error(str(exc))
        except Exception as exc:  # noqa: BLE001
            return _failed(exc)
        if generation:
            body["generation"] = gen.number
        return _json(body)

    async def index(self, request):
        from starlette.responses import FileResponse

        return FileResponse(ASSETS / "index.html", headers={"Cache-Control": "no-store"})

    def meta(self, request):
        def with_index(g: Generation):
            g.index.index()  # the page asks once its first page is shown: build the index now
            search = None if self.text_search is None else self.text_search.spec
            return {**g.meta(), "tags": self._tags_meta(), "text_search": search}

        return self.answer(with_index)

    def _query(self, params):
        """The page's query, its tag turned into the tagged keys (view/tags.py)."""
        import dataclasses

        q = parse_query(params)
        if not q.tag:
            return q
        if self.tags is None:
            raise ValueError("no tags here (view --tags FILE)")
        return dataclasses.replace(q, tagged=tuple(self.tags.keys_of(q.tag)), tag_version=self.tags.version)

    def _tags_meta(self):
        return None if self.tags is None else {"file": str(self.tags.path), "names": self.tags.names()}

    def page(self, request):
        def tagged_page(g: Generation):
            body = g.page(self._query(request.query_params))
            if self.tags is not None:
                for row, tags in zip(body["rows"], self.tags.of(r.get("key") for r in body["rows"])):
                    row["tags"] = tags
            return body

        return self.answer(tagged_page, generation=True)

    def keys(self, request):
        """Every key a query selects (the page's "select all matching")."""
        return self.answer(lambda g: g.keys(self._query(request.query_params)), generation=True)

    def text(self, request):
        """Images found by text: view --model's text tower against the folders' image embeddings."""
        p = request.query_params

        def found(g: Generation):
            if self.text_search is None:
                raise ValueError("no text search here (view --model SPEC)")
            k = _number(p, "k") if "k" in p else 24
            return self.text_search.search(g.neighbours, g.cards, p.get("q", ""), k)

        return self.answer(found, generation=True)

    def tag_keys(self, request):
        """Every key with a tag (the page's "export tag"), whatever folder or filter."""
        from caption_debias.view.tags import check_name

        def keys(g: Generation):
            if self.tags is None:
                raise ValueError("no tags here (view --tags FILE)")
            return {"keys": self.tags.keys_of(check_name(request.query_params.get("tag")))}

        return self.answer(keys)

    async def change_tags(self, request):
        """POST {"keys": [...], "tag": "...", "on": true|false}: the tags file changed (view/tags.py). Only a
        same-origin JSON request: another site's page can neither send one without a refused preflight
        nor pass the Origin check."""
        import anyio

        if self.tags is None:
            return _error("no tags here (view --tags FILE)", 404)
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _error("send JSON (Content-Type: application/json)", 415)
        origin = request.headers.get("origin")
        if origin != f"{request.url.scheme}://{request.headers.get('host', '')}":
            return _error("refused: a request from another origin", 403)
        body = await request.body()
        if len(body) > TAGS_BODY_MAX:
            return _error(f"a change is at most {TAGS_BODY_MAX >> 20} MiB of JSON", 413)
        try:
            change = json.loads(body)
            if not isinstance(change, dict) or not isinstance(change.get("keys"), list):
                raise ValueError('send {"keys": [...], "tag": "...", "on": true|false}')
            done = await anyio.to_thread.run_sync(
                self.tags.change, change["keys"], change.get("tag"), change.get("on", True) is not False
            )
        except ValueError as exc:
            return _error(str(exc).splitlines()[0])
        except OSError as exc:
            return _error(f"the tags file could not be written: {exc.strerror or exc}", 500)
        return _json({**done, "names": self.tags.names()})

    def map(self, request):
        """The map's points; {"status": "computing"} until it is there (the page asks again)."""

        by = request.query_params.get("by") or "image"

        def points(g: Generation):
            emap = g.embedding_map(by)
            if not emap.available:
                raise UserError(f"no map: no folder here holds {emap.column} (caption-debias score --keep-embeddings)")
            g.index.index()
            emap.start()
            if not emap.finished:
                return {"status": "computing"}
            return {"status": "ready", **g.map_page(by)}

        return self.answer(points, generation=True)

    def thresholds(self, request):
        """What curate with these cuts would remove and mask (view/thresholds.py); `ids`: the page's cards to
        mark (comma-separated card ids)."""
        from caption_debias.view.thresholds import CUTS

        p = request.query_params  # checked inside answer: a malformed value is its one-line 400
        values = {k: p[k] for k in CUTS if p.get(k) not in (None, "")}
        ids = [i for i in p.get("ids", "").split(",") if i]
        return self.answer(lambda g: g.thresholds.preview(values, ids), generation=True)

    def map_values(self, request):
        p = request.query_params
        return self.answer(lambda g: g.map_values(p.get("column") or "", p.get("by") or "image"))

    def row(self, request):
        p = request.query_params
        if "removed" in p:
            return self.answer(lambda g: g.removals.row(_number(p, "f"), _number(p, "removed")))
        return self.answer(lambda g: cards.detail(g.store, _number(p, "f"), _number(p, "s"), _number(p, "r")))

    def neighbours(self, request):
        """Rows like this one: a kept row's nearest kept rows by its image or caption embedding (view/neighbours.py)."""
        p = request.query_params

        def nearest(g: Generation):
            address = (_number(p, "f"), _number(p, "s"), _number(p, "r"))
            k = _number(p, "k") if "k" in p else 12
            return g.neighbours.page(g.cards, p.get("by", "image"), address, k)

        return self.answer(nearest, generation=True)

    def diff(self, request):
        """Two folders of one view compared: rows removed (by reason), kept and masked (view/pass_diff.py)."""
        from caption_debias.view.pass_diff import diff

        p = request.query_params
        return self.answer(lambda g: diff(g.folders, g.index, _number(p, "a"), _number(p, "b")), generation=True)

    def pair(self, request):
        p = request.query_params
        return self.answer(lambda g: g.removals.pair(_number(p, "f"), _number(p, "removed")))

    @staticmethod
    def _thumb_source(g: Generation, p) -> ImageBytes:
        if "removed" in p:
            return g.image_source(_number(p, "f"), None, None, _number(p, "removed"))
        return g.image_source(_number(p, "f"), _number(p, "s"), _number(p, "r"), None)

    def _thumb(self, p):
        from starlette.responses import Response

        try:
            source = self.data.consistent(lambda g: self._thumb_source(g, p))
            headers = {"Cache-Control": "max-age=3600"}
            try:
                return Response(self.thumbs.for_source(source), media_type="image/jpeg", headers=headers)
            except Refused as why:
                headers["X-Thumb"] = f"placeholder: {why}"
                return Response(placeholder_svg(str(why)), media_type="image/svg+xml", headers=headers)
        except FolderChanged as exc:
            return _error(str(exc), 503)
        except (KeyError, ValueError, IndexError):
            return _error("no such row", 404)
        except Exception as exc:  # noqa: BLE001
            return _failed(exc)

    async def thumb(self, request):
        import anyio

        return await anyio.to_thread.run_sync(self._thumb, request.query_params, limiter=self.limiter)

    def _original(self, folder: int, path: str):
        try:
            f = self.data.current().store.folder(folder)
            if f.image_root is None:
                return _error("no image root for this folder", 404)
            if storage.is_url(path):
                return _error("not a file under the image root", 404)
            source = source_for(f.image_root, path, None, f.images)
            if isinstance(source, NoImage):
                raise Refused(source.why)
            return _image_response(source, path)
        except FolderChanged as exc:
            return _error(str(exc), 503)
        except KeyError:
            return _error("no such folder", 404)
        except Refused as why:
            text = str(why)
            return _error(
                f"refused: {text}", 403 if any(w in text for w in ("outside", "absolute", "escapes")) else 404
            )
        except Exception as exc:  # noqa: BLE001
            return _failed(exc)

    async def image(self, request):
        import anyio

        folder, path = request.path_params["folder"], request.path_params["path"]
        return await anyio.to_thread.run_sync(self._original, folder, path, limiter=self.limiter)


def create_app(
    data: ViewData, thumbs: ThumbCache | None = None, hosts: list[str] | None = None, tags=None, text_search=None
):
    """The app; `hosts`: the Host header values it answers (security.allowed_hosts; default loopback only)."""
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    r = Routes(data, thumbs or ThumbCache(), tags, text_search)
    app = Starlette(
        routes=[
            Route("/", r.index),
            Route("/api/meta", r.meta),
            Route("/api/page", r.page),
            Route("/api/row", r.row),
            Route("/api/keys", r.keys),
            Route("/api/map", r.map),
            Route("/api/map/values", r.map_values),
            Route("/api/thresholds", r.thresholds),
            Route("/api/neighbours", r.neighbours),
            Route("/api/diff", r.diff),
            Route("/api/tags", r.change_tags, methods=["POST"]),
            Route("/api/tags/keys", r.tag_keys),
            Route("/api/text", r.text),
            Route("/api/pair", r.pair),
            Route("/api/thumb", r.thumb),
            Route("/image/{folder:int}/{path:path}", r.image),
            Mount("/assets", StaticFiles(directory=ASSETS), name="assets"),
        ]
    )
    return wrap(app, hosts if hosts is not None else allowed_hosts("127.0.0.1"))
