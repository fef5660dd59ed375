"""Host-side pieces of the GEMV: the kernel argument tuple (:func:`kernel_args`) and the numpy reference
(:func:`reference`, with :func:`dequantize_weight` and :func:`norm_input`), fp32 math on bf16 values."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ninferc.errors import PlanError
from ninferc.ir.quant import QuantTensor
from ninferc.targets.kernels.gemv.dp import dp_x
from ninferc.targets.kernels.gemv.problem import GemvProblem
from ninferc.targets.plan import Launch


def kernel_args(problem: GemvProblem, launch: Launch, w, x, y, ws=None, barrier=None, scales=None,
                norm_w=None, xs=None, ss_out=None, ss_in=None, ss_parts=None, in_eps=None) -> tuple:
    """Kernel argument tuple in :meth:`GemvFamily.arg_names` order: bf16 ``w, x, y, ws, barrier, k,
    n_out, t_total, splits``; w8 / w4 ``w, scales, x, y, ...`` (``scales`` right after ``w``).

    Pointers are passed through (device arrays); an unused ``ws``/``barrier`` (plain route) becomes a
    64-bit null (``np.uint64(0)``, pointer-sized). Sizes become ``np.int32``. ``y`` is the residual stream
    for residual_add / add_norm_parts. add_norm_parts appends ``norm_w, xs, ss_out``; in_norm parts appends
    ``ss_in, ss_parts`` (int32), ``in_eps`` (float32).

    Raises:
        PlanError: ``scales`` missing for a w8 / w4 problem, or given for a bf16 one; a norm argument missing.
    """
    null = np.uint64(0)
    if problem.quantized and scales is None:
        raise PlanError(f"gemv: a {problem.wfmt} problem needs its scales")
    if not problem.quantized and scales is not None:
        raise PlanError("gemv: a bf16 problem takes no scales")
    head = (w, scales) if problem.quantized else (w,)
    args = (*head, x, y, ws if ws is not None else null, barrier if barrier is not None else null,
            np.int32(problem.k), np.int32(problem.n), np.int32(launch.tokens), np.int32(launch.split_k))
    if problem.norm_out:
        if norm_w is None or xs is None or ss_out is None:
            raise PlanError("gemv: add_norm_parts needs norm_w, xs and ss_out")
        args += (norm_w, xs, ss_out)
    if problem.norm_in:
        if ss_in is None or ss_parts is None or in_eps is None:
            raise PlanError("gemv: in_norm parts needs ss_in, ss_parts and in_eps")
        args += (ss_in, np.int32(ss_parts), np.float32(in_eps))
    return args


def _f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)  # no copy when already fp32


def dequantize_weight(problem: GemvProblem, codes, scales) -> np.ndarray:
    """fp32 [w_rows, K] = ``fl32(q * scale)`` of a w8 / w4 weight, exactly :func:`ninferc.ir.quant.dequantize`.

    Args:
        codes: w8 int8 [w_rows, K]; w4 uint8 [w_rows, K/2] (packed nibbles, :func:`ninferc.ir.quant.pack_int4`).
        scales: fp32 — w8 [w_rows]; w4 [w_rows, K/64].

    Raises:
        PlanError: a bf16 problem, or codes / scales of the wrong shape or dtype (names expected and found).
    """
    if not problem.quantized:
        raise PlanError("gemv: dequantize_weight needs a w8 / w4 problem")
    want = problem.weight_shapes()
    codes, scales = np.asarray(codes), np.asarray(scales)
    got = {"w": (codes.shape, codes.dtype.name), "scales": (scales.shape, scales.dtype.name)}
    if got != want:
        raise PlanError(f"gemv reference ({problem.wfmt}, K={problem.k}, w_rows={problem.w_rows}): expected "
                        f"codes/scales {want}, got {got}")
    return QuantTensor(problem.wfmt, (problem.w_rows, problem.k), codes, scales).dequantize()


def norm_input(h, norm_w, unit_offset: bool):
    """What an add_norm_parts GEMV hands the next GEMV for the residual stream ``h`` (fp32 [T, D]) and the norm
    weight ``norm_w`` (fp32 [D]): ``(xs, ss)`` with ``xs = bf16(h * (1 + w))`` (``w`` if not unit_offset;
    ``ml_dtypes.bfloat16`` [T, D]) and ``ss`` = fp32 [T, 1], the sum of ``h^2`` (one part)."""
    h = _f32(h)
    scale = (np.float32(1) + _f32(norm_w)) if unit_offset else _f32(norm_w)
    xs = (h * scale).astype(ml_dtypes.bfloat16)
    return xs, np.sum(h * h, axis=-1, keepdims=True, dtype=np.float32)


def reference(problem: GemvProblem, x, w, y_in=None, scales=None, norm_w=None, ss_in=None, in_eps=None,
              dp: bool = False):
    """Reference output of the GEMV + epilogue.

    Args:
        problem: the instance.
        x: [T, K] bf16 (``ml_dtypes.bfloat16``) or any float array holding bf16 values.
        w: bf16: [w_rows, K] same as x; w8 / w4: the codes (int8 [w_rows, K] / uint8 [w_rows, K/2]),
            dequantised with ``scales`` by :func:`dequantize_weight` (``fl32(q * scale)``).
        y_in: [T, N] fp32 residual stream (``residual_add`` / ``add_norm_parts``).
        scales: w8 / w4 only: fp32 [w_rows] / [w_rows, K/64].
        norm_w: add_norm_parts only: fp32 [N] weight of the norm that follows.
        ss_in, in_eps: in_norm parts only: fp32 [T, parts] partial sums of squares (any number of parts) and eps:
            ``acc[t] *= 1 / sqrt(sum(ss_in[t]) / K + in_eps)``.
        dp: the launch is a dp (integer dot product) variant: x is first rounded as its staging rounds it
            (:func:`dp_x`).

    Returns:
        [T, N]: ``acc`` (fp32), ``y_in + acc`` (fp32) or ``bf16(silu(gate) * up)`` (``ml_dtypes.bfloat16``),
        with ``acc = x @ w.T`` computed in fp32; add_norm_parts: ``(h, xs, ss)`` with ``h = y_in + acc`` and
        ``(xs, ss)`` = :func:`norm_input` of it (ss as one part per token).

    Raises:
        PlanError: shapes that do not match the problem; scales missing (w8 / w4) or given (bf16); a norm
            argument missing.
    """
    if problem.quantized:
        if scales is None:
            raise PlanError(f"gemv reference: a {problem.wfmt} problem needs its scales")
        w = dequantize_weight(problem, w, scales)
    elif scales is not None:
        raise PlanError("gemv reference: a bf16 problem takes no scales")
    x32, w32 = _f32(x), _f32(w)
    if x32.shape[1] != problem.k or w32.shape != (problem.w_rows, problem.k):
        raise PlanError(
            f"gemv reference: expected x [T, {problem.k}] and w [{problem.w_rows}, {problem.k}], "
            f"got {x32.shape} and {w32.shape}"
        )
    if dp:
        x32 = dp_x(x32)
    acc = x32 @ w32.T
    if problem.norm_in:
        if ss_in is None or in_eps is None:
            raise PlanError("gemv reference: in_norm parts needs ss_in and in_eps")
        total = np.sum(_f32(ss_in), axis=-1, keepdims=True, dtype=np.float32)
        acc = acc * (np.float32(1) / np.sqrt(total / np.float32(problem.k) + np.float32(in_eps)))
    if problem.epilogue == "store":
        return acc
    if problem.epilogue == "residual_add":
        return _f32(y_in) + acc
    if problem.norm_out:
        if norm_w is None:
            raise PlanError("gemv reference: add_norm_parts needs norm_w")
        h = _f32(y_in) + acc
        return (h, *norm_input(h, norm_w, problem.unit_offset))
    gate, up = acc[:, : problem.n], acc[:, problem.n:]
    with np.errstate(over="ignore"):  # exp(-gate) = inf for gate < ~-88: silu's limit, gate / inf = -0, as on the GPU
        return ((gate / (np.float32(1) + np.exp(-gate))) * up).astype(ml_dtypes.bfloat16)
