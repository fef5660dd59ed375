"""The GEMV problem (:class:`GemvProblem`: K, N, epilogue, weight format, input norm) and the names every engine of
the family shares (the package docstring, :mod:`ninferc.targets.kernels.gemv`, describes the contract)."""

from __future__ import annotations

from dataclasses import dataclass

from ninferc.errors import PlanError
from ninferc.ir.quant import GROUP_SIZE
from ninferc.targets.kernels._weights import check_weight_k

EPILOGUES = ("store", "residual_add", "swiglu", "add_norm_parts")
MODES = ("coop", "plain")
IN_NORMS = ("none", "parts")
WARP = 32  # threads per warp on every CUDA architecture
VEC = 8    # bf16 elements per 16-byte load
#: K elements per 16-byte weight load, per weight format
VEC_OF = {"bf16": VEC, "w8": 16, "w4": 32}


@dataclass(frozen=True)
class GemvProblem:
    """One GEMV instance.

    Attributes:
        k: reduction length (columns of X and W); multiple of 8 (bf16), 16 (w8) or 64 (w4).
        n: output features (columns of Y). For swiglu W has 2n rows ([gate; up]).
        epilogue: ``"store" | "residual_add" | "swiglu" | "add_norm_parts"`` (module docstring).
        wfmt: weight format ``"bf16" | "w8" | "w4"`` (module docstring; :mod:`ninferc.ir.quant`).
        unit_offset: add_norm_parts only: scale by ``1 + w`` (zero-centred norm weights, the Qwen3.5 default)
            or by ``w``; ignored (and not part of the kernel's identity) for the other epilogues.
        in_norm: ``"none"`` or ``"parts"`` (X is an add_norm_parts GEMV's XS; module docstring).

    Raises:
        PlanError: unknown weight format, k not a positive multiple of its format's K multiple (the message
            names K, the format and the multiple), n not positive, an unknown epilogue or input mode, or
            add_norm_parts together with in_norm parts (both use the one parts workspace).
    """

    k: int
    n: int
    epilogue: str = "store"
    wfmt: str = "bf16"
    unit_offset: bool = True
    in_norm: str = "none"

    def __post_init__(self):
        check_weight_k("gemv", self.k, self.wfmt)
        if self.n <= 0:
            raise PlanError(f"gemv: N = {self.n} must be positive")
        if self.epilogue not in EPILOGUES:
            raise PlanError(f"gemv: unknown epilogue {self.epilogue!r}; supported: {', '.join(EPILOGUES)}")
        if self.in_norm not in IN_NORMS:
            raise PlanError(f"gemv: unknown in_norm {self.in_norm!r}; supported: {', '.join(IN_NORMS)}")
        if self.norm_out and self.norm_in:
            raise PlanError("gemv: a GEMV cannot both write norm parts (add_norm_parts) and read them "
                            "(in_norm parts): they share one workspace")

    @property
    def w_rows(self) -> int:
        """Rows of W: 2n for swiglu, else n."""
        return 2 * self.n if self.epilogue == "swiglu" else self.n

    @property
    def norm_out(self) -> bool:
        """True for the ``add_norm_parts`` epilogue (plain only; extra arguments norm_w, xs, ss_out)."""
        return self.epilogue == "add_norm_parts"

    @property
    def norm_in(self) -> bool:
        """True for ``in_norm == "parts"`` (extra arguments ss_in, ss_parts, in_eps)."""
        return self.in_norm == "parts"

    @property
    def quantized(self) -> bool:
        """True for w8 / w4 (the kernel takes a ``scales`` argument)."""
        return self.wfmt != "bf16"

    @property
    def k_per_vec(self) -> int:
        """K elements per 16-byte weight vector: 8 (bf16), 16 (w8), 32 (w4)."""
        return VEC_OF[self.wfmt]

    @property
    def weight_bytes(self) -> int:
        """Bytes of W as stored (codes + fp32 scales for w8 / w4)."""
        n = self.w_rows * self.k
        return {"bf16": 2 * n, "w8": n + 4 * self.w_rows,
                "w4": n // 2 + 4 * self.w_rows * (self.k // GROUP_SIZE)}[self.wfmt]

    def weight_shapes(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """The weight arrays the kernel reads, name -> (shape, numpy dtype name): bf16 ``w`` [w_rows, K]
        (bf16 bits); w8 ``w`` int8 [w_rows, K] + ``scales`` float32 [w_rows]; w4 ``w`` uint8
        [w_rows, K/2] + ``scales`` float32 [w_rows, K/64]."""
        r, k = self.w_rows, self.k
        if self.wfmt == "w8":
            return {"w": ((r, k), "int8"), "scales": ((r,), "float32")}
        if self.wfmt == "w4":
            return {"w": ((r, k // 2), "uint8"), "scales": ((r, k // GROUP_SIZE), "float32")}
        return {"w": ((r, k), "bfloat16")}
