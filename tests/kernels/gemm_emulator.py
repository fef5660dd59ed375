"""A numpy emulator of ``templates/gemm.cu.j2`` at warp-fragment level, for CPU tests of its index math.

It replays what every CTA of the kernel does -- grouped rasterisation, ``load_stage`` (masks, XOR
swizzle, zero fill), the per-lane ``ldmatrix.x4`` addresses, the ``mma.m16n8k16`` fragment layouts and
the epilogue's store mapping -- with the PTX ISA's definitions of the two instructions written out
independently of the kernel (PTX ISA 8.x, "Matrix Fragments for mma.m16n8k16" and "ldmatrix"):

* ``ldmatrix.x4``: matrix i's 8 rows come from the addresses of lanes 8i..8i+7; destination register i
  of lane t holds row t/4, columns 2(t%4) and 2(t%4)+1 of matrix i (lower column in the low half).
* ``mma.m16n8k16`` (bf16): with g = lane/4, c = lane%4: A regs a0..a3 hold (g, 2c..2c+1),
  (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..); B regs b0, b1 hold (k = 2c..2c+1, n = g), (k = 2c+8.., n = g);
  accumulators d0..d3 are (g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1).

Shared memory starts as NaN so a read of a never-written slot poisons the result; the output starts as
NaN and every store is counted, so a missing or duplicated write is caught. Arithmetic is float64.

The pipeline is replayed in the kernel's order: the prologue fills stages 0 .. stages-2, iteration kt
issues the loads of k-tile kt + stages - 1 into stage (kt + stages - 1) % stages, computes on stage
kt % stages, and -- for quantised W (``params["wfmt"]`` = ``w8`` / ``w4``) -- dequantises and stores the
prefetched W units after the compute (register double-buffering), so a wrong stage index reads NaN or
stale data. Quantised W is decoded from the raw code bytes here (int8, or offset-binary nibbles with
element 2j in the low nibble of byte j), independently of ``ninferc.ir.quant``: each unit of
``kWqElems`` K of one row becomes ``bf16_rn(fl32(q * scale))`` and is stored chunk by chunk through the swizzle.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

WARP = 32
W4_GROUP = 64


def wq_layout(bn: int, bk: int, threads: int, wfmt: str):
    """The template's code-load layout (``wq_fits`` / ``kWqBytes``): (bytes, K elements, units per thread)."""
    per_byte = 2 if wfmt == "w4" else 1
    for nbytes in (16, 8, 4):
        elems = nbytes * per_byte
        if elems >= 8 and bk % elems == 0 and (bn * (bk // elems)) % threads == 0:
            return nbytes, elems, bn * (bk // elems) // threads
    raise AssertionError(f"no code load layout for bn={bn} bk={bk} threads={threads} {wfmt}")


def _decode_unit(raw: np.ndarray, wfmt: str) -> np.ndarray:
    """Code bytes of one unit -> int codes in K order."""
    if wfmt == "w8":
        return raw.view(np.int8).astype(np.int64)
    q = np.empty(2 * raw.size, dtype=np.int64)
    q[0::2] = (raw & 0x0F).astype(np.int64) - 8
    q[1::2] = (raw >> 4).astype(np.int64) - 8
    return q


def _swz(r, c, chunks):
    if chunks == 8:
        return r * 8 + (c ^ (r & 7))
    return r * 4 + (c ^ ((r >> 1) & 3))


def _ldmatrix_x4(stage: np.ndarray, addr: np.ndarray) -> np.ndarray:
    """regs[4, 32, 2] from element addresses addr[32] (each the start of 8 contiguous b16)."""
    rows = np.stack([stage[a:a + 8] for a in addr])  # [32, 8]
    regs = np.empty((4, WARP, 2))
    t = np.arange(WARP)
    for i in range(4):
        mat = rows[8 * i:8 * i + 8]  # [8, 8]
        regs[i, :, 0] = mat[t // 4, 2 * (t % 4)]
        regs[i, :, 1] = mat[t // 4, 2 * (t % 4) + 1]
    return regs


_T = np.arange(WARP)
_G, _C = _T // 4, _T % 4


def _mma(acc: np.ndarray, a: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> None:
    """acc[32, 4] += A(16x16 from a[4,32,2]) @ B(16x8 from b0/b1 [32, 2]) in fragment layout."""
    A = np.full((16, 16), np.nan)
    B = np.full((16, 8), np.nan)
    for e in range(2):
        A[_G, 2 * _C + e] = a[0, :, e]
        A[_G + 8, 2 * _C + e] = a[1, :, e]
        A[_G, 2 * _C + 8 + e] = a[2, :, e]
        A[_G + 8, 2 * _C + 8 + e] = a[3, :, e]
        B[2 * _C + e, _G] = b0[:, e]
        B[2 * _C + 8 + e, _G] = b1[:, e]
    D = A @ B
    acc[:, 0] += D[_G, 2 * _C]
    acc[:, 1] += D[_G, 2 * _C + 1]
    acc[:, 2] += D[_G + 8, 2 * _C]
    acc[:, 3] += D[_G + 8, 2 * _C + 1]


def cta_tile(bid: int, t: int, n_out: int, bm: int, out_per: int, group_m: int):
    """The (m0, n0) tile of CTA ``bid`` under the kernels' grouped rasterisation (group_m M-tiles per group,
    M fastest inside a group), or None for a CTA past the tiles. Shared by both gemm templates."""
    tiles_m, tiles_n = -(-t // bm), -(-n_out // out_per)
    if bid >= tiles_m * tiles_n:
        return None
    per_group = group_m * tiles_n
    group = bid // per_group
    first_m = group * group_m
    gsize = min(tiles_m - first_m, group_m)
    in_group = bid - group * per_group
    m_tile, n_tile = first_m + in_group % gsize, in_group // gsize
    assert m_tile < tiles_m and n_tile < tiles_n, (bid, m_tile, n_tile)
    return m_tile * bm, n_tile * out_per


def w_row(r: int, n0: int, n_out: int, bn: int, swiglu: bool):
    """(W row, exists) of shared-tile row ``r`` of the CTA at output column n0: for swiglu the first bn/2 tile
    rows are gate rows n0.., the rest the matching up rows n_out + n0..; rows past the outputs do not exist."""
    if swiglu:
        up = r >= bn // 2
        o = n0 + (r - bn // 2 if up else r)
        return (n_out + o if up else o), o < n_out
    return n0 + r, n0 + r < n_out


def emulate(params: dict, x: np.ndarray, w: np.ndarray, t: int, n_out: int, k: int, ldx: int, group_m: int,
            grid: int, scales: np.ndarray | None = None):
    """Run the kernel's logic on float arrays.

    Args:
        params: the spec's template parameters (bm, bn, bk, stages, warps_m, warps_n, threads, epilogue,
            and wfmt for quantised W).
        x: [t, ldx] values; w: [n_w, k] values (bf16 W), or the code bytes (w8 int8 [n_w, k], w4 uint8
            [n_w, k/2]); scales: fp32 (w8 [n_w], w4 [n_w, k/64]) for quantised W; t, n_out, k, ldx, group_m:
            kernel arguments; grid: CTAs.

    Returns:
        (y [t, n_out] float64 with NaN where never written, writes [t, n_out] int count of stores).
    """
    BM, BN, BK, S = params["bm"], params["bn"], params["bk"], params["stages"]
    WMW, WNW, TH = params["warps_m"], params["warps_n"], params["threads"]
    swiglu = params["epilogue"] == "swiglu_bf16"
    WM, WN = BM // WMW, BN // WNW
    MI, NI = WM // 16, WN // 8
    CH = BK // 8
    out_per = BN // 2 if swiglu else BN
    tileA, tileB = BM * BK, BN * BK
    stage_elems = tileA + tileB

    wfmt = params.get("wfmt", "bf16")
    xf = np.asarray(x, dtype=np.float64).reshape(-1)
    if wfmt == "bf16":
        wf = np.asarray(w, dtype=np.float64).reshape(-1)
    else:
        codes = np.ascontiguousarray(w).view(np.uint8)
        sc = np.asarray(scales, dtype=np.float32)
        per_byte = 2 if wfmt == "w4" else 1
        assert codes.shape[1] * per_byte == k, (codes.shape, k)
        UB, UE, UL = wq_layout(BN, BK, TH, wfmt)
        UPR, UC = BK // UE, UE // 8  # units per row, chunks per unit
    y = np.full((t, n_out), np.nan)
    writes = np.zeros((t, n_out), dtype=np.int64)

    ktiles = -(-k // BK)
    lanes = np.arange(WARP)

    for bid in range(grid):
        tile = cta_tile(bid, t, n_out, BM, out_per, group_m)
        if tile is None:
            continue
        m0, n0 = tile
        smem = np.full(S * stage_elems, np.nan)
        acc = np.zeros((WMW * WNW, MI, NI, WARP, 4))

        def wq_load(kt):
            """Per thread and unit: (tile row, unit-in-row, fp32 dequantised values or None = zero)."""
            k0 = kt * BK
            regs = []
            for tid in range(TH):
                for u in range(UL):
                    i = tid + u * TH
                    r, c = i // UPR, i % UPR
                    wrow, ok = w_row(r, n0, n_out, BN, swiglu)
                    col = k0 + c * UE
                    ok = ok and col < k
                    if not ok:
                        regs.append((r, c, None))
                        continue
                    raw = codes[wrow, col // per_byte: col // per_byte + UB]
                    s = sc[wrow] if wfmt == "w8" else sc[wrow, col // W4_GROUP]
                    assert wfmt == "w8" or (k0 + BK - 1) // W4_GROUP == k0 // W4_GROUP  # one group per k-tile
                    vals = (_decode_unit(raw, wfmt).astype(np.float32) * np.float32(s)).astype(np.float32)
                    regs.append((r, c, vals))
            return regs

        def wq_store(stage, regs):
            base_b = stage * stage_elems + tileA
            for r, c, vals in regs:
                bf = np.zeros(UE) if vals is None else vals.astype(ml_dtypes.bfloat16).astype(np.float64)
                for q in range(UC):
                    dst = base_b + _swz(r, c * UC + q, CH) * 8
                    smem[dst:dst + 8] = bf[8 * q: 8 * q + 8]

        def load_stage(stage, kt):
            k0 = kt * BK
            base_a = stage * stage_elems
            base_b = base_a + tileA
            for tid in range(TH):
                for j in range(BM * CH // TH):
                    i = tid + j * TH
                    r, c = i // CH, i % CH
                    row, col = m0 + r, k0 + c * 8
                    ok = row < t and col < k
                    dst = base_a + _swz(r, c, CH) * 8
                    smem[dst:dst + 8] = xf[row * ldx + col: row * ldx + col + 8] if ok else 0.0
                if wfmt != "bf16":
                    continue  # W comes from wq_load / wq_store
                for j in range(BN * CH // TH):
                    i = tid + j * TH
                    r, c = i // CH, i % CH
                    wrow, ok = w_row(r, n0, n_out, BN, swiglu)
                    col = k0 + c * 8
                    ok = ok and col < k
                    dst = base_b + _swz(r, c, CH) * 8
                    smem[dst:dst + 8] = wf[wrow * k + col: wrow * k + col + 8] if ok else 0.0

        def b_row(wn, ni):
            if swiglu:
                half = NI // 2
                return wn * (WN // 2) + ni * 8 if ni < half else BN // 2 + wn * (WN // 2) + (ni - half) * 8
            return wn * WN + ni * 8

        # prologue: stages 0 .. S-2 (quantised W: all code loads first, then the dequantised stores)
        pro = []
        for s in range(S - 1):
            if s < ktiles:
                load_stage(s, s)
                if wfmt != "bf16":
                    pro.append((s, wq_load(s)))
        for s, regs in pro:
            wq_store(s, regs)

        for kt in range(ktiles):
            stage = kt % S
            pf = kt + S - 1
            regs = None
            if pf < ktiles:
                load_stage(pf % S, pf)
                if wfmt != "bf16":
                    regs = wq_load(pf)
            sa = smem[stage * stage_elems: stage * stage_elems + tileA]
            sb = smem[stage * stage_elems + tileA: (stage + 1) * stage_elems]
            for warp in range(WMW * WNW):
                wm, wn = warp // WNW, warp % WNW
                for kk in range(BK // 16):
                    a = []
                    for mi in range(MI):
                        r = wm * WM + mi * 16 + (lanes & 15)
                        addr = np.array([_swz(rr, kk * 2 + (ln >> 4), CH) * 8 for rr, ln in zip(r, lanes)])
                        a.append(_ldmatrix_x4(sa, addr))
                    b = [None] * NI
                    for ni in range(0, NI, 2):
                        r = b_row(wn, ni) + (lanes & 7) + ((lanes >> 4) << 3)
                        addr = np.array([_swz(rr, kk * 2 + ((ln >> 3) & 1), CH) * 8 for rr, ln in zip(r, lanes)])
                        q = _ldmatrix_x4(sb, addr)
                        b[ni] = (q[0], q[1])
                        b[ni + 1] = (q[2], q[3])
                    for mi in range(MI):
                        for ni in range(NI):
                            _mma(acc[warp, mi, ni], a[mi], b[ni][0], b[ni][1])
            if regs is not None:
                wq_store(pf % S, regs)  # after the compute, as the kernel does

        # epilogue
        g = lanes >> 2
        c2 = (lanes & 3) * 2
        for warp in range(WMW * WNW):
            wm, wn = warp // WNW, warp % WNW
            for mi in range(MI):
                for h in range(2):
                    for ln in range(WARP):
                        row = m0 + wm * WM + mi * 16 + g[ln] + h * 8
                        if row >= t:
                            continue
                        if swiglu:
                            for ni in range(NI // 2):
                                col = n0 + wn * (WN // 2) + ni * 8 + c2[ln]
                                for e in range(2):
                                    gv = acc[warp, mi, ni, ln, 2 * h + e]
                                    uv = acc[warp, mi, ni + NI // 2, ln, 2 * h + e]
                                    if col + e < n_out:
                                        y[row, col + e] = gv / (1.0 + np.exp(-gv)) * uv
                                        writes[row, col + e] += 1
                        else:
                            for ni in range(NI):
                                col = n0 + wn * WN + ni * 8 + c2[ln]
                                for e in range(2):
                                    if col + e < n_out:
                                        y[row, col + e] = acc[warp, mi, ni, ln, 2 * h + e]
                                        writes[row, col + e] += 1
    return y, writes
