"""Compile rendered CUDA C to cubin (and PTX) with NVRTC from the pip wheels, with a disk cache.

No GPU or driver is needed: ``cuda.bindings.nvrtc`` loads the wheel's ``libnvrtc`` and compiles for any
``-arch=sm_XX`` it supports (measured: sm_86, sm_89, sm_90, sm_120a; ../shared/notes/cubin-resources.md).
The runtime reuses :func:`compile_cubin` on the device, with the device's NVRTC and exactly the options
recorded in the plan (:data:`DEFAULT_OPTIONS` unless a plan says otherwise), so the cubin it loads is
compiled the way the plan's resource figures were measured.

Cache (modelled on CuPy's ``_compiler_cache``): one file per (ninferc version, NVRTC version, arch,
options, source sha256) under ``$NINFERC_CACHE_DIR`` or ``~/.cache/ninferc``, written to a temporary
file and renamed into place (atomic on POSIX), payload sha256-checked on every read (a corrupt entry
is discarded and recompiled). ``NINFERC_REQUIRE_CACHE=1`` turns a miss into a :class:`CompileError`
(like tinygrad's ``ASSERT_COMPILE``): use it in the decode loop and in CI runs that must not compile.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ninferc import __version__ as NINFERC_VERSION
from ninferc.errors import CompileError

DEFAULT_OPTIONS: tuple[str, ...] = ("--std=c++17", "--ptxas-options=-v")
"""NVRTC options every ninferc kernel is compiled with, besides ``-arch``. ``--ptxas-options=-v`` only
adds ptxas' resource lines to the log (a free cross-check of the cubin reader); it does not change
code generation. Record these in the artifact; the runtime must compile with the same tuple."""

_ARCH_RE = re.compile(r"^sm_\d{2,3}[af]?$")

ARCH_SPECIFIC_MARKER = "#define NINFER_ARCH_SPECIFIC 1"
"""A rendered source containing this line uses arch-specific instructions (``wgmma``, ``setmaxnreg``: PTX ISA
"Architecture-specific features", targets ``sm_90a`` / ``sm_120a``) and is compiled for the arch-specific
variant of the target (:func:`nvrtc_arch`). Code for ``sm_XXa`` runs only on devices of exactly that compute
capability, which is what a ninferc target is anyway."""


def nvrtc_arch(source: str, arch: str) -> str:
    """The ``-arch`` NVRTC compiles ``source`` with for target ``arch``: ``arch`` itself, or its arch-specific
    variant (``sm_90`` -> ``sm_90a``; already-suffixed names unchanged) when the source carries
    :data:`ARCH_SPECIFIC_MARKER`."""
    if ARCH_SPECIFIC_MARKER in source and arch[-1] not in "af":
        return arch + "a"
    return arch
_CACHE_FORMAT = 1


@dataclass(frozen=True)
class CompileResult:
    """The outcome of one NVRTC compilation.

    Attributes:
        cubin: the ELF cubin (bytes), loadable with ``cuModuleLoadData`` / ``cupy.RawModule(path=)``.
        ptx: the PTX NVRTC produced on the way (str), or None if it could not be retrieved.
        log: NVRTC program log (str; with the default options it holds ptxas' resource lines).
        options: the exact option list given to NVRTC, ``-arch`` first (tuple of str).
        nvrtc_version: (major, minor) of the NVRTC that compiled it.
        arch: the ``-arch`` target (``"sm_89"``).
        name: program name given to NVRTC (the kernel URI, used in messages and file names).
        source_sha256: sha256 of the source compiled.
        cache_key: the disk-cache key (sha256 hex).
        from_cache: True when read from the disk cache.
    """

    cubin: bytes
    ptx: str | None
    log: str
    options: tuple[str, ...]
    nvrtc_version: tuple[int, int]
    arch: str
    name: str
    source_sha256: str
    cache_key: str
    from_cache: bool = field(default=False, compare=False)


# ------------------------------------------------------------------------------------------------
# NVRTC access (the only place that touches cuda.bindings.nvrtc)
# ------------------------------------------------------------------------------------------------


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise CompileError(
            "cuda.bindings.nvrtc is not importable: install the 'cuda-bindings' and "
            f"'nvidia-cuda-nvrtc' wheels ({exc})"
        ) from exc
    return nvrtc


def _check(nvrtc, result, what: str):
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC {what} failed: {err!r}")
    return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)


@lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library ``cuda.bindings`` loads (e.g. (13, 5))."""
    nvrtc = _nvrtc()
    major, minor = _check(nvrtc, nvrtc.nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


def nvrtc_compile(source: str, arch: str, name: str, options: tuple[str, ...]) -> tuple[bytes, str | None, str]:
    """Compile ``source`` with NVRTC for ``arch``; no cache, no GPU.

    Args:
        source: self-contained CUDA C source (no includes; see :mod:`ninferc.targets.render`).
        arch: ``"sm_86"``, ``"sm_89"``, ``"sm_90"``, ``"sm_120a"`` (any ``sm_XX[a]`` NVRTC accepts).
        name: program name (appears in NVRTC messages and the failure file name).
        options: NVRTC options without ``-arch``.

    Returns:
        (cubin bytes, PTX text or None, program log).

    Raises:
        CompileError: NVRTC rejected the source; the message carries the NVRTC log and the path where
            the source was written (``<cache dir>/failed/<name>-<hash>.cu``).
    """
    if not _ARCH_RE.match(arch):
        raise CompileError(f"{name}: invalid NVRTC arch {arch!r}; expected sm_XX or sm_XXa (e.g. sm_120a)")
    nvrtc = _nvrtc()
    prog = _check(nvrtc, nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        opts = [f"-arch={arch}".encode()] + [o.encode() for o in options]
        err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
        size = _check(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.rstrip(b"\x00").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            path = _write_failed_source(source, name, log)
            raise CompileError(
                _resource_summary(log, name, arch)
                + f"NVRTC {nvrtc_version()[0]}.{nvrtc_version()[1]} failed to compile {name} for {arch} "
                f"({err!r}); rendered source written to {path}\n{log.strip()}"
            )
        size = _check(nvrtc, nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        ptx = None
        res = nvrtc.nvrtcGetPTXSize(prog)
        if res[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS:
            pbuf = b" " * res[1]
            if nvrtc.nvrtcGetPTX(prog, pbuf)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS:
                ptx = pbuf.rstrip(b"\x00").decode(errors="replace")
        return bytes(cubin), ptx, log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


_SHARED_OVER = re.compile(r"uses too much shared data \((0x[0-9a-fA-F]+) bytes, (0x[0-9a-fA-F]+) max\)")


def _resource_summary(log: str, name: str, arch: str) -> str:
    """A first line in words for a compile that failed on a resource limit ptxas reports (its log's own numbers):
    static shared memory over the per-kernel maximum, which a specialisation parameter in the kernel's name (a KV
    page size, a tile) sets; "" for any other failure."""
    m = _SHARED_OVER.search(log)
    if m is None:
        return ""
    used, cap = int(m.group(1), 16), int(m.group(2), 16)
    return (f"{name} declares {used:,} B of static shared memory, over the {cap:,} B a kernel may declare on {arch} "
            "(ptxas); the parameters in its name set that size (e.g. a smaller --page-size or tile fits).\n")


# ------------------------------------------------------------------------------------------------
# disk cache
# ------------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """The compile-cache root: ``$NINFERC_CACHE_DIR`` or ``~/.cache/ninferc`` (not created here)."""
    env = os.environ.get("NINFERC_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ninferc"


def require_cache() -> bool:
    """True when ``NINFERC_REQUIRE_CACHE`` is set to a true value (1/true/yes)."""
    return os.environ.get("NINFERC_REQUIRE_CACHE", "").strip().lower() in ("1", "true", "yes")


def cache_key(source: str, arch: str, options: tuple[str, ...], version: tuple[int, int] | None = None) -> str:
    """sha256 hex key over (ninferc version, NVRTC version, arch, options, source sha256)."""
    version = version or nvrtc_version()
    blob = json.dumps(
        {
            "format": _CACHE_FORMAT,
            "ninferc": NINFERC_VERSION,
            "nvrtc": list(version),
            "arch": arch,
            "options": list(options),
            "source": hashlib.sha256(source.encode()).hexdigest(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _entry_path(root: Path, key: str) -> Path:
    return root / "cubin" / key[:2] / f"{key}.bin"


def _write_failed_source(source: str, name: str, log: str) -> Path:
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    for root in (cache_dir(), Path(tempfile.gettempdir()) / "ninferc"):
        try:
            d = root / "failed"
            d.mkdir(parents=True, exist_ok=True)
            path = d / f"{safe}-{digest}.cu"
            path.write_text(source, encoding="utf-8")
            (d / f"{safe}-{digest}.log").write_text(log, encoding="utf-8")
            return path
        except OSError:
            continue
    return Path("<unwritable>")


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _store(path: Path, result: CompileResult) -> None:
    ptx = (result.ptx or "").encode()
    payload = result.cubin + ptx
    header = {
        "format": _CACHE_FORMAT,
        "name": result.name,
        "arch": result.arch,
        "options": list(result.options),
        "nvrtc": list(result.nvrtc_version),
        "source_sha256": result.source_sha256,
        "cubin_bytes": len(result.cubin),
        "ptx_bytes": len(ptx) if result.ptx is not None else -1,
        "log": result.log,
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    _atomic_write(path, json.dumps(header, sort_keys=True).encode() + b"\n" + payload)


def _load(path: Path, key: str) -> CompileResult | None:
    """Read and verify one cache entry; None (and the entry removed) when missing or corrupt."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        nl = data.index(b"\n")
        header = json.loads(data[:nl])
        payload = data[nl + 1:]
        if header.get("format") != _CACHE_FORMAT or hashlib.sha256(payload).hexdigest() != header["sha256"]:
            raise ValueError("checksum mismatch")
        n = header["cubin_bytes"]
        cubin, ptx_raw = payload[:n], payload[n:]
        if header["ptx_bytes"] != (len(ptx_raw) if header["ptx_bytes"] >= 0 else -1):
            raise ValueError("size mismatch")
    except (ValueError, KeyError, TypeError):
        try:
            path.unlink()
        except OSError:
            pass
        return None
    return CompileResult(
        cubin=cubin,
        ptx=ptx_raw.decode() if header["ptx_bytes"] >= 0 else None,
        log=header["log"],
        options=tuple(header["options"]),
        nvrtc_version=tuple(header["nvrtc"]),
        arch=header["arch"],
        name=header["name"],
        source_sha256=header["source_sha256"],
        cache_key=key,
        from_cache=True,
    )


def compile_cubin(
    source: str,
    arch: str,
    *,
    name: str,
    options: tuple[str, ...] = DEFAULT_OPTIONS,
    use_cache: bool = True,
) -> CompileResult:
    """Compile ``source`` to a cubin for ``arch`` through the disk cache.

    Args:
        source: self-contained CUDA C (from :func:`ninferc.targets.render.render_template`).
        arch: NVRTC target, ``"sm_86" | "sm_89" | "sm_90" | "sm_120a"`` (or the device's own arch); a source
            with :data:`ARCH_SPECIFIC_MARKER` is compiled for :func:`nvrtc_arch` (``sm_90`` -> ``sm_90a``) and
            the result's ``arch`` / ``options`` say so.
        name: program name, normally the kernel URI.
        options: NVRTC options besides ``-arch``; default :data:`DEFAULT_OPTIONS`.
        use_cache: read/write the disk cache (default True).

    Returns:
        :class:`CompileResult` (``options`` holds the full option list, ``-arch`` first).

    Raises:
        CompileError: NVRTC failure (log + rendered source path), or a cache miss while
            ``NINFERC_REQUIRE_CACHE=1`` (names kernel, arch, key and cache directory).
    """
    options = tuple(options)
    version = nvrtc_version()
    arch = nvrtc_arch(source, arch)
    key = cache_key(source, arch, options, version)
    path = _entry_path(cache_dir(), key)
    if use_cache:
        hit = _load(path, key)
        if hit is not None:
            return hit
    if require_cache():
        raise CompileError(
            f"compile cache miss for {name} ({arch}, NVRTC {version[0]}.{version[1]}, key {key[:16]}) in "
            f"{cache_dir()} while NINFERC_REQUIRE_CACHE=1"
        )
    cubin, ptx, log = nvrtc_compile(source, arch, name, options)
    result = CompileResult(
        cubin=cubin,
        ptx=ptx,
        log=log,
        options=(f"-arch={arch}",) + options,
        nvrtc_version=version,
        arch=arch,
        name=name,
        source_sha256=hashlib.sha256(source.encode()).hexdigest(),
        cache_key=key,
    )
    if use_cache:
        try:
            _store(path, result)
        except OSError:
            pass  # a read-only cache never blocks compilation
    return result
