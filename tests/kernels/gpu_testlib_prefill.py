"""Helpers shared by the GPU twins of the gemm / elementwise / sample families (test_*_gpu.py).

Kernels are compiled for the running device with ninferc.targets.nvrtc and loaded as that exact cubin by
:class:`ninferc.runtime.kernels.DeviceKernel`; plans come from the family's own ``launch`` on a
:class:`PlanContext` built from the device's arch, SM count and the cubins' resources. Random bf16 data is
generated on the device (round-to-nearest-even from fp32). :func:`check` applies a named tolerance from
``ninferc.ir.tolerances`` to the whole output and, so a wrong edge fragment cannot hide in a global norm,
to every row (and every column when there are enough rows), and prints where the largest error is.
"""

from __future__ import annotations

import functools

import numpy as np

import cupy as cp

from ninferc.runtime.kernels import DeviceKernel, device_arch, device_sm_count
from ninferc.targets.plan import PlanContext, compile_variants

BF16_NAN = 0xFFFF  # poison for bf16 outputs (a NaN)


@functools.lru_cache(maxsize=None)
def _kernel(spec) -> DeviceKernel:
    return DeviceKernel.from_spec(spec)


def kernel(spec) -> DeviceKernel:
    """The spec compiled for this device and loaded (cached per spec)."""
    return _kernel(spec)


def device_ctx(specs, sms: int | None = None) -> PlanContext:
    """PlanContext for this device (or a smaller SM count) with the resources of ``specs``' cubins."""
    arch = device_arch()
    res = {uri: r for uri, (_, r) in compile_variants(list(specs), arch).items()}
    return PlanContext(arch, sms or device_sm_count(), res)


def launch(ln, args) -> None:
    """Launch a plan :class:`Launch` with ``args`` and wait for it."""
    kernel(ln.kernel).launch(ln.grid, ln.block, args, smem=ln.dynamic_smem_bytes, cooperative=ln.cooperative)
    cp.cuda.get_current_stream().synchronize()


def f32_to_bf16_bits(f):
    """cupy fp32 -> bf16 bits (uint16), round to nearest even (finite inputs)."""
    u = cp.ascontiguousarray(f, dtype=cp.float32).view(cp.uint32)
    return ((u + cp.uint32(0x7FFF) + ((u >> 16) & cp.uint32(1))) >> 16).astype(cp.uint16)


def bf16_bits_to_f32(b):
    """cupy bf16 bits (uint16) -> fp32 (exact)."""
    return (cp.asarray(b).astype(cp.uint32) << 16).view(cp.float32)


def rand_bf16(shape, scale: float, seed: int):
    """(bits uint16, values float64) of random normal * scale rounded to bf16, on the device."""
    rs = cp.random.RandomState(seed)
    bits = f32_to_bf16_bits(rs.standard_normal(shape, dtype=cp.float32) * cp.float32(scale))
    return bits, bf16_bits_to_f32(bits).astype(cp.float64)


def _where(err):
    i = int(cp.argmax(err))
    return np.unravel_index(i, err.shape), float(err.ravel()[i])


def check(out, ref, tol, what: str, *, rows: bool = True, cols: bool = False) -> None:
    """Assert ``out`` matches ``ref`` (cupy arrays, same shape) under the named tolerance ``tol``.

    Applied to the whole array, to each row (``rows``) and to each column (``cols``; use when there are
    enough rows for a column norm to be meaningful). Prints max-error location and value, the count of
    non-finite outputs (unwritten poison) and the worst row/column before failing.
    """
    out = cp.asarray(out, dtype=cp.float64)
    ref = cp.asarray(ref, dtype=cp.float64)
    assert out.shape == ref.shape, f"{what}: shape {out.shape} != {ref.shape}"
    bad = int((~cp.isfinite(out)).sum())
    err = cp.abs(cp.nan_to_num(out, nan=1e30, posinf=1e30, neginf=1e30) - ref)
    loc, emax = _where(err)
    diag = (f"{what}: max |err| {emax:.3g} at {loc} (out {float(out[loc]):.6g}, ref {float(ref[loc]):.6g}); "
            f"{bad} non-finite outputs")
    if bad:
        first = np.argwhere(cp.asnumpy(~cp.isfinite(out)))[:5].tolist()
        raise AssertionError(f"{diag}; first non-finite at {first}")
    msgs = []
    if tol.rel is not None and out.ndim == 2:
        den_r = cp.linalg.norm(ref, axis=1)
        num_r = cp.linalg.norm(out - ref, axis=1)
        if rows:
            rel_r = num_r / cp.maximum(den_r, 1e-30)
            r = int(cp.argmax(rel_r))
            if float(rel_r[r]) > tol.rel:
                msgs.append(f"row {r} rel err {float(rel_r[r]):.3g} > {tol.name}.rel {tol.rel:g}")
        if cols and out.shape[0] >= 64:
            rel_c = cp.linalg.norm(out - ref, axis=0) / cp.maximum(cp.linalg.norm(ref, axis=0), 1e-30)
            c = int(cp.argmax(rel_c))
            if float(rel_c[c]) > tol.rel:
                msgs.append(f"column {c} rel err {float(rel_c[c]):.3g} > {tol.name}.rel {tol.rel:g}")
    if msgs:
        raise AssertionError(diag + "; " + "; ".join(msgs))
    try:
        tol.check(cp.asnumpy(out), cp.asnumpy(ref), what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {diag}") from None
