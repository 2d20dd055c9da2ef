"""Where files live: a local path, or an fsspec URL (s3://, gs://, hf://, memory://, ...).

A local path (or a file:// URL) stays a pathlib.Path, so local runs keep their code paths:
builtin open, write-temp-then-rename, flock. A URL becomes a universal_pathlib UPath over its
fsspec filesystem, which has the same methods (/, name, is_file, iterdir, glob, open,
read_text, unlink), so most code needs no branch. What an object store lacks has an analogue
here: no rename (`staged`: write a local file, then put it under its final name, where it
appears whole), no append (`local_temp`: appended lists gather locally), no flock (locking.py's
lock object). Pyarrow and polars get the fsspec filesystem, not the URL (`arrow_source`,
`scan_parquet`).
docs/storage.md says what works remotely and what each guarantee becomes.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import Any, Iterator, Sequence

from caption_debias.errors import UserError

URL_PATTERN = r"^([A-Za-z][A-Za-z0-9+.-]*)://"  # a scheme, then "://": as a regex pyarrow can apply per batch
_URL = re.compile(URL_PATTERN)
LOCAL_PROTOCOLS = frozenset({"file", "local"})
# Protocols polars reads itself (object_store: streaming, predicate pushdown); others go through fsspec.
POLARS_NATIVE = frozenset({"s3", "s3a", "gs", "gcs", "gcp", "az", "abfs", "abfss", "adl", "hf", "http", "https"})
# Processes other than this one cannot see this store (fsspec's memory:// lives in one Python process).
PROCESS_LOCAL = frozenset({"memory"})


def is_url(value: str) -> bool:
    """Whether a string (an input, a folder, a row's `image`) is a URL rather than a path: the one test.

    file:// counts (a URL); `protocol` and `is_remote` then tell a local file:// from a remote one.
    """
    return bool(_URL.match(value))


def protocol(path: Any) -> str | None:
    """The URL scheme of a remote path ('s3', 'memory', ...), None for a local one."""
    if isinstance(path, PurePath):
        return None
    if isinstance(path, str):
        m = _URL.match(path)
        name = m.group(1).lower() if m else None
        return None if name in LOCAL_PROTOCOLS else name
    proto = getattr(path, "protocol", None)  # a UPath
    return proto or None


def is_remote(path: Any) -> bool:
    """True for an fsspec URL or UPath other than file://; False for local paths."""
    return protocol(path) is not None


def as_path(path: str | os.PathLike[str]) -> Any:
    """A pathlib.Path for a local path or file:// URL, a UPath for any other URL.

    A URL whose fsspec backend is not installed is one line naming the package.
    """
    if isinstance(path, PurePath):
        return path
    if not isinstance(path, str):
        if is_remote(path):
            return path  # already a UPath
        path = os.fspath(path)
    m = _URL.match(path)
    if m is None:
        return Path(path)
    name = m.group(1).lower()
    if name in LOCAL_PROTOCOLS:
        return Path(path[m.end() :] or "/")
    check_backend(name, path)
    from upath import UPath

    return UPath(path)


def check_backend(name: str, url: str) -> None:
    """UserError when fsspec does not know `name` or its backend package is missing."""
    import fsspec
    from fsspec.registry import known_implementations

    try:
        fsspec.get_filesystem_class(name)
    except ImportError:
        package = known_implementations.get(name, {}).get("class", name).split(".")[0]
        raise UserError(
            f"{url}: {name}:// needs the {package} package (fsspec's {name} backend): pip install {package}"
        ) from None
    except ValueError:
        raise UserError(f"{url}: unknown storage protocol {name}:// (fsspec knows no such filesystem)") from None


def require_local(path: Any, what: str) -> Path:
    """`path` as a local Path, or one line saying that `what` cannot be a URL."""
    if is_remote(path):
        raise UserError(f"{what} {path}: must be a local folder here (a URL is not supported; see docs/storage.md)")
    return as_path(path)


def require_shared(path: Any, workers: int, engine: str, what: str) -> None:
    """memory:// is held in this process only: work done in other processes would be lost there."""
    if protocol(path) in PROCESS_LOCAL and (workers > 1 or engine == "ray"):
        raise UserError(
            f"{what} {path}: {protocol(path)}:// lives in this process only, so --workers > 1 and --engine ray "
            "cannot write or read it; use --workers 1 or a shared store"
        )


def same_place(a: Any, b: Any) -> bool:
    """True when two paths (local or URLs) name the same folder."""
    if is_remote(a) != is_remote(b):
        return False
    if not is_remote(a):
        return Path(a).resolve() == Path(b).resolve()
    a, b = as_path(a), as_path(b)
    return a.protocol == b.protocol and a.path.rstrip("/") == b.path.rstrip("/")


def _place(path: Any) -> tuple[str | None, tuple[str, ...]]:
    """(protocol, path parts) of a local path (symlinks resolved) or URL, for comparing places."""
    p = as_path(path)
    if not is_remote(p):
        return None, Path(p).resolve().parts
    return p.protocol if isinstance(p.protocol, str) else p.protocol[0], tuple(x for x in p.path.split("/") if x)


def overlap(a: Any, b: Any) -> str | None:
    """How two places overlap: "same", "inside" (a is inside b), "contains" (b is inside a), or None."""
    (pa_, a_parts), (pb, b_parts) = _place(a), _place(b)
    if pa_ != pb:
        return None
    if a_parts == b_parts:
        return "same"
    if a_parts[: len(b_parts)] == b_parts:
        return "inside"
    if b_parts[: len(a_parts)] == a_parts:
        return "contains"
    return None


def refuse_overlap(inputs: Sequence[Any], out: Any, what: str = "--out") -> None:
    """One rule for every command that reads inputs and writes `out` (a folder or a file): no input is
    `out`, inside it or around it. A run may empty `out` (--overwrite, resume's clean-up) while it
    still reads the input, or write files into a folder it is reading; either way it would destroy
    or change its own input (`prepare DIR/manifest.json --out DIR --overwrite` deleted the shards
    it was about to read)."""
    for given in inputs:
        how = overlap(given, out)
        if how == "same":
            raise UserError(f"{given}: the input is also {what}; write to another place")
        if how == "inside":
            raise UserError(
                f"{given}: the input is inside {what} {out}, which this command writes (and --overwrite empties); "
                f"write to a place outside the input"
            )
        if how == "contains":
            raise UserError(
                f"{what} {out} is inside the input {given}: this command would write into what it reads; "
                f"write to a place outside the input"
            )


def remove_tree(path: Any) -> None:
    """Remove a folder and everything under it (shutil.rmtree for local paths)."""
    if is_remote(path):
        path.fs.rm(path.path, recursive=True)
    else:
        shutil.rmtree(path)


def put_local(local: Path, path: Any) -> None:
    """Upload the local file `local` under the remote name `path` (the object appears whole)."""
    path.fs.put_file(str(local), path.path)
    path.fs.invalidate_cache(path.path)


def local_temp(name: str) -> Path:
    """A fresh local file name for a file that will be put under a remote name."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    return Path(tmp)


@contextmanager
def staged(path: Any) -> Iterator[Path]:
    """A local temp file to write; afterwards it is put under the remote `path` whole, then removed.

    The object-store analogue of write-temp-then-rename: nothing appears under `path` until the
    file is complete, and a failure leaves no partial object (fsspec's backends complete a
    multipart upload only at the end). For remote paths only; local writers rename.
    """
    tmp = local_temp(path.name)
    try:
        yield tmp
        put_local(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def arrow_source(path: Any) -> tuple[str, Any]:
    """(path, filesystem) for pyarrow's `filesystem=` parameters: (str, None) for a local path."""
    if isinstance(path, str):
        path = as_path(path)
    if is_remote(path):
        return path.path, path.fs
    return str(path), None


class UnreadableFile(UserError):
    """A file whose bytes cannot be decoded (a damaged Parquet page, a file cut short), named in one line."""


def _is_read_error(exc: BaseException) -> bool:
    """An error of decoding a file: pyarrow's (OSError, ArrowException) or polars'."""
    if isinstance(exc, OSError) or type(exc).__module__.startswith("polars"):
        return True
    import pyarrow as pa

    return isinstance(exc, pa.ArrowException)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def read_failure(path: Any, exc: BaseException) -> UnreadableFile:
    return UnreadableFile(
        f"{path}: cannot read ({_first_line(exc)}): the file is damaged or changed; "
        "restore it (copy it again, or rerun the command that wrote it)"
    )


def first_unreadable(paths: Sequence[Any]) -> tuple[Any, BaseException] | None:
    """(path, error) of the first of these Parquet files that cannot be decoded whole, or None.
    Each file is read in full, one batch at a time: only called once a read has failed."""
    for path in paths:
        try:
            for _ in _plain_parquet_file(path).iter_batches(batch_size=1024):
                pass
        except Exception as exc:
            if _is_read_error(exc):
                return path, exc
            raise
    return None


@contextmanager
def reading(paths: Sequence[Any]) -> Iterator[None]:
    """Reads of `paths` inside the block: a decoding failure is one line naming the file at fault
    (UnreadableFile), never blamed on a file being written or reported without a name. With
    several files (a polars scan over a folder) each is decoded in turn to find the one."""
    try:
        yield
    except UserError:
        raise
    except Exception as exc:
        if not _is_read_error(exc):
            raise
        found = (paths[0], exc) if len(paths) == 1 else first_unreadable(paths)
        if found is None:
            raise
        raise read_failure(*found) from None


def _plain_parquet_file(path: Any, **kwargs: Any):
    import pyarrow.parquet as pq

    if not is_remote(path):
        return pq.ParquetFile(path, **kwargs)
    source, fs = arrow_source(path)
    return pq.ParquetFile(source, filesystem=fs, **kwargs)


_NAMED_PARQUET_FILE = None


def _named_parquet_file_class():
    """pyarrow's ParquetFile whose reads name the file when they fail (built once, pyarrow imported lazily)."""
    global _NAMED_PARQUET_FILE
    if _NAMED_PARQUET_FILE is None:
        import pyarrow.parquet as pq

        class NamedParquetFile(pq.ParquetFile):
            name: Any = None

            def read(self, *args, **kwargs):
                with reading([self.name]):
                    return super().read(*args, **kwargs)

            def read_row_group(self, *args, **kwargs):
                with reading([self.name]):
                    return super().read_row_group(*args, **kwargs)

            def read_row_groups(self, *args, **kwargs):
                with reading([self.name]):
                    return super().read_row_groups(*args, **kwargs)

            def iter_batches(self, *args, **kwargs):
                with reading([self.name]):
                    yield from super().iter_batches(*args, **kwargs)

        _NAMED_PARQUET_FILE = NamedParquetFile
    return _NAMED_PARQUET_FILE


def parquet_file(path: Any, *, named: bool = True, **kwargs: Any):
    """pyarrow.parquet.ParquetFile of a local path or URL (remote: read by ranges through fsspec);
    its reads name the file in one line when its bytes cannot be decoded (`reading`). `named=False`:
    pyarrow's own errors (prepare's readers turn them into a reject of the input)."""
    if not named:
        return _plain_parquet_file(path, **kwargs)
    cls = _named_parquet_file_class()
    if not is_remote(path):
        pf = cls(path, **kwargs)
    else:
        source, fs = arrow_source(path)
        pf = cls(source, filesystem=fs, **kwargs)
    pf.name = path
    return pf


def read_table(path: Any, columns: Sequence[str] | None = None):
    """pyarrow.parquet.read_table of a local path or URL (a file that cannot be decoded: one line naming it)."""
    import pyarrow.parquet as pq

    with reading([path]):
        if not is_remote(path):
            return pq.read_table(path, columns=columns)
        source, fs = arrow_source(path)
        return pq.read_table(source, columns=columns, filesystem=fs)


def read_metadata(path: Any):
    """The Parquet footer of a local path or URL (a few KB read)."""
    import pyarrow.parquet as pq

    if not is_remote(path):
        return pq.read_metadata(path)
    source, fs = arrow_source(path)
    return pq.read_metadata(source, filesystem=fs)


def scan_parquet(paths: Sequence[Any]):
    """A polars LazyFrame over Parquet files, local or remote.

    Local paths and protocols polars reads natively (s3, gs, az, hf, http) go to
    pl.scan_parquet, which streams; polars then takes credentials from the environment as
    the clouds' own tools do. Any other fsspec protocol (memory://, sftp://, ...) is read
    through a pyarrow dataset over the fsspec filesystem: lazy too, but a query holds the
    columns it reads in memory.
    """
    import polars as pl

    remote = [p for p in paths if is_remote(p)]
    if not remote:
        return pl.scan_parquet([str(p) for p in paths])
    if len(remote) != len(paths) or len({protocol(p) for p in remote}) > 1:
        return pl.concat([scan_parquet([p]) for p in paths], how="vertical")
    urls = [str(as_path(p)) if isinstance(p, str) else str(p) for p in paths]
    if protocol(remote[0]) in POLARS_NATIVE:
        return pl.scan_parquet(urls)
    import pyarrow.dataset as pads

    upaths = [as_path(p) for p in paths]
    dataset = pads.dataset([p.path for p in upaths], format="parquet", filesystem=upaths[0].fs)
    return pl.scan_pyarrow_dataset(dataset)


READ_BUFFER = 1 << 20  # remote reads: line iteration goes through this buffer, not a block per line


def open_file(path: Any, mode: str = "rb", **kwargs: Any):
    """builtin open for a local path (str or Path); a buffered fsspec file (streaming) for a URL.

    fsspec's own readline reads a whole block per line, so remote reads get an
    io.BufferedReader (and a TextIOWrapper over it in text mode).
    """
    if not is_remote(path):
        return open(path, mode, **kwargs)
    path = as_path(path)
    if mode not in ("r", "rb", "rt"):
        return path.open(mode, **kwargs)
    raw = io.BufferedReader(path.fs.open(path.path, "rb"), buffer_size=READ_BUFFER)
    return raw if mode == "rb" else io.TextIOWrapper(raw, **kwargs)


def read_schema(path: Any):
    """The Arrow schema of a Parquet file, local or remote."""
    import pyarrow.parquet as pq

    if not is_remote(path):
        return pq.read_schema(path)
    source, fs = arrow_source(path)
    return pq.read_schema(source, filesystem=fs)


RANGE_BUFFER = 8 << 20  # a streamed container (tar) is fetched in requests of this size


class CountedReader(io.RawIOBase):
    """A raw reader over another binary file object that counts the bytes read through it.

    Under an io.BufferedReader each refill is one read here: for an fsspec file opened without
    a cache, one ranged request. `fetched` is then the bytes taken from the store, `reads` the
    requests; for a local file, the bytes read from disk.
    """

    def __init__(self, fh: Any):
        super().__init__()
        self.fh = fh
        self.fetched = 0
        self.reads = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if hasattr(self.fh, "readinto"):  # straight into the caller's buffer: no second copy of a refill
            n = self.fh.readinto(buffer) or 0
        else:
            data = self.fh.read(len(buffer))
            n = len(data)
            buffer[:n] = data
        self.fetched += n
        self.reads += 1 if n else 0
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self.fh.seek(offset, whence)

    def tell(self) -> int:
        return self.fh.tell()

    def close(self) -> None:
        if not self.closed:
            self.fh.close()
        super().close()


def counted(fh: Any, buffer_size: int = RANGE_BUFFER) -> io.BufferedReader:
    """`fh` read through a CountedReader and a buffer of `buffer_size`; the counter is `.raw`."""
    return io.BufferedReader(CountedReader(fh), buffer_size=buffer_size)


def open_ranges(path: Any, buffer_size: int = RANGE_BUFFER) -> io.BufferedReader:
    """A remote file read front to back in requests of `buffer_size` (no read-ahead cache beyond it),
    seekable (a seek outside the buffer starts the next request there), counting what it fetched."""
    path = as_path(path)
    fh = path.fs.open(path.path, "rb", cache_type="none")
    return counted(fh, buffer_size)


def resolve_folder(typed: str | os.PathLike) -> str:
    """A folder as a manifest records it: a local path made absolute from the current folder with
    symlinks followed (file:// URLs become paths); any other URL as given, without a trailing '/'."""
    text = os.fspath(typed)
    if is_remote(text):
        return text.rstrip("/") if not text.endswith("://") else text
    return os.path.realpath(os.path.abspath(as_path(text)))
