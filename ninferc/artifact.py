"""The `.ninfer` container: one file holding everything needed to run a model on a target.

Layout (all integers little-endian)::

    offset 0   magic            8 bytes  b"NINFERC\\0"
    offset 8   container ver.   u32      (CONTAINER_VERSION)
    offset 12  flags            u32      (0)
    offset 16  header length    u64      bytes of the JSON header
    offset 24  header sha256    32 bytes
    offset 56  header           JSON (utf-8)
    ...        payloads         each at a multiple of 4096 (ALIGN)

The header holds: ``format_version``, ``ninferc_version``, ``model`` (ModelConfig dict), ``target``
(arch, sku, sms), ``graph`` (the compiled IR graph), ``plan``, ``kernels`` (uri, family, template,
entry, params, rendered-source sha256 and payload, the resource usage the plan assumed, the NVRTC
options), ``tensors`` (name, dtype, shape, layout, offset, nbytes, sha256) and ``resources``
(tokenizer files). Reading the version needs only the first 12 bytes; payloads are read through mmap,
never whole into memory; a tensor's sha256 is checked when it is first read.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Callable, Iterable

import ml_dtypes
import numpy as np

from ninferc import __version__
from ninferc.errors import ArtifactError

MAGIC = b"NINFERC\0"
CONTAINER_VERSION = 1
FORMAT_VERSION = 1
ALIGN = 4096
_PREFIX = struct.Struct("<8sIIQ32s")  # magic, version, flags, header length, header sha256
NP_DTYPES = {"bf16": ml_dtypes.bfloat16, "f32": np.float32, "f16": np.float16, "i8": np.int8, "u8": np.uint8,
             "i32": np.int32}


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def read_container_version(path: str | Path) -> int:
    """The container version from the first 12 bytes (no header parsing).

    Raises:
        ArtifactError: not a .ninfer file (bad magic) or shorter than 12 bytes.
    """
    with open(path, "rb") as f:
        head = f.read(12)
    if len(head) < 12:
        raise ArtifactError(f"{path}: not a .ninfer artifact: {len(head)} bytes, shorter than the 12-byte magic + "
                            "version prefix (an empty or truncated file)")
    if head[:8] != MAGIC:
        raise ArtifactError(f"{path}: bad magic {head[:8]!r}; expected {MAGIC!r} (not a .ninfer artifact)")
    return struct.unpack("<I", head[8:12])[0]


def write_artifact(
    path: str | Path,
    header: dict,
    tensors: Mapping[str, np.ndarray],
    blobs: Mapping[str, bytes],
    *,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> None:
    """Write an artifact in one pass, atomically (temp file + rename).

    The header is sized first with placeholder checksums (a sha256 hex digest has a fixed length), the
    payloads are streamed at their final offsets while hashing, then the header is written in place.

    Args:
        path: output file.
        header: JSON-able dict (the ``tensors``/``blobs`` tables and versions are filled here).
        tensors: name -> numpy array (bf16 via ml_dtypes, f32, ...) or a zero-argument callable
            returning it (so a large checkpoint is read one tensor at a time); stored C-contiguous.
        blobs: name -> bytes (kernel sources, tokenizer files).
        progress: optional wrapper around the tensor iteration (e.g. tqdm).

    Raises:
        ArtifactError: an array of an unsupported dtype; the file cannot be written (an OSError: a full disk, a
            quota, an I/O error; the message names the path and the OS's reason; the temporary file is removed).
    """
    path = Path(path)
    rev = {np.dtype(v): k for k, v in NP_DTYPES.items()}
    tensor_table, blob_table = [], []
    offset = 0
    for name, spec in _specs(tensors).items():
        dt = rev.get(spec[1])
        if dt is None:
            raise ArtifactError(f"tensor {name}: dtype {spec[1]} cannot be stored; supported {list(NP_DTYPES)}")
        nbytes = int(np.prod(spec[0], dtype=np.int64)) * spec[1].itemsize
        tensor_table.append({"name": name, "dtype": dt, "shape": list(spec[0]), "layout": "row-major",
                             "offset": offset, "nbytes": nbytes, "sha256": "0" * 64})
        offset = _align(offset + nbytes)
    for name, data in blobs.items():
        blob_table.append({"name": name, "offset": offset, "nbytes": len(data),
                           "sha256": hashlib.sha256(data).hexdigest()})
        offset = _align(offset + len(data))
    full = dict(header)
    full.update({"format_version": FORMAT_VERSION, "ninferc_version": __version__, "payload_offset": 0,
                 "tensors": tensor_table, "blobs": blob_table})
    base = 0
    for _ in range(3):  # the payload offset's own digits can change the header length once
        full["payload_offset"] = base
        new_base = _align(_PREFIX.size + len(json.dumps(full, separators=(",", ":")).encode()))
        if new_base == base:
            break
        base = new_base
    _remove_stale_temps(path)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            ends = [e["offset"] + e["nbytes"] for e in tensor_table + blob_table]
            f.truncate(base + max(ends + [0]))  # no padding after the last payload
            names = list(tensors)
            it = names if progress is None else progress(names)
            for name, entry in zip(it, tensor_table):
                arr = tensors[name]
                arr = np.ascontiguousarray(arr() if callable(arr) else arr)
                buf = arr.tobytes()
                if len(buf) != entry["nbytes"]:
                    raise ArtifactError(f"tensor {name}: {len(buf)} bytes, expected {entry['nbytes']}")
                entry["sha256"] = hashlib.sha256(buf).hexdigest()
                f.seek(base + entry["offset"])
                f.write(buf)
            for (name, data), entry in zip(blobs.items(), blob_table):
                f.seek(base + entry["offset"])
                f.write(data)
            hdr = json.dumps(full, separators=(",", ":")).encode()
            assert _align(_PREFIX.size + len(hdr)) == base
            f.seek(0)
            f.write(_PREFIX.pack(MAGIC, CONTAINER_VERSION, 0, len(hdr), hashlib.sha256(hdr).digest()))
            f.write(hdr)
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the rename makes it the artifact
        os.replace(tmp, path)
        try:  # and the rename itself
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:  # a filesystem that cannot fsync a directory: the rename is still atomic
            pass
    except OSError as exc:  # a full disk, a quota, an I/O error: named, and nothing is left at the path
        raise ArtifactError(f"{path}: cannot write the artifact ({exc.strerror or exc}; it takes {offset + base:,} "
                            f"bytes); nothing was written at {path}") from None
    finally:
        if tmp.exists():
            tmp.unlink()


def _remove_stale_temps(path: Path) -> None:
    """Delete ``<path>.tmp<pid>`` files left by writers that were killed (their process no longer exists)."""
    for t in path.parent.glob(path.name + ".tmp*"):
        pid = t.name[len(path.name) + 4:]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            try:
                t.unlink()
            except OSError:
                pass
        except OSError:  # alive, owned by someone else
            pass


def _specs(tensors: Mapping) -> dict:
    """name -> (shape, dtype) without materialising callables' arrays twice: callables must expose
    ``.shape``/``.dtype`` attributes (see :class:`LazyTensor`)."""
    out = {}
    for name, arr in tensors.items():
        if callable(arr) and not isinstance(arr, np.ndarray):
            out[name] = (tuple(arr.shape), np.dtype(arr.dtype))
        else:
            a = np.asarray(arr)
            out[name] = (a.shape, a.dtype)
    return out


class LazyTensor:
    """A tensor produced on demand: ``shape``/``dtype`` known up front, data from ``fn()`` when written."""

    def __init__(self, shape, dtype, fn: Callable[[], np.ndarray]):
        self.shape, self.dtype, self.fn = tuple(shape), np.dtype(dtype), fn

    def __call__(self) -> np.ndarray:
        a = self.fn()
        if tuple(a.shape) != self.shape or a.dtype != self.dtype:
            raise ArtifactError(f"lazy tensor produced {a.shape} {a.dtype}, declared {self.shape} {self.dtype}")
        return a


class Artifact:
    """An opened `.ninfer` file (header parsed and checked; payloads mmapped, read on demand).

    Raises (from :meth:`open`):
        ArtifactError: missing file (or a directory), bad magic, unknown container/format version (names what
            was found and what is supported), a header checksum mismatch, a header that is not a JSON object or
            lacks a well-formed payload table (payload_offset, tensors, blobs), a truncated file (header or
            payloads extend past the end), or a header that fails :mod:`ninferc.artifact_schema`'s checks (its
            shape, its payload table, and its graph, tensors and kernels against what this ninferc builds).
    """

    def __init__(self, path: Path, header: dict, mm: mmap.mmap):
        self.path, self.header, self._mm = path, header, mm
        self._tensors = {t["name"]: t for t in header["tensors"]}
        self._blobs = {b["name"]: b for b in header["blobs"]}
        self._verified: set[str] = set()
        self._base = header["payload_offset"]

    @classmethod
    def open(cls, path: str | Path, *, model: bool = True) -> "Artifact":
        """Open and check an artifact (see class docstring for the errors raised); ``model`` False checks the
        container only (a `.ninfer` that holds no model)."""
        from ninferc.errors import path_problem

        path = Path(path)
        why = path_problem(path, "a .ninfer artifact file")
        if why:
            raise ArtifactError(why)
        if path.is_dir():
            raise ArtifactError(f"{path}: a directory, not a .ninfer artifact file (a checkpoint directory is "
                                "compiled first: ninferc compile MODEL_DIR --target ... -o model.ninfer)")
        if not path.is_file():
            raise ArtifactError(f"{path}: no such artifact file")
        version = read_container_version(path)
        if version != CONTAINER_VERSION:
            raise ArtifactError(
                f"{path}: container version {version} is not supported by ninferc {__version__} "
                f"(supported: {CONTAINER_VERSION}); recompile the model with this ninferc or upgrade ninferc")
        size = path.stat().st_size
        with open(path, "rb") as f:
            prefix = f.read(_PREFIX.size)
            if len(prefix) < _PREFIX.size:
                raise ArtifactError(f"{path}: truncated inside the fixed prefix ({len(prefix)} of {_PREFIX.size} bytes)")
            _, _, _, hlen, hsha = _PREFIX.unpack(prefix)
            if hlen > size - _PREFIX.size:  # (a corrupt length must not become a huge read)
                raise ArtifactError(f"{path}: truncated inside the header (it declares {hlen} bytes, the file has "
                                    f"{size - _PREFIX.size} after the prefix)")
            from ninferc.artifact_schema import MAX_HEADER_BYTES

            if hlen > MAX_HEADER_BYTES:
                raise ArtifactError(f"{path}: the header declares {hlen} bytes, more than the {MAX_HEADER_BYTES} any "
                                    "ninferc header takes (file corrupt)")
            hdr = f.read(hlen)
        if len(hdr) != hlen:
            raise ArtifactError(f"{path}: truncated inside the header ({len(hdr)} of {hlen} bytes)")
        if hashlib.sha256(hdr).digest() != hsha:
            raise ArtifactError(f"{path}: header checksum mismatch (file corrupt)")

        def mapped():
            with open(path, "rb") as f:
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

        return cls.from_header_bytes(path, hdr, size, mapped, model=model)

    @classmethod
    def from_header_bytes(cls, path: Path, hdr: bytes, size: int, mapped: Callable[[], mmap.mmap], *,
                          model: bool = True) -> "Artifact":
        """The checks of :meth:`open` after the checksum, on the header bytes ``hdr`` of a file of ``size`` bytes
        whose payloads ``mapped()`` maps (the fuzzer calls this with edited headers over one file's payloads).

        Raises:
            ArtifactError: as :meth:`open`.
        """
        try:
            header = json.loads(hdr)
        except json.JSONDecodeError as exc:
            raise ArtifactError(f"{path}: header is not valid JSON ({exc})") from None
        if not isinstance(header, dict):
            raise ArtifactError(f"{path}: header is a JSON {type(header).__name__}, not an object (file corrupt)")
        fv = header.get("format_version")
        if fv != FORMAT_VERSION:
            raise ArtifactError(f"{path}: format version {fv!r} is not supported (supported: {FORMAT_VERSION})")
        try:
            end = header["payload_offset"] + max(
                [t["offset"] + t["nbytes"] for t in header["tensors"]]
                + [b["offset"] + b["nbytes"] for b in header["blobs"]] + [0])
        except (KeyError, TypeError, IndexError) as exc:
            raise ArtifactError(f"{path}: the header's payload table is missing or malformed ({type(exc).__name__}: "
                                f"{exc}; file corrupt, or not written by ninferc)") from None
        if not isinstance(end, int) or size < end:
            raise ArtifactError(f"{path}: truncated: payloads end at byte {end} but the file has {size} bytes")
        if size > end:  # the writer ends the file at its last payload (write_artifact: no padding after it)
            raise ArtifactError(f"{path}: {size - end:,} bytes follow the last payload (it ends at byte {end:,}, the file "
                                f"has {size:,}): something was appended to the artifact, or it is not one file")
        from ninferc.artifact_schema import validate_header

        header = validate_header(path, header, header_end=_PREFIX.size + len(hdr), file_size=size, model=model)
        return cls(path, header, mapped())

    # ---- accessors -------------------------------------------------------------------------------
    @property
    def config(self):
        """The model's :class:`~ninferc.ir.config.ModelConfig`."""
        from ninferc.ir.config import ModelConfig

        return ModelConfig.from_dict(self.header["model"])

    def graph(self):
        """The compiled IR graph (:class:`~ninferc.ir.graph.Graph`)."""
        from ninferc.ir.graph import Graph

        return Graph.from_json(self.header["graph"])

    def mtp_graph(self):
        """The MTP head's IR graph (:func:`ninferc.ir.qwen3_5.build_mtp_graph`, formatted by the artifact's weight
        recipe), or None when the model was compiled without one. Its weights are among :meth:`weights`."""
        from ninferc.ir.graph import Graph

        g = self.header.get("mtp_graph")
        return None if g is None else Graph.from_json(g)

    def tensor_names(self) -> list[str]:
        """Names of the stored tensors, in file order."""
        return list(self._tensors)

    def tensor(self, name: str, *, verify: bool = True) -> np.ndarray:
        """A read-only zero-copy view of tensor ``name`` (sha256 checked on first access).

        Raises:
            KeyError: unknown tensor.
            ArtifactError: checksum mismatch (names the tensor).
        """
        t = self._tensors[name]
        start = self._base + t["offset"]
        buf = memoryview(self._mm)[start:start + t["nbytes"]]
        if verify and name not in self._verified:
            h = hashlib.sha256(buf).hexdigest()
            if h != t["sha256"]:
                raise ArtifactError(f"{self.path}: tensor {name!r} is corrupt: sha256 {h[:16]}… != recorded "
                                    f"{t['sha256'][:16]}…")
            self._verified.add(name)
        return np.frombuffer(buf, dtype=NP_DTYPES[t["dtype"]]).reshape(t["shape"])

    def blob(self, name: str) -> bytes:
        """A payload blob (kernel source, tokenizer file), checksum verified.

        Raises:
            KeyError: unknown blob.  ArtifactError: checksum mismatch.
        """
        b = self._blobs[name]
        start = self._base + b["offset"]
        data = bytes(self._mm[start:start + b["nbytes"]])
        if hashlib.sha256(data).hexdigest() != b["sha256"]:
            raise ArtifactError(f"{self.path}: blob {name!r} is corrupt (sha256 mismatch)")
        return data

    def has_blob(self, name: str) -> bool:
        """Whether a payload blob (kernel source, tokenizer file) named ``name`` is stored."""
        return name in self._blobs

    def weights(self) -> "ArtifactWeights":
        """Mapping graph param name -> array, for the reference executor / runtime upload."""
        return ArtifactWeights(self)

    def tokenizer(self):
        """The embedded tokenizer (:class:`ninferc.tokenizer.Tokenizer`)."""
        from ninferc.tokenizer import Tokenizer

        cfg = json.loads(self.blob("tokenizer_config.json")) if self.has_blob("tokenizer_config.json") else None
        ct = self.blob("chat_template.jinja").decode() if self.has_blob("chat_template.jinja") else None
        return Tokenizer(self.blob("tokenizer.json").decode(), cfg, ct)

    def verify_all(self) -> None:
        """Check every tensor's and blob's sha256 (reads the whole file)."""
        for n in self._tensors:
            self.tensor(n)
        for n in self._blobs:
            self.blob(n)


class ArtifactWeights(Mapping):
    """Read-only mapping over an artifact's tensors (verified on first access)."""

    def __init__(self, art: Artifact):
        self.art = art

    def __getitem__(self, name):
        return self.art.tensor(name)

    def __iter__(self):
        return iter(self.art.tensor_names())

    def __len__(self):
        return len(self.art.tensor_names())

    def __contains__(self, name):
        return name in self.art._tensors


def _count(v) -> str:
    """An int with thousands separators, anything else (a missing header field) as '?'."""
    return f"{v:,}" if isinstance(v, int) else "?"


def describe_artifact(path: str | Path) -> list[str]:
    """Lines for `ninferc inspect FILE.ninfer`: header, plan summary and tensors by dtype."""
    art = Artifact.open(path)
    h = art.header
    tgt = h.get("target", {})
    comp = h.get("compile", {})
    by_dtype: dict[str, int] = {}
    for t in h["tensors"]:
        by_dtype[t["dtype"]] = by_dtype.get(t["dtype"], 0) + t["nbytes"]
    mtp = art.mtp_graph()
    model_params = set(art.graph().params)
    mtp_bytes = sum(p.nbytes for n, p in mtp.params.items() if n not in model_params) if mtp is not None else 0
    lines = [
        f"artifact: {path} (container v{CONTAINER_VERSION}, format v{h['format_version']}, "
        f"built by ninferc {h['ninferc_version']})",
        f"model: {h['model'].get('name', '?')}: {h['model']['num_hidden_layers']} layers, hidden {h['model']['hidden_size']}",
        f"target: {tgt.get('arch')} sku {tgt.get('sku') or '-'} ({tgt.get('sms')} SMs)",
        f"tensors: {len(h['tensors'])}, " + ", ".join(f"{k} {v:,} bytes" for k, v in sorted(by_dtype.items())),
        f"weights: {h.get('compile', {}).get('weights', 'bf16')}, KV cache {h.get('compile', {}).get('kv_dtype', 'bf16')}; "
        "bytes by format: " + ", ".join(f"{k} {v:,}" for k, v in art.graph().bytes_by_format().items())
        + (f" (the model; its MTP head {mtp_bytes:,} more)" if mtp_bytes else ""),
        f"compiled for: max context {_count(comp.get('max_context'))} tokens (run --max-context's default), "
        f"KV page {_count(comp.get('page_size'))} tokens",
        f"kernels: {len(h.get('kernels', []))}; launches planned: {len(h.get('plan', {}).get('kernels', []))}",
        f"blobs: {', '.join(b['name'] for b in h['blobs'][:6])}{' …' if len(h['blobs']) > 6 else ''}",
    ]
    return lines
