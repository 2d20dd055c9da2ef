"""The viewer as a web origin: what every response says about itself, and which hosts it answers.

- Every response (page, API, images, placeholders, errors) carries `X-Content-Type-Options: nosniff`
  and a Content-Security-Policy: the page may run only its own script (`PAGE_POLICY`); anything else
  is `sandbox`ed with nothing allowed (`DATA_POLICY`), so a file opened from the viewer's origin
  cannot run script in it, whatever it holds.
- Originals are served inline only as the raster formats a browser shows as pictures
  (`INLINE_FORMATS`, decided by Pillow from the bytes, not by the name); another picture Pillow reads
  (TIFF, ...) is a download (`Content-Disposition: attachment`, application/octet-stream); anything
  that is no picture (SVG, HTML, text, unknown) is refused (415).
- Only requests naming an allowed host are answered (DNS rebinding: a page of another site that
  resolves its name to 127.0.0.1 gets 400): the bound address, localhost, and --allowed-host names.
"""

from __future__ import annotations

from typing import Iterable

PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
DATA_POLICY = "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; sandbox; frame-ancestors 'none'"
PAGE_PATHS = ("/", "/assets/")
# Pillow format -> the type a browser renders as a picture (and never as a document or script)
INLINE_FORMATS = {
    "JPEG": "image/jpeg",
    "PNG": "image/png",
    "GIF": "image/gif",
    "WEBP": "image/webp",
    "BMP": "image/bmp",
    "ICO": "image/x-icon",
    "AVIF": "image/avif",
}
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def allowed_hosts(host: str, extra: Iterable[str] = ()) -> list[str]:
    """Host header values the server answers: the address it listens on, loopback, and `extra`
    (names given with --allowed-host; '*' allows any)."""
    bound = f"[{host}]" if ":" in host and not host.startswith("[") else host
    out = []
    for name in (bound, *LOOPBACK_NAMES, *extra):
        name = name.strip().lower()
        if name and name not in out:
            out.append(name)
    return out


def _policy(path: str) -> str:
    return PAGE_POLICY if path == "/" or path.startswith(PAGE_PATHS[1]) else DATA_POLICY


class SecurityHeaders:
    """ASGI middleware adding the headers above to every response (Starlette ships none; a pure ASGI
    one keeps streamed responses streaming)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        policy = _policy(scope.get("path", "/"))

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"content-security-policy"]
                headers += [
                    (b"content-security-policy", policy.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"cross-origin-resource-policy", b"same-origin"),
                    (b"x-frame-options", b"DENY"),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def wrap(app, hosts: list[str]):
    """`app` behind the host check (Starlette's TrustedHostMiddleware) and the headers (outermost, so
    the host check's own refusals carry them too)."""
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    return SecurityHeaders(TrustedHostMiddleware(app, allowed_hosts=hosts, www_redirect=False))
