"""The schema of a `.ninfer` header, and the consistency checks :meth:`ninferc.artifact.Artifact.open` makes.

A header that passed its checksum can still come from another writer or an edit: every malformed one must be one
:class:`~ninferc.errors.ArtifactError` naming the field, and an inconsistent one must never run. Checked here:

1. **Shape** (pydantic models, unknown keys refused): versions, the payload tables (name, dtype, shape, offset,
   byte count, sha256), target, compile options, kernels, and that ``model`` / ``graph`` / ``plan`` are objects.
2. **Payload table**: unique names; ``nbytes`` equal to the shape x the dtype's size; every payload 4096-aligned,
   inside the file and not overlapping another; ``payload_offset`` aligned and after the header.
3. **Meaning**: ``model`` is a valid model config; ``graph`` (and ``mtp_graph``) equal the graphs this ninferc
   builds from that config and the compile options (``weights``, ``kv_dtype``) -- so an edited op attribute, a
   relabelled config value or another version's pass pipeline is refused, not run; the tensor table holds exactly
   the storage tensors of the graphs' params with their dtypes and shapes, in the graphs' parameter order at
   increasing offsets (as ninferc writes them: names swapped between same-shape tensors break it); the NVRTC
   options are ninferc's; every
   kernel's source blob exists with the recorded sha256; ``tokenizer.json`` is there.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ninferc.errors import ArtifactError, NinfercError

#: largest header accepted (bytes): the 27B preset's header is a few MB; a corrupt length field must not become a
#: multi-gigabyte read
MAX_HEADER_BYTES = 256 << 20
_DTYPES = ("bf16", "f32", "f16", "i8", "u8", "i32")
_SHA = r"^[0-9a-f]{64}$"


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TensorEntry(_M):
    name: str = Field(min_length=1, max_length=512)
    dtype: Literal[_DTYPES]
    shape: list[int] = Field(max_length=8)
    layout: Literal["row-major"] = "row-major"
    offset: int = Field(ge=0)
    nbytes: int = Field(ge=0)
    sha256: str = Field(pattern=_SHA)


class BlobEntry(_M):
    name: str = Field(min_length=1, max_length=512)
    offset: int = Field(ge=0)
    nbytes: int = Field(ge=0)
    sha256: str = Field(pattern=_SHA)


class TargetInfo(_M):
    arch: str
    sku: str | None = None
    sms: int = Field(ge=1, le=100_000)


class CompileInfo(_M):
    max_context: int = Field(ge=1, le=1 << 24)
    page_size: int = Field(ge=1, le=1 << 16)
    options: list[str]
    weights: str
    kv_dtype: Literal["bf16", "int8"]
    nvrtc: str


class KernelEntry(_M):
    uri: str
    family: str
    template: str
    entry: str
    params: list[Any]
    threads: int = Field(ge=1, le=1024)
    cooperative: bool
    source_sha256: str = Field(pattern=_SHA)
    source_blob: str
    resources: dict[str, Any]


class Header(_M):
    format_version: int
    ninferc_version: str
    payload_offset: int = Field(ge=0)
    model: dict[str, Any]
    target: TargetInfo
    compile: CompileInfo
    graph: dict[str, Any]
    plan: dict[str, Any]
    kernels: list[KernelEntry] = Field(max_length=100_000)
    tensors: list[TensorEntry] = Field(max_length=1_000_000)
    blobs: list[BlobEntry] = Field(max_length=100_000)
    mtp_graph: dict[str, Any] | None = None


def _field(exc: ValidationError) -> str:
    e = exc.errors()[0]
    loc = ".".join(str(x) for x in e.get("loc", ()))
    return f"field {loc!r}: {e.get('msg')}"


class _Payloads(BaseModel):
    """The container part of a header (what any `.ninfer` holds, model or not)."""

    model_config = ConfigDict(extra="allow")
    payload_offset: int = Field(ge=0)
    tensors: list[TensorEntry] = Field(max_length=1_000_000)
    blobs: list[BlobEntry] = Field(max_length=100_000)


def validate_header(path, header: dict, *, header_end: int, file_size: int, model: bool = True) -> dict:
    """The checks of the module docstring, in order (``model`` False: the container's only, items 1-2 for the
    payload table -- a `.ninfer` that holds no model, as the container's own tests write).

    Args:
        path: the artifact (for messages). header: the parsed header. header_end: the byte after the header.
        file_size: the file's size in bytes.

    Returns:
        the header with its payload tables as validated (integers as integers), for the reader to use.

    Raises:
        ArtifactError: the first problem found, naming the field (or tensor / blob) and the value.
    """
    from ninferc.artifact import ALIGN, NP_DTYPES

    def bad(msg: str):
        raise ArtifactError(f"{path}: {msg} (file corrupt, edited, or not written by this ninferc)")

    try:
        h = (Header if model else _Payloads).model_validate(header)
    except ValidationError as exc:
        bad(f"the header's {_field(exc)}")
    if h.payload_offset % ALIGN or h.payload_offset < header_end:
        bad(f"payload_offset {h.payload_offset} is not a multiple of {ALIGN} after the header (which ends at "
            f"byte {header_end})")
    spans = []
    for kind, entries in (("tensor", h.tensors), ("blob", h.blobs)):
        seen = set()
        for e in entries:
            if e.name in seen:
                bad(f"{kind} {e.name!r} is listed twice")
            seen.add(e.name)
            if e.offset % ALIGN:
                bad(f"{kind} {e.name!r}: offset {e.offset} is not a multiple of {ALIGN}")
            if kind == "tensor":
                n = np.dtype(NP_DTYPES[e.dtype]).itemsize
                for d in e.shape:
                    if d < 0:
                        bad(f"tensor {e.name!r}: negative dimension in shape {e.shape}")
                    n *= d
                if n != e.nbytes:
                    bad(f"tensor {e.name!r}: {e.nbytes} bytes recorded, but shape {e.shape} of {e.dtype} is {n}")
            end = h.payload_offset + e.offset + e.nbytes
            if end > file_size:
                bad(f"{kind} {e.name!r} ends at byte {end}, past the end of the file ({file_size} bytes)")
            spans.append((e.offset, e.offset + e.nbytes, f"{kind} {e.name!r}"))
    _check_spans(spans, bad)
    if model:
        _check_meaning(h, header, bad)
    out = dict(header)
    out["payload_offset"] = h.payload_offset
    out["tensors"] = [e.model_dump() for e in h.tensors]
    out["blobs"] = [e.model_dump() for e in h.blobs]
    return out


def _check_spans(spans: list, bad) -> None:
    """No payload overlaps another (``spans``: (start, end, what) relative to the payload offset)."""
    spans.sort()
    reach, owner = 0, None  # the furthest end so far, and whose
    for b0, b1, bn in spans:
        if b1 > b0 and b0 < reach:
            bad(f"{bn} overlaps {owner} (its bytes {b0}..{b1} of the payloads start before {reach})")
        if b1 > reach:
            reach, owner = b1, bn


def _check_meaning(h: Header, header: dict, bad) -> None:
    from ninferc.ir.config import ModelConfig
    from ninferc.ir.graph import Graph
    from ninferc.ir.passes import run_pipeline
    from ninferc.ir.qwen3_5 import build_graph, build_mtp_graph
    from ninferc.targets.nvrtc import DEFAULT_OPTIONS

    try:
        cfg = ModelConfig.from_dict(h.model)
    except (NinfercError, TypeError, ValueError, KeyError) as exc:
        bad(f"the header's field 'model' is not a valid model config ({type(exc).__name__}: {exc})")
    if tuple(h.compile.options) != tuple(DEFAULT_OPTIONS):
        bad(f"compile.options {h.compile.options} are not the NVRTC options this ninferc compiles with "
            f"({list(DEFAULT_OPTIONS)})")
    try:
        want = run_pipeline(build_graph(cfg, lm_rows="last"), weights=h.compile.weights, kv_dtype=h.compile.kv_dtype)
        want_mtp = (run_pipeline(build_mtp_graph(cfg, lm_rows="last"), weights=h.compile.weights,
                                 kv_dtype=h.compile.kv_dtype) if cfg.mtp_num_hidden_layers else None)
    except (NinfercError, ValueError, KeyError, TypeError) as exc:
        bad(f"the header's model / compile fields do not build a graph ({type(exc).__name__}: {exc})")
    if _canon(header["graph"]) != _canon(want.to_json()):
        bad("the header's field 'graph' differs from the graph this ninferc builds from the header's model and "
            "compile options (recompile the model with this ninferc)")
    got_mtp = header.get("mtp_graph")
    if got_mtp is not None and (want_mtp is None or _canon(got_mtp) != _canon(want_mtp.to_json())):
        bad("the header's field 'mtp_graph' differs from the MTP graph this ninferc builds from the header's model")
    graphs = [Graph.from_json(header["graph"])] + ([Graph.from_json(got_mtp)] if got_mtp is not None else [])
    storage = {}
    for g in graphs:
        for spec in g.params.values():
            for name, shape, dtype in spec.storage():
                storage[name] = (list(shape), dtype)
    table = {t.name: t for t in h.tensors}
    missing = sorted(set(storage) - set(table))
    extra = sorted(set(table) - set(storage))
    if missing or extra:
        bad(f"the tensor table does not match the graph's params: missing {missing[:5]}, unexpected {extra[:5]}")
    for name, (shape, dtype) in storage.items():
        t = table[name]
        if t.shape != shape or t.dtype != dtype:
            bad(f"tensor {name!r} is recorded as {t.dtype} {t.shape}; the graph's param is {dtype} {shape}")
    # ninferc writes the tensors in the graphs' parameter order at increasing offsets: two same-shape tensors whose
    # names were swapped, or an entry pointed at another's payload, break that order
    names = [t.name for t in h.tensors]
    order = list(storage)
    for i, (got, exp) in enumerate(zip(names, order)):
        if got != exp:
            bad(f"tensor table entry {i} is {got!r} where the graph's parameter order has {exp!r}")
    offsets = [t.offset for t in h.tensors]
    for i in range(1, len(offsets)):
        if offsets[i] <= offsets[i - 1]:
            bad(f"tensor {names[i]!r} is stored at offset {offsets[i]}, not after {names[i - 1]!r} ({offsets[i - 1]})")
    blobs = {b.name: b for b in h.blobs}
    if "tokenizer.json" not in blobs:
        bad("no tokenizer.json blob")
    for k in h.kernels:
        b = blobs.get(k.source_blob)
        if b is None or b.sha256 != k.source_sha256:
            bad(f"kernel {k.uri}: its source blob {k.source_blob!r} is {'missing' if b is None else 'not the one '}"
                f"{'' if b is None else 'recorded (sha256 differs)'}")


def _canon(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))
