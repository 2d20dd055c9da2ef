"""Image worlds: the same pictures stored every way a stage may meet them, built with the real tools.

- `url_world`: source pictures (curate_fixtures.scene) behind file:// URLs, a URL table, its
  prepared folder (rows whose `image` is a URL) and the URL list `caption-debias urls` writes;
- `i2d_world`: that list downloaded by the img2dataset console script (`webdataset` or
  `parquet` output, a few samples per shard, so several shards; one URL points at no file),
  and the img2dataset output folder prepared (rows `NNNNN.tar#KEY.jpg` / `NNNNN.parquet#KEY`);
- `loose_world`: the downloaded samples' bytes as loose files (`NNNNN/KEY.jpg`, read out of the
  tars with tarfile) and their prepared folder: the same pixels as the tars;
- `packed_world`: `pack` of the loose world (its own tars) and a prepared table pointing at
  pack's members (`NNNNN.tar#SAMPLE.jpg`);
- `hostile_root`: tars and parquet files built by hand to be hostile (member paths out, links
  out, links in loops and chains, FIFO/device members, huge headers, truncation), each row with
  its expected reason;
- `parquet_bombs`: sample tables of a few KB whose cells decompress to hundreds of MB (a
  dictionary value every row repeats; a row group over the image cap), each row with its reason;
- `moto_s3` / `CountingMotoServer`: moto's S3 server on 127.0.0.1 that counts every request
  (method, object, bytes sent), and `upload` to put a world on it.

`built(tmp_path_factory, name, make)` builds a world once per test session, whichever test
module asks first (img2dataset takes seconds per run), so fixtures of several modules share it:

    @pytest.fixture(scope="module")
    def wds(tmp_path_factory):
        return built(tmp_path_factory, "wds", lambda base: i2d_world(base, "webdataset"))
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shlex
import subprocess
import sys
import tarfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from curate_fixtures import caption
from pictures import encoded, scene, write

N_PICTURES = 12
PER_SHARD = 4  # img2dataset --number_sample_per_shard: 13 URLs -> 4 shards
IMAGE_SIZE = 64
GONE = "gone"  # the picture whose URL points at no file (img2dataset: failed_to_download)

_BUILT: dict[str, Any] = {}


def built(tmp_path_factory, name: str, make: Callable[[Path], Any]) -> Any:
    """`make(folder)` once per session (its result kept under `name`), and once for all the
    pytest-xdist workers of a run: the first builds it under their shared temp folder and the
    others read its result there (a world is read-only to the tests; img2dataset's runs are the
    suite's slowest set-ups)."""
    if name not in _BUILT:
        _BUILT[name] = _built_once(tmp_path_factory, name, make)
    return _BUILT[name]


def _built_once(tmp_path_factory, name: str, make: Callable[[Path], Any]) -> Any:
    import pickle

    from filelock import FileLock

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return make(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent  # the run's folder, above every worker's own
    folder, result = shared / f"world-{name}", shared / f"world-{name}.pickle"
    with FileLock(str(shared / f"world-{name}.lock")):
        if result.is_file():
            return pickle.loads(result.read_bytes())
        folder.mkdir()
        world = make(folder)
        result.write_bytes(pickle.dumps(world))
        return world


# -- reading results ---------------------------------------------------------------------------


def pixels(data: bytes, name: str) -> tuple:
    """An ImageSource function: the picture as every stage decodes it (size, RGB bytes)."""
    from caption_debias.image_files import decode_rgb

    im = decode_rgb(data, name)
    return im.size, im.tobytes()


def raw(data: bytes, name: str) -> bytes:
    """An ImageSource function: the bytes themselves."""
    return data


def by_key(source, refs: dict[str, str], fn=raw) -> dict:
    """{key: fn's result} of the images `refs` names (key -> image reference), read in one batch."""
    keys = sorted(refs)
    return dict(zip(keys, source.map([refs[k] for k in keys], fn)))


def plain(result):
    """A result as a comparable value: an ImageProblem as (reason, detail)."""
    from caption_debias.image_files import ImageProblem

    return (result.reason, result.detail) if isinstance(result, ImageProblem) else result


# -- URLs and img2dataset ----------------------------------------------------------------------


@dataclass
class UrlWorld:
    base: Path
    sources: dict[str, Path]  # url key (the table's key column) -> source picture
    prepared: Path  # prepared folder: rows whose image is a file:// URL
    keys: list[str]  # prepared keys (= caption_key), in row order
    urls: list[str]
    listing: dict[str, Any]  # write_url_list's result (its img2dataset command)


def url_world(base: Path, n: int = N_PICTURES) -> UrlWorld:
    from caption_debias.dataset import PreparedDataset
    from caption_debias.export.urls import write_url_list
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    src = base / "src"
    src.mkdir(parents=True)
    rng = random.Random(29)
    rows, sources = [], {}
    for i in range(n):
        path = src / f"p{i:02d}.png"
        write(scene(1000 + i, (72 + 8 * (i % 3), 56 + 4 * (i % 4))), path)
        sources[f"p{i:02d}"] = path
        rows.append({"key": f"p{i:02d}", "image": path.as_uri(), "caption": caption(rng, 4)})
    rows.insert(n // 2, {"key": GONE, "image": (src / "gone.png").as_uri(), "caption": caption(rng, 3)})
    table = base / "urls.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepared = base / "prepared-urls"
    prepare([table], prepared, PrepareOptions(format="table", quiet=True))
    listing = write_url_list(prepared, base / "list.parquet", image_size=IMAGE_SIZE, processes=1, threads=2)
    got = PreparedDataset.open(prepared).read(["key", "image"])
    return UrlWorld(base, sources, prepared, got.column("key").to_pylist(), got.column("image").to_pylist(), listing)


def run_img2dataset(listing: dict[str, Any], out: Path, output_format: str, per_shard: int = PER_SHARD) -> Path:
    """The URL list's img2dataset command, run by the console script, into `out`."""
    argv = shlex.split(listing["command"])
    argv[0] = str(Path(sys.executable).with_name("img2dataset"))
    argv[argv.index("--output_format") + 1] = output_format
    argv[argv.index("--output_folder") + 1] = str(out)
    argv += ["--number_sample_per_shard", str(per_shard)]
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@dataclass
class I2DWorld:
    output_format: str  # img2dataset's: webdataset or parquet
    root: Path  # img2dataset's output folder (the image root)
    prepared: Path  # that folder prepared: rows NNNNN.tar#KEY.jpg or NNNNN.parquet#KEY
    refs: dict[str, str]  # caption_key -> the row's image reference (successful downloads)
    failed: list[str]  # caption_keys img2dataset could not download
    urls: UrlWorld = field(repr=False)


def i2d_world(base: Path, output_format: str = "webdataset", urls: UrlWorld | None = None) -> I2DWorld:
    from caption_debias.dataset import PreparedDataset
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    urls = urls or url_world(base / "urls")
    root = run_img2dataset(urls.listing, base / f"images-{output_format}", output_format)
    prepared = base / f"prepared-{output_format}"
    prepare([root], prepared, PrepareOptions(format="img2dataset", image_root=str(root), quiet=True))
    got = PreparedDataset.open(prepared).read(["image", "meta"])
    refs = {
        json.loads(meta)["caption_key"]: image
        for image, meta in zip(got.column("image").to_pylist(), got.column("meta").to_pylist())
    }
    failed = [k for k in urls.keys if k not in refs]
    return I2DWorld(output_format, root, prepared, refs, failed, urls)


# -- the same images as loose files, and pack's tars --------------------------------------------


@dataclass
class LooseWorld:
    root: Path  # NNNNN/KEY.jpg: the bytes img2dataset stored
    prepared: Path  # a table of (caption_key, NNNNN/KEY.jpg) prepared with --image-root root
    refs: dict[str, str]  # caption_key -> NNNNN/KEY.jpg


def tar_samples(tar_path: Path) -> Iterator[tuple[str, bytes, dict]]:
    """(member name, image bytes, KEY.json) of an img2dataset tar, read with tarfile alone."""
    with tarfile.open(tar_path) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for name, info in members.items():
            stem, _, ext = name.rpartition(".")
            if ext in ("jpg", "png", "webp"):
                meta = json.loads(tar.extractfile(members[f"{stem}.json"]).read())
                yield name, tar.extractfile(info).read(), meta


def loose_world(base: Path, wds: I2DWorld) -> LooseWorld:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = base / "images"
    rows, refs = [], {}
    for tar_path in sorted(wds.root.glob("*.tar")):
        for name, data, meta in tar_samples(tar_path):
            image = f"{tar_path.stem}/{name}"
            (root / tar_path.stem).mkdir(parents=True, exist_ok=True)
            (root / image).write_bytes(data)
            refs[meta["caption_key"]] = image
            rows.append({"key": meta["caption_key"], "image": image, "caption": meta["caption"]})
    table = base / "loose.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["key"])), "utf-8")
    prepared = base / "prepared-loose"
    prepare([table], prepared, PrepareOptions(format="table", image_root=str(root), quiet=True))
    return LooseWorld(root, prepared, refs)


@dataclass
class PackedWorld:
    root: Path  # pack's output folder: NNNNN.tar of SAMPLE.jpg/.txt/.json
    prepared: Path  # a table pointing at pack's members, prepared with --image-root root
    refs: dict[str, str]  # the loose world's row key -> NNNNN.tar#SAMPLE.jpg


def packed_world(base: Path, loose: LooseWorld, per_tar: int = 5) -> PackedWorld:
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = base / "packed"
    options = PackOptions(image_root=str(loose.root), image_size=48, samples_per_shard=per_tar, quiet=True)
    pack(loose.prepared, root, options)
    rows, refs = [], {}
    for tar_path in sorted(root.glob("*.tar")):
        for name, _, meta in tar_samples(tar_path):
            refs[meta["key"]] = f"{tar_path.name}#{name}"
            rows.append({"key": meta["key"], "image": refs[meta["key"]], "caption": " ".join(meta["sentences"])})
    table = base / "packed.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepared = base / "prepared-packed"
    prepare([table], prepared, PrepareOptions(format="table", image_root=str(root), quiet=True))
    return PackedWorld(root, prepared, refs)


# -- hostile tars and parquet files --------------------------------------------------------------


def _jpeg(seed: int) -> bytes:
    return encoded(scene(seed, (40, 32)), "JPEG", quality=90)


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", **attrs: Any) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 0
    for k, v in attrs.items():
        setattr(info, k, v)
    tar.addfile(info, io.BytesIO(data) if data else None)


def _tar_bytes(members: list[tuple[str, bytes, dict]], end: bool = True) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data, attrs in members:
            _add(tar, name, data, **attrs)
    raw = buf.getvalue()
    return raw if end else raw[: len(raw) - _end_blocks(raw)]


def _end_blocks(raw: bytes) -> int:
    """How many bytes of zero blocks end a tar (the end-of-archive marker and record padding)."""
    n = len(raw)
    while n >= tarfile.BLOCKSIZE and raw[n - tarfile.BLOCKSIZE : n] == bytes(tarfile.BLOCKSIZE):
        n -= tarfile.BLOCKSIZE
    return len(raw) - n


def _header(name: str, size: int, type_: bytes) -> bytes:
    """One header block claiming `size` bytes (base-256 when octal cannot hold it), no data after it."""
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mtime = size, type_, 0
    return info.tobuf(format=tarfile.GNU_FORMAT)


@dataclass
class HostileRoot:
    root: Path
    rows: list[tuple[str, bytes | tuple[str, str]]]  # (image, its bytes, or (reason, a piece of the detail))


Rows = list[tuple[str, "str | None", str]]  # (image, expected reason: None for `good`, "other"; a piece of the detail)


def every_world(wds, pq_out, loose, packed, urls, base: Path) -> list[tuple[Path, list[str], list[str] | None]]:
    """(root, the rows' images, their keys or None) for each world the image readers must agree on: tars, parquet
    samples, loose files, a packed folder, URL rows' downloads in tars and in parquet, and a hostile root."""
    hostile = hostile_root(base)
    return [
        (wds.root, list(wds.refs.values()), None),
        (pq_out.root, list(pq_out.refs.values()), None),
        (loose.root, list(loose.refs.values()), None),
        (packed.root, list(packed.refs.values()), None),
        (wds.root, urls.urls, urls.keys),
        (pq_out.root, urls.urls, urls.keys),
        (hostile.root, [image for image, _ in hostile.rows], None),
    ]


def hostile_root(base: Path, with_fifo: bool = True) -> HostileRoot:
    """One root holding every hostile tar and parquet file at once; rows name good and bad members of each."""
    root = base / "hostile"
    root.mkdir(parents=True)
    good, other = _jpeg(1), _jpeg(2)
    rows = _kinds_tar(root, good, other) + links_tar(root, good) + _cut_tars(root, good, other)
    rows += _not_tars(root, with_fifo)
    rows += _parquet_files(root, good)
    expected = {None: good, "other": other}
    return HostileRoot(
        root, [(image, expected[why] if why in expected else (why, piece)) for image, why, piece in rows]
    )


def _kinds_tar(root: Path, good: bytes, other: bytes) -> Rows:
    """kinds.tar: every kind of member (paths out, links out and in, FIFO/device/dir, a name twice)."""
    links = [
        ("ok.jpg", good, {}),
        ("../up.jpg", other, {}),
        ("abs.jpg", b"", {"type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}),
        ("out.jpg", b"", {"type": tarfile.SYMTYPE, "linkname": "../../outside.jpg"}),
        ("hard-out.jpg", b"", {"type": tarfile.LNKTYPE, "linkname": "../ok.jpg"}),
        ("alias.jpg", b"", {"type": tarfile.SYMTYPE, "linkname": "ok.jpg"}),
        ("hard.jpg", b"", {"type": tarfile.LNKTYPE, "linkname": "ok.jpg"}),
        ("fifo.jpg", b"", {"type": tarfile.FIFOTYPE}),
        ("chr.jpg", b"", {"type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 5}),
        ("blk.jpg", b"", {"type": tarfile.BLKTYPE, "devmajor": 8, "devminor": 0}),
        ("dir.jpg", b"", {"type": tarfile.DIRTYPE}),
        ("twice.jpg", good, {}),
        ("twice.jpg", other, {}),  # a name twice: the first in tar order is read
        ("k1.png", other, {}),  # KEY.jpg asked, KEY.png stored (img2dataset's encode_format)
    ]
    (root / "kinds.tar").write_bytes(_tar_bytes(links))
    return [
        ("kinds.tar#ok.jpg", None, ""),
        ("kinds.tar#./ok.jpg", None, ""),
        ("kinds.tar#../up.jpg", "image_unreadable", "member path escapes its tar"),
        ("kinds.tar#abs.jpg", "image_unreadable", "outside its tar"),
        ("kinds.tar#out.jpg", "image_unreadable", "outside its tar"),
        ("kinds.tar#hard-out.jpg", "image_unreadable", "outside its tar"),
        ("kinds.tar#alias.jpg", None, ""),
        ("kinds.tar#hard.jpg", None, ""),
        ("kinds.tar#fifo.jpg", "image_unreadable", "not a regular file"),
        ("kinds.tar#chr.jpg", "image_unreadable", "not a regular file"),
        ("kinds.tar#blk.jpg", "image_unreadable", "not a regular file"),
        ("kinds.tar#dir.jpg", "image_unreadable", "not a regular file"),
        ("kinds.tar#twice.jpg", None, ""),
        ("kinds.tar#k1.jpg", "other", ""),
        ("kinds.tar#nope.jpg", "image_missing", "no member nope.jpg in kinds.tar"),
        ("kinds.tar#/etc/passwd", "image_unreadable", "absolute member path"),
    ]


def links_tar(root: Path, good: bytes) -> Rows:
    """links.tar: links to links (a chain within the bound and beyond it), loops (a self-link, two
    symlinks, a symlink and a hard link), a dangling link, a link to a link out, a link to a folder."""
    sym, hard = tarfile.SYMTYPE, tarfile.LNKTYPE
    chain = [(f"c{i}.jpg", b"", {"type": sym, "linkname": f"c{i + 1}.jpg"}) for i in range(20)]
    members = [
        ("ok.jpg", good, {}),
        ("d", b"", {"type": tarfile.DIRTYPE}),
        ("self.jpg", b"", {"type": sym, "linkname": "self.jpg"}),
        ("a.jpg", b"", {"type": sym, "linkname": "b.jpg"}),
        ("b.jpg", b"", {"type": sym, "linkname": "a.jpg"}),
        ("m1.jpg", b"", {"type": sym, "linkname": "m2.jpg"}),
        ("m2.jpg", b"", {"type": hard, "linkname": "m1.jpg"}),  # a hard link looks back: to m1, which looks ahead
        ("l3.jpg", b"", {"type": sym, "linkname": "l2.jpg"}),
        ("l2.jpg", b"", {"type": hard, "linkname": "ok.jpg"}),
        ("sub/up.jpg", b"", {"type": sym, "linkname": "../l3.jpg"}),
        *chain,
        ("c20.jpg", good, {}),
        ("dangling.jpg", b"", {"type": sym, "linkname": "nowhere.jpg"}),
        ("via.jpg", b"", {"type": sym, "linkname": "out.jpg"}),
        ("out.jpg", b"", {"type": sym, "linkname": "/etc/passwd"}),
        ("to-dir.jpg", b"", {"type": sym, "linkname": "d"}),
    ]
    (root / "links.tar").write_bytes(_tar_bytes(members))
    return [
        ("links.tar#self.jpg", "image_unreadable", "a loop of links"),
        ("links.tar#a.jpg", "image_unreadable", "a loop of links"),
        ("links.tar#b.jpg", "image_unreadable", "a loop of links"),
        ("links.tar#m1.jpg", "image_unreadable", "a loop of links"),
        ("links.tar#m2.jpg", "image_unreadable", "a loop of links"),
        ("links.tar#l3.jpg", None, ""),
        ("links.tar#sub/up.jpg", None, ""),
        ("links.tar#c12.jpg", None, ""),
        ("links.tar#c0.jpg", "image_unreadable", "a chain of more than 8 links"),
        ("links.tar#dangling.jpg", "image_unreadable", "a link to nowhere.jpg, no member of its tar"),
        ("links.tar#via.jpg", "image_unreadable", "a link to /etc/passwd, outside its tar"),
        ("links.tar#to-dir.jpg", "image_unreadable", "not a regular file"),
        ("links.tar#ok.jpg", None, ""),
    ]


def _cut_tars(root: Path, good: bytes, other: bytes) -> Rows:
    """Tars that end too early: a terabyte header, a pax header of 2 GiB, cut in a member, cut at a boundary."""
    # a member whose header claims a terabyte (then the file ends); members before it still read
    huge = _tar_bytes([("first.jpg", good, {})], end=False) + _header("huge.jpg", 1 << 40, tarfile.REGTYPE)
    (root / "huge.tar").write_bytes(huge)
    rows = [
        ("huge.tar#first.jpg", None, ""),
        ("huge.tar#huge.jpg", "image_unreadable", "more than the maximum"),
        ("huge.tar#after.jpg", "image_unreadable", "unreadable after member huge.jpg"),
    ]
    # a pax header claiming 2 GiB: refused before tarfile would read it into memory
    pax = _tar_bytes([("first.jpg", good, {})], end=False) + _header("pax", 1 << 31, tarfile.XHDTYPE)
    (root / "pax.tar").write_bytes(pax + bytes(4096))
    rows += [
        ("pax.tar#first.jpg", None, ""),
        ("pax.tar#later.jpg", "image_unreadable", "extended header of 2,147,483,648 bytes"),
    ]
    # cut inside the second member's data, and cut at a member boundary (no end-of-archive blocks)
    whole = _tar_bytes([("a.jpg", good, {}), ("b.jpg", other, {}), ("c.jpg", good, {})])
    (root / "cut.tar").write_bytes(whole[: 512 + _padded(len(good)) + 512 + len(other) // 2])
    (root / "cut-boundary.tar").write_bytes(_tar_bytes([("a.jpg", good, {}), ("b.jpg", other, {})], end=False))
    rows += [
        ("cut.tar#a.jpg", None, ""),
        ("cut.tar#b.jpg", "image_unreadable", "truncated tar"),
        ("cut.tar#c.jpg", "image_unreadable", "unreadable after member b.jpg"),
        ("cut-boundary.tar#a.jpg", None, ""),
        ("cut-boundary.tar#c.jpg", "image_unreadable", "truncated or corrupt after member b.jpg"),
    ]
    return rows


def _not_tars(root: Path, with_fifo: bool) -> Rows:
    """Files named .tar that are no tar: garbage, empty, a folder, a FIFO; a missing one; a path out."""
    (root / "garbage.tar").write_bytes(bytes(random.Random(3).randrange(256) for _ in range(3000)))
    (root / "empty.tar").write_bytes(b"")
    (root / "dir.tar").mkdir()
    rows = [
        ("garbage.tar#ok.jpg", "image_unreadable", "not a readable tar"),
        ("empty.tar#ok.jpg", "image_unreadable", "not a readable tar"),
        ("dir.tar#ok.jpg", "image_missing", "dir.tar is a folder"),
        ("gone.tar#ok.jpg", "image_missing", "no file gone.tar"),
        ("../x.tar#ok.jpg", "image_unreadable", "escapes the image root"),
        ("x.tfrecord#k", "image_unreadable", "tfrecord output is not read"),
    ]
    if with_fifo and hasattr(os, "mkfifo"):
        os.mkfifo(root / "fifo.tar")
        rows.append(("fifo.tar#ok.jpg", "image_unreadable", "fifo.tar is a FIFO"))
    return rows


def _parquet_files(root: Path, good: bytes) -> Rows:
    """img2dataset parquet output: a sample, a failed download (null bytes), a file that is not img2dataset's, a broken file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table(
            {
                "key": ["000", "001"],
                "status": ["success", "failed_to_download"],
                "error_message": [None, "404"],
                "jpg": pa.array([good, None], pa.binary()),
            }
        ),
        root / "00000.parquet",
    )
    pq.write_table(pa.table({"key": ["000"], "caption": ["x"]}), root / "other.parquet")
    (root / "broken.parquet").write_bytes(b"PAR1" + bytes(100))
    return [
        ("00000.parquet#000", None, ""),
        ("00000.parquet#001", "image_missing", "no image stored (failed_to_download: 404)"),
        ("00000.parquet#002", "image_missing", "no sample 002 in 00000.parquet"),
        ("other.parquet#000", "image_unreadable", "not img2dataset's parquet output"),
        ("broken.parquet#000", "image_unreadable", "not a readable Parquet file"),
    ]


MIB = 1 << 20
BOMB_ROWS = 64  # rows sharing one dictionary value: a plain read materialises it once per row


def parquet_bombs(root: Path, good: bytes) -> Rows:
    """img2dataset-style sample tables of a few KB whose cells decompress to hundreds of MB: a
    dictionary value every row of a group repeats (image, error_message and key columns), a group
    of plain cells over the image cap (image column, key column). A good sample in each file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def shared(value, n: int, kind) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([value], kind))

    def dense(n: int, each: int, kind=pa.binary()) -> pa.Array:  # n cells of `each` zero bytes, never touched
        offsets = pa.array(range(0, n * each + 1, each), pa.int32()).buffers()[1]
        return pa.Array.from_buffers(kind, n, [None, offsets, pa.py_buffer(bytes(n * each))])

    text, blob = pa.dictionary(pa.int32(), pa.string()), pa.dictionary(pa.int32(), pa.binary())
    schema = pa.schema([("key", text), ("status", text), ("error_message", text), ("jpg", blob)])
    n = BOMB_ROWS

    def group(keys, status, error, jpg) -> pa.Table:
        return pa.table({"key": keys, "status": status, "error_message": error, "jpg": jpg}, schema=schema)

    def plain(keys: list[str]) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(range(len(keys)), pa.int32()), pa.array(keys, pa.string()))

    nulls = pa.DictionaryArray.from_arrays(pa.array([None] * n, pa.int32()), pa.array([""], pa.string()))
    ok = shared("success", 1, pa.string())
    one_null = pa.DictionaryArray.from_arrays(pa.array([None], pa.int32()), pa.array([""], pa.string()))
    options = {"compression": "zstd", "store_schema": False, "write_statistics": False}
    with pq.ParquetWriter(root / "shared.parquet", schema, dictionary_pagesize_limit=1 << 30, **options) as w:
        w.write_table(group(plain(["good"]), ok, one_null, shared(good, 1, pa.binary())))
        keys = plain([f"f{i:02d}" for i in range(n)])
        w.write_table(group(keys, shared("success", n, pa.string()), nulls, shared(bytes(32 * MIB), n, pa.binary())))
        keys = plain([f"e{i:02d}" for i in range(n)])
        no_jpg = pa.DictionaryArray.from_arrays(pa.array([None] * n, pa.int32()), pa.array([b""], pa.binary()))
        error = shared("x" * (32 * MIB), n, pa.string())
        w.write_table(group(keys, shared("failed_to_download", n, pa.string()), error, no_jpg))
        w.write_table(group(shared("k" * (32 * MIB), n, pa.string()), shared("success", n, pa.string()), nulls, no_jpg))
    plain_schema = pa.schema([("key", pa.string()), ("jpg", pa.binary())])
    with pq.ParquetWriter(root / "plain.parquet", plain_schema, use_dictionary=False, **options) as w:
        big = 320  # cells of 1 MiB: the group is over the 256 MiB cap, each cell under it
        w.write_table(pa.table({"key": pa.array([f"p{i:03d}" for i in range(big)]), "jpg": dense(big, MIB)}))
        w.write_table(pa.table({"key": dense(big, MIB, pa.string()), "jpg": dense(big, 1)}))  # keys of 1 MiB each
        w.write_table(pa.table({"key": pa.array(["good"]), "jpg": pa.array([good])}))
    return [
        ("shared.parquet#good", None, ""),
        ("shared.parquet#f00", "zeros", str(32 * MIB)),
        (f"shared.parquet#f{n - 1:02d}", "zeros", str(32 * MIB)),
        ("shared.parquet#e00", "image_missing", "no image stored (failed_to_download: " + "x" * 200 + ")"),
        ("plain.parquet#good", None, ""),
        ("plain.parquet#p000", "image_unreadable", "row group 0 (jpg) is 335,"),
        ("plain.parquet#p319", "image_unreadable", "more than the maximum 268,435,456 for an image"),
        ("plain.parquet#nokey", "image_unreadable", "no sample nokey in the readable row groups of plain.parquet; "),
    ]


def _padded(n: int) -> int:
    return -(-n // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


# -- a counting S3 server -----------------------------------------------------------------------


class CountingMotoServer:
    """moto's S3 server on 127.0.0.1 (a free port), recording every request it answers:
    (method, path, status, bytes of the body sent) in `requests`."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, int, int]] = []
        self._lock = threading.Lock()
        self._server = None
        self._thread: threading.Thread | None = None

    def _app(self):
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        app = DomainDispatcherApplication(create_backend_app)

        def counting(environ, start_response):
            seen: dict[str, Any] = {}

            def respond(status, headers, exc_info=None):
                seen["status"] = int(status.split()[0])
                seen["bytes"] = int({k.lower(): v for k, v in headers}.get("content-length", 0) or 0)
                return start_response(status, headers, exc_info)

            body = app(environ, respond)
            sent = 0 if environ["REQUEST_METHOD"] == "HEAD" else seen.get("bytes", 0)
            with self._lock:
                self.requests.append((environ["REQUEST_METHOD"], environ["PATH_INFO"], seen.get("status", 0), sent))
            return body

        return counting

    def start(self) -> str:
        from werkzeug.serving import WSGIRequestHandler, make_server

        class Quiet(WSGIRequestHandler):
            def log(self, *args) -> None:  # no access log on stderr
                pass

        self._server = make_server("127.0.0.1", 0, self._app(), threaded=True, request_handler=Quiet)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._thread.join()

    def gets(self, suffix: str = "") -> list[tuple[str, int]]:
        """(path, bytes) of every GET of an object whose path ends with `suffix`."""
        with self._lock:
            return [(p, n) for m, p, _, n in self.requests if m == "GET" and p.endswith(suffix)]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()


@contextlib.contextmanager
def moto_s3() -> Iterator[tuple[CountingMotoServer, Any, str]]:
    """(server, s3fs filesystem, a fresh bucket); the AWS variables point s3fs and polars at the server
    for the duration, and are restored afterwards."""
    import s3fs

    server = CountingMotoServer()
    endpoint = server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        fs = s3fs.S3FileSystem()
        bucket = f"cd-{uuid.uuid4().hex[:8]}"
        fs.mkdir(bucket)
        yield server, fs, bucket
    finally:
        server.stop()
        s3fs.S3FileSystem.clear_instance_cache()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def upload(fs, local: Path, url: str) -> str:
    """Put the local folder `local` (files and subfolders) under the s3:// URL `url`; returns the URL."""
    for path in sorted(local.rglob("*")):
        if path.is_file():
            fs.put_file(str(path), f"{url[len('s3://') :]}/{path.relative_to(local).as_posix()}")
    fs.invalidate_cache()
    return url
