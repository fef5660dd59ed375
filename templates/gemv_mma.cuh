// gemv_mma.cuh -- the tensor-core fragments of gemv_mma.cu.j2 (the GEMV of w4 / w8 weights on mma.sync m16n8k16):
// exact code -> bf16 / fp16 pairs and one k-tile of a scale group or block (and of a bf16 block). Included by that template inside its
// anonymous namespace after gemv_common.cuh (word()); same house rules as ninfer_common.cuh.
#pragma once

// mma path. One word of w4 codes (elements e0..e7 in nibbles 0..7) -> the bf16 pair (q[e_i], q[e_i+4]) for
// i = 0..3, exactly: the nibbles u under the bf16 exponent of 128 (bits 0x4300 | u = 128 + u, exact for
// u < 128), then one bf16x2 fma subtracting 136 (= 128 + the offset 8); small integers are exact in bf16.
constexpr unsigned int kBf16x2One = 0x3F803F80u;      // (1.0, 1.0)
constexpr unsigned int kBf16x2Minus136 = 0xC308C308u;  // (-136.0, -136.0)
template <int I>
__device__ __forceinline__ unsigned int w4_pair(unsigned int w) {
  return ninfer::fma_bf16x2(((w >> (4 * I)) & 0x000F000Fu) | 0x43004300u, kBf16x2One, kBf16x2Minus136);
}

// The bf16 pair (x[e_i], x[e_i+4]) of 8 consecutive bf16 (one uint4, element 2j in the low half of word j), the
// B operand matching w4_pair<I>: halves I % 2 of words I / 2 and I / 2 + 2.
template <int I>
__device__ __forceinline__ unsigned int x_pair(const uint4& v) {
  return __byte_perm(word(v, I / 2), word(v, I / 2 + 2), (I % 2) ? 0x7632 : 0x5410);
}

// d += k-tile I of one scale group: A = the bf16 pairs I of rows fr (wa) and fr + 8 (wb), B = the matching x pairs.
template <int I>
__device__ __forceinline__ void mma_w4_ktile(float (&d)[4], const uint2& wa, const uint2& wb, const uint4& xa,
                                             const uint4& xb) {
  const unsigned int a[4] = {w4_pair<I>(wa.x), w4_pair<I>(wb.x), w4_pair<I>(wa.y), w4_pair<I>(wb.y)};
  ninfer::mma_bf16_16816(d, a, x_pair<I>(xa), x_pair<I>(xb));
}

// w8 mma path. The fp16 pair (q[e], q[e + 2]) of bytes e, e + 2 (e = 0, 1) of a word of int8 codes, exactly: the
// offset-binary byte u = q + 128 under the fp16 exponent of 1024 (bits 0x64uu = 1024 + u, exact for u < 1024; the
// xor with 0x80, the mask and the exponent are one LOP3), then one f16x2 fma subtracting 1152 (= 1024 + 128);
// integers up to 2048 are exact in fp16.
// ``p`` is 0x64806480 (the exponent bytes, and the xor of the code bytes), passed in a register computed at run
// time: then (w ^ p) & 0x00FF00FF | p & 0xFF00FF00 is one LOP3 of (w, p, immediate) -- with both constants as
// literals ptxas re-materialises one of them before every LOP3 (one extra MOV per pair, seen in the sm_90 SASS).
constexpr unsigned int kF16x2Minus1152 = 0xE480E480u;  // (-1152.0, -1152.0)
__device__ __forceinline__ unsigned int w8_pair(unsigned int w, unsigned int p) {  // bytes 0 and 2 of w
  return ninfer::add_f16x2(((w ^ p) & 0x00FF00FFu) | (p & 0xFF00FF00u), kF16x2Minus1152);
}

// c += k-tile I (0..3) of one 64-element block: lane (fr, fq)'s A pairs are bytes (0, 2) and (1, 3) of word I of
// its 16 codes of rows fr (wa) and fr + 8 (wb) -- k-slots (2fq, 2fq + 1) and (2fq + 8, 2fq + 9) stand for block
// elements 16 fq + 4I + (0, 2) and + (1, 3) -- and B the fp16 x of the same elements (b0, b1) of its token fr (x is
// kept in shared memory with each quad stored as elements 0, 2, 1, 3, so b0 and b1 are plain words).
template <int I>
__device__ __forceinline__ void mma_w8_ktile(float (&c)[4], const uint4& wa, const uint4& wb, unsigned int b0,
                                             unsigned int b1, unsigned int mask) {
  const unsigned int a[4] = {w8_pair(word(wa, I), mask), w8_pair(word(wb, I), mask), w8_pair(word(wa, I) >> 8, mask),
                             w8_pair(word(wb, I) >> 8, mask)};
  ninfer::mma_f16_16816(c, a, b0, b1);
}

// bf16 mma path. c += one k-tile of bf16 weights: lane (fr, fq) gives the A k-slots (2fq, 2fq + 1) and (2fq + 8,
// 2fq + 9) as four consecutive block elements e + (0, 1) and e + (2, 3) of its own loads (gemv_mma.cu.j2: e = 8 fq +
// 4I for k-tiles I = 0, 1 and 32 + 8 fq + 4(I - 2) for I = 2, 3) -- the words lo (elements +0, +1) and hi (+2, +3) of
// rows fr and fr + 8, as they lie in memory -- and B the x words of the same elements of its token (xlo, xhi): the
// k-slots are a permutation of the block's elements, the same for A and B, so the sum is unchanged.
__device__ __forceinline__ void mma_bf16_ktile(float (&c)[4], unsigned int row_lo, unsigned int row_hi,
                                               unsigned int row8_lo, unsigned int row8_hi, unsigned int xlo,
                                               unsigned int xhi) {
  const unsigned int a[4] = {row_lo, row8_lo, row_hi, row8_hi};
  ninfer::mma_bf16_16816(c, a, xlo, xhi);
}

// w8 mma path: the exponent e of token t's power of two 2^e (x is staged as fp16 x * 2^e), from the CTA's per-warp
// maxima of |x_t|: e = 14 - floor(log2 max|x_t|), clamped so that 2^e and 2^-e are normal fp32 (max 0: any e works).
template <int kWarpsN, int kTokensN>
__device__ __forceinline__ int x_exponent(const float (&xmax)[kWarpsN][kTokensN], int t) {
  float mx = 0.0f;
  for (int q = 0; q < kWarpsN; ++q) mx = fmaxf(mx, xmax[q][t]);
  const int e = 14 - ((int)((__float_as_uint(mx) >> 23) & 0xffu) - 127);
  return e > 126 ? 126 : e < -126 ? -126 : e;
}
