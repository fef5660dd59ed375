// gemv_dp.cuh -- the integer dot products of the quantised decode GEMVs (gemv_dp.cu.j2 and
// mlp_decode.cu.j2): a 16-byte weight vector of int8 / int4 codes against its x staged as int16 (PTX dp2a,
// ninfer_common.cuh section 9). Exact in int32.
#pragma once

namespace ninfer_dp {

// int16 pair (a, b) in one word, a in the low half
__device__ __forceinline__ unsigned int pack_i16x2(int a, int b) {
  return ((unsigned int)a & 0xffffu) | ((unsigned int)b << 16);
}

// sum(q * x) of a w8 vector (16 codes, element 4i + b in byte b of word i, signed) and its 16 int16 x (pieces x0,
// x1: element 2i in the low half of word i), exact in int32 (|x| < 2^15, |q| <= 128).
__device__ __forceinline__ int dp_w8x16(const uint4& w, const uint4& x0, const uint4& x1) {
  int s = ninfer::dp2a_lo(x0.x, w.x, 0);
  s = ninfer::dp2a_hi(x0.y, w.x, s);
  s = ninfer::dp2a_lo(x0.z, w.y, s);
  s = ninfer::dp2a_hi(x0.w, w.y, s);
  s = ninfer::dp2a_lo(x1.x, w.z, s);
  s = ninfer::dp2a_hi(x1.y, w.z, s);
  s = ninfer::dp2a_lo(x1.z, w.w, s);
  return ninfer::dp2a_hi(x1.w, w.w, s);
}

// s + sum(u * x) of one word of w4 nibbles (elements 0..7: element 2b in the low nibble of byte b, 2b + 1 in the
// high one, u = q + 8 in 0..15) and its 8 int16 x staged in the order 0, 2, 4, 6, 1, 3, 5, 7 (the low nibbles pair
// with words x, y, the high ones with z, w), exact.
__device__ __forceinline__ int dp_w4x8(unsigned int w, const uint4& x, int s) {
  const unsigned int lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
  s = ninfer::dp2a_lo(x.x, lo, s);
  s = ninfer::dp2a_hi(x.y, lo, s);
  s = ninfer::dp2a_lo(x.z, hi, s);
  return ninfer::dp2a_hi(x.w, hi, s);
}

}  // namespace ninfer_dp
