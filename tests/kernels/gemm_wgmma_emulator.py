"""A numpy emulator of ``templates/gemm_wgmma.cu.j2``, for CPU tests of its index math.

It replays every CTA of the kernel -- grouped rasterisation, ``load_stage`` (masks, the template's XOR
swizzle, zero fill) into a NaN-initialised shared memory whose base is rounded up to 1024 bytes as the
kernel does, the cp.async / wgmma pipeline order, and the epilogue's store mapping -- with the two
hardware rules written out from the PTX ISA (8.x), independently of the kernel:

* Operand fetch ("Matrix Descriptor Format", "Shared Memory Matrix Layout", K-major, 128-byte swizzle):
  element (row i, k) of a k16 slice described by start address S reads the byte address
  ``L = S + (i // 8) * SBO + (i % 8) * 128 + 2k`` with its 16-byte chunk bits swizzled,
  ``L ^ (((L >> 7) & 7) << 4)``; SBO comes from descriptor bits [32, 46) << 4 and S from bits [0, 14) << 4.
* Accumulator layout ("wgmma D matrix fragment", m64nNk16 f32): warp w, lane l, register 4j + e holds row
  16w + l/4 + 8 * (e >= 2), column 8j + 2 (l % 4) + (e % 2).

The pipeline is checked too: the stage a load refills must not be one that an unretired wgmma may still
read (the kernel retires k-tile kt - 2 before refilling its stage at kt), and every read must find data of
the k-tile it expects (reads of never-written shared memory give NaN). With quantised W (``params["wfmt"]``)
the W tile follows the kernel's register schedule instead of cp.async: the prologue stores tiles 0 ..
stages-3, and iteration kt stores W tile kt + stages - 2 after issuing k-tile kt's wgmma (while k-tiles kt - 1
and kt may both be in flight); ``w`` is then the dequantised weight (``bf16_rn(fl32(q * scale))``, what the
shared tile holds -- the unit layout of ``gemm_wq.inc.j2`` is covered by gemm_emulator). Output starts NaN and
every store is counted. Arithmetic is float64.
"""

from __future__ import annotations

import numpy as np

from gemm_emulator import cta_tile, w_row

ATOM = 1024       # bytes: 8 rows x 128 B
ROW_BYTES = 128   # bk = 64 bf16


def _swizzle(addr: np.ndarray) -> np.ndarray:
    return addr ^ (((addr >> 7) & 7) << 4)


def _desc(start: int, sbo: int) -> int:
    """The template's smem_desc: start >> 4 | LBO 1 << 16 | SBO >> 4 << 32 | swizzle 1 << 62."""
    return ((start & 0x3FFFF) >> 4) | (1 << 16) | ((sbo >> 4) << 32) | (1 << 62)


def _fetch(smem: np.ndarray, desc: int, rows: int) -> np.ndarray:
    """[rows, 16] operand values a wgmma k16 slice reads through ``desc`` (PTX ISA rule above)."""
    assert desc >> 62 == 1, "descriptor must say 128-byte swizzle"
    start = (desc & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    i = np.arange(rows)[:, None]
    k = np.arange(16)[None, :]
    logical = start + (i // 8) * sbo + (i % 8) * ROW_BYTES + 2 * k
    phys = _swizzle(logical)
    assert (phys % 2 == 0).all()
    return smem[phys // 2]


def emulate(params: dict, x: np.ndarray, w: np.ndarray, t: int, n_out: int, k: int, ldx: int, group_m: int,
            grid: int, smem_offset: int = 208):
    """Run the kernel's index math for every CTA of ``grid``.

    Args:
        params: the spec's template parameters (bm, bn, bk, stages, epilogue, threads).
        x: [t, ldx] float. w: [n_w, k] float. smem_offset: where the dynamic shared window starts (bytes;
            any 16-byte multiple -- the kernel rounds up to 1024).

    Returns:
        (y [t, n_out] float64 with NaN where never written, writes [t, n_out] int counts).
    """
    bm, bn, bk, stages = params["bm"], params["bn"], params["bk"], params["stages"]
    swiglu = params["epilogue"] == "swiglu_bf16"
    quant = "wfmt" in params
    assert bk == 64 and params["threads"] == 2 * bm
    chunks = bk // 8
    out_per_cta = bn // 2 if swiglu else bn
    tile_a, tile_b = bm * bk, bn * bk
    stage_elems = tile_a + tile_b
    base = smem_offset + (ATOM - smem_offset % ATOM) % ATOM  # bytes, as the kernel rounds
    total = base + stages * stage_elems * 2
    y = np.full((t, n_out), np.nan)
    writes = np.zeros((t, n_out), dtype=np.int64)
    ktiles = -(-k // bk)
    for bid in range(grid):
        tile = cta_tile(bid, t, n_out, bm, out_per_cta, group_m)
        if tile is None:
            continue
        m0, n0 = tile
        smem = np.full(total // 2, np.nan)
        holds = [-1] * stages    # k-tile whose X tile each stage holds
        holds_w = [-1] * stages  # k-tile whose W tile each stage holds

        def load(stage, kt, with_w=True):
            k0 = kt * bk
            a0 = base // 2 + stage * stage_elems
            for r in range(bm):
                for c in range(chunks):
                    row, col = m0 + r, k0 + c * 8
                    dst = a0 + (r * chunks + (c ^ (r & 7))) * 8
                    ok = row < t and col < k
                    smem[dst:dst + 8] = x[row, col:col + 8] if ok else 0.0
            holds[stage] = kt
            if with_w:
                store_w(stage, kt)

        def store_w(stage, kt):
            k0 = kt * bk
            b0 = base // 2 + stage * stage_elems + tile_a
            for r in range(bn):
                wrow, ok = w_row(r, n0, n_out, bn, swiglu)
                for c in range(chunks):
                    col = k0 + c * 8
                    dst = b0 + (r * chunks + (c ^ (r & 7))) * 8
                    smem[dst:dst + 8] = w[wrow, col:col + 8] if ok and col < k else 0.0
            holds_w[stage] = kt

        for s in range(stages - 2):
            if s < ktiles:
                load(s, s)
        acc = np.zeros((bm, bn))
        in_flight: list[int] = []  # stages an unretired wgmma group may still read
        for kt in range(ktiles):
            pf = kt + stages - 2
            if pf < ktiles:
                assert pf % stages not in in_flight, f"refill of stage {pf % stages} while a wgmma reads it"
                load(pf % stages, pf, with_w=not quant)
            st = kt % stages
            assert holds[st] == kt, f"k-tile {kt} reads stage {st} holding X of k-tile {holds[st]}"
            assert holds_w[st] == kt, f"k-tile {kt} reads stage {st} holding W of k-tile {holds_w[st]}"
            sa = base + st * stage_elems * 2
            for wg in range(bm // 64):
                da = _desc(sa + wg * 64 * ROW_BYTES, ATOM)
                db = _desc(sa + tile_a * 2, ATOM)
                for kk in range(bk // 16):
                    a = _fetch(smem, da + 2 * kk, 64)
                    b = _fetch(smem, db + 2 * kk, bn)
                    acc[wg * 64:(wg + 1) * 64] += a @ b.T
            in_flight.append(st)
            if quant and pf < ktiles:  # the dequantised W store, before wgmma.wait_group 1
                assert pf % stages not in in_flight, f"W store into stage {pf % stages} while a wgmma reads it"
                store_w(pf % stages, pf)
            in_flight = in_flight[-1:]  # wgmma.wait_group 1: only k-tile kt's group may remain
        # epilogue: registers -> (row, col) by the PTX fragment rule, then the template's store mapping
        blocks = bn // 8
        for wg in range(bm // 64):
            for warp in range(4):
                for lane in range(32):
                    g, c2 = lane >> 2, (lane & 3) * 2
                    reg = {}
                    for j in range(blocks):
                        for e in range(4):
                            rr = 16 * warp + g + 8 * (e >= 2)
                            cc = 8 * j + c2 + (e % 2)
                            reg[4 * j + e] = acc[wg * 64 + rr, cc]
                    for h in range(2):
                        row = m0 + wg * 64 + warp * 16 + g + h * 8
                        if row >= t:
                            continue
                        if swiglu:
                            for j in range(blocks // 2):
                                col = n0 + j * 8 + c2
                                for e in range(2):
                                    gi, ui = 4 * j + 2 * h + e, 4 * (j + blocks // 2) + 2 * h + e
                                    if col + e < n_out:
                                        gate = reg[gi]
                                        y[row, col + e] = gate / (1.0 + np.exp(-gate)) * reg[ui]
                                        writes[row, col + e] += 1
                        else:
                            for j in range(blocks):
                                col = n0 + j * 8 + c2
                                for e in range(2):
                                    if col + e < n_out:
                                        y[row, col + e] = reg[4 * j + 2 * h + e]
                                        writes[row, col + e] += 1
    return y, writes
