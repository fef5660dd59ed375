"""Rendering (strict, headers inlined) and NVRTC compilation with the disk cache."""

import hashlib
import re

import pytest

from ninferc.errors import CompileError
from ninferc.targets import nvrtc
from ninferc.targets.nvrtc import DEFAULT_OPTIONS, cache_key, compile_cubin
from ninferc.targets.render import header_names, read_template_file, render_template, source_hash

SRC = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] += 1.0f; }\n'
PARAMS = dict(entry="g", threads=256, max_tokens=4, rows_per_warp=4, epilogue="store", mode="coop")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NINFERC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NINFERC_REQUIRE_CACHE", raising=False)
    return tmp_path / "cache"


def test_render_inlines_headers_and_is_strict():
    src = render_template("gemv_fma.cu.j2", PARAMS)
    assert not re.search(r"^\s*#\s*include", src, re.M)
    assert "namespace ninfer" in src and "begin ninfer_common.cuh" in src
    assert read_template_file("ninfer_common.cuh").split("#pragma once", 1)[1].strip()[:40] in src
    with pytest.raises(CompileError, match="undefined"):
        render_template("gemv_fma.cu.j2", {k: v for k, v in PARAMS.items() if k != "threads"})
    with pytest.raises(CompileError, match="no kernel template"):
        render_template("nope.cu.j2", PARAMS)
    assert "ninfer_common.cuh" in header_names()


def test_render_rejects_system_includes(tmp_path, monkeypatch):
    from ninferc.targets import render
    monkeypatch.setattr(render, "_load_template_text", lambda name: '#include <cuda_bf16.h>\nint x;\n')
    render._environment.cache_clear()
    try:
        with pytest.raises(CompileError, match="cuda_bf16.h.*not allowed"):
            render.render_template("x.cu.j2", {})
    finally:
        render._environment.cache_clear()


def test_source_hash_covers_headers(monkeypatch):
    from ninferc.targets import render
    before = source_hash(render_template("gemv_fma.cu.j2", PARAMS))
    real = render.read_template_file
    monkeypatch.setattr(render, "read_template_file",
                        lambda n: real(n) + "\n// changed\n" if n.endswith(".cuh") else real(n))
    assert source_hash(render_template("gemv_fma.cu.j2", PARAMS)) != before


def test_compile_records_options_version_ptx(cache):
    res = compile_cubin(SRC, "sm_120a", name="k")
    assert res.cubin[:4] == b"\x7fELF" and res.ptx and ".target sm_120a" in res.ptx
    assert res.options == ("-arch=sm_120a",) + DEFAULT_OPTIONS
    assert res.nvrtc_version == nvrtc.nvrtc_version() and not res.from_cache
    assert "Used" in res.log  # ptxas -v lines
    assert res.source_sha256 == hashlib.sha256(SRC.encode()).hexdigest()


def test_cache_hit_key_and_corruption(cache):
    first = compile_cubin(SRC, "sm_89", name="k")
    second = compile_cubin(SRC, "sm_89", name="k")
    assert second.from_cache and second.cubin == first.cubin and second.ptx == first.ptx
    assert first.cache_key == cache_key(SRC, "sm_89", DEFAULT_OPTIONS)
    assert cache_key(SRC, "sm_90", DEFAULT_OPTIONS) != first.cache_key
    assert cache_key(SRC, "sm_89", DEFAULT_OPTIONS + ("-lineinfo",)) != first.cache_key
    assert cache_key(SRC + " ", "sm_89", DEFAULT_OPTIONS) != first.cache_key
    assert cache_key(SRC, "sm_89", DEFAULT_OPTIONS, (12, 9)) != first.cache_key
    entries = list(cache.rglob("*.bin"))
    assert len(entries) == 1 and not list(cache.rglob("*.tmp"))
    data = bytearray(entries[0].read_bytes())
    data[-1] ^= 0xFF  # corrupt the payload: detected, discarded, recompiled
    entries[0].write_bytes(bytes(data))
    third = compile_cubin(SRC, "sm_89", name="k")
    assert not third.from_cache and third.cubin == first.cubin


def test_require_cache_turns_miss_into_error(cache, monkeypatch):
    monkeypatch.setenv("NINFERC_REQUIRE_CACHE", "1")
    with pytest.raises(CompileError, match="cache miss.*NINFERC_REQUIRE_CACHE"):
        compile_cubin(SRC, "sm_86", name="k")
    monkeypatch.delenv("NINFERC_REQUIRE_CACHE")
    compile_cubin(SRC, "sm_86", name="k")
    monkeypatch.setenv("NINFERC_REQUIRE_CACHE", "1")
    assert compile_cubin(SRC, "sm_86", name="k").from_cache


def test_compile_error_carries_log_and_source_path(cache):
    with pytest.raises(CompileError) as e:
        compile_cubin('extern "C" __global__ void k() { undeclared_thing(); }', "sm_90", name="broken")
    msg = str(e.value)
    assert "undeclared_thing" in msg and "sm_90" in msg
    path = msg.split("written to ")[1].split(maxsplit=1)[0].rstrip(";")
    assert "undeclared_thing" in open(path).read()


def test_invalid_arch(cache):
    with pytest.raises(CompileError, match="invalid NVRTC arch"):
        compile_cubin(SRC, "compute_90", name="k")


def test_static_shared_memory_over_the_limit_is_named_first(cache):
    """A kernel whose static shared memory is over the per-kernel maximum: the error's first line says so in words,
    with ptxas's own numbers (before 2026-12-06 only the raw log named it, after the NVRTC warnings)."""
    src = ('extern "C" __global__ void k(float* y) { __shared__ float s[16384]; s[threadIdx.x] = y[threadIdx.x]; '
           '__syncthreads(); y[threadIdx.x] = s[16383 - threadIdx.x]; }\n')
    with pytest.raises(CompileError) as got:
        compile_cubin(src, "sm_89", name="k")
    first = str(got.value).splitlines()[0]
    assert first == ("k declares 65,536 B of static shared memory, over the 49,152 B a kernel may declare on sm_89 "
                     "(ptxas); the parameters in its name set that size (e.g. a smaller --page-size or tile fits)."), first
