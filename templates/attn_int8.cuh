// attn_int8.cuh -- int8 paged-KV helpers of the gated-attention family (included after attn_common.cuh,
// only by the kv_dtype = int8 variants of attn_prep, attn_decode and attn_prefill, so the bf16 kernels'
// rendered sources do not contain it). The rule is documented in ninferc.targets.kernels.attention
// ("int8 KV cache"); the numpy quantiser there (quantize_kv) is its bit-exact model.
//
// Pool layout per layer: codes int8 [num_pages, Hkv, P, hd] (two's complement) and scales fp32
// [num_pages, Hkv, P, hd / 64], one per token, KV head and group of 64 consecutive head_dim elements.
//   scale = fl32(max|x| / 127), replaced by 1 when below the fp32 normal range (all-zero group)
//   code  = clip(rint(fl32(x / scale)), -127, 127)      (round half to even)
//   value = fl32(code * scale)                           (dequantised on read)
#pragma once

namespace ninfer_attn {

constexpr int kKvGroup = 64;  // head_dim elements per int8 KV scale

// scale of a group from its max |x| (correctly rounded division; zero / subnormal scale -> 1).
__device__ __forceinline__ float kv_scale(float amax) {
  const float s = __fdiv_rn(amax, 127.0f);
  return s < __int_as_float(0x00800000) ? 1.0f : s;  // 0x00800000 = smallest normal fp32 (2^-126)
}

// int8 code of x for a group scale s: clip(rint(fl32(x / s)), -127, 127).
__device__ __forceinline__ signed char kv_code(float x, float s) {
  const float q = fminf(fmaxf(rintf(__fdiv_rn(x, s)), -127.0f), 127.0f);
  return (signed char)__float2int_rn(q);
}

// Quantise one head row of kPerLane * 32 elements held warp-wide (x[j] = row[lane + 32 j]) and store its
// codes and its hd / 64 scales. Group m is elements 64m .. 64m + 63 = this lane's x[2m] and x[2m + 1].
// Every lane of the warp must call it (warp-wide max).
template <int kPerLane>
__device__ __forceinline__ void store_row_int8(const float (&x)[kPerLane], signed char* __restrict__ codes,
                                               float* __restrict__ scales, int lane) {
  static_assert(kPerLane % 2 == 0, "int8 KV: head_dim must be a multiple of 64");
#pragma unroll
  for (int m = 0; m < kPerLane / 2; ++m) {
    const float amax = warp_max(fmaxf(fabsf(x[2 * m]), fabsf(x[2 * m + 1])));
    const float s = kv_scale(amax);
    codes[kKvGroup * m + lane] = kv_code(x[2 * m], s);
    codes[kKvGroup * m + ninfer::kWarpSize + lane] = kv_code(x[2 * m + 1], s);
    if (lane == 0) scales[m] = s;
  }
}

// Byte i (0..3) of a packed word as a signed int8, widened to fp32 (exact).
__device__ __forceinline__ float i8_at(unsigned int w, int i) { return (float)(signed char)(w >> (8 * i)); }

// Dequantise 4 codes packed in a u32 (element i in byte i): f[i] = fl32(code_i * s).
__device__ __forceinline__ void dequant_i8x4(unsigned int w, float s, float* f) {
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = i8_at(w, i) * s;
}

// Dequantise 16 codes (one 16-byte load) with one scale.
__device__ __forceinline__ void dequant_i8x16(const uint4& v, float s, float (&f)[16]) {
  dequant_i8x4(v.x, s, f);
  dequant_i8x4(v.y, s, f + 4);
  dequant_i8x4(v.z, s, f + 8);
  dequant_i8x4(v.w, s, f + 12);
}

// Two codes (low byte = element 0) as two bf16 packed in a u32 (element 0 in the low half). Exact: every
// int8 value has at most 8 significant bits.
__device__ __forceinline__ unsigned int i8x2_to_bf16x2(unsigned int w) {
  return (unsigned int)ninfer::f32_to_bf16(i8_at(w, 0)) | ((unsigned int)ninfer::f32_to_bf16(i8_at(w, 1)) << 16);
}

// 16 codes (one uint4) -> 16 exact bf16 codes in two uint4 (elements 0..7, 8..15).
__device__ __forceinline__ void i8x16_to_bf16(const uint4& v, uint4& lo, uint4& hi) {
  lo.x = i8x2_to_bf16x2(v.x);       lo.y = i8x2_to_bf16x2(v.x >> 16);
  lo.z = i8x2_to_bf16x2(v.y);       lo.w = i8x2_to_bf16x2(v.y >> 16);
  hi.x = i8x2_to_bf16x2(v.z);       hi.y = i8x2_to_bf16x2(v.z >> 16);
  hi.z = i8x2_to_bf16x2(v.w);       hi.w = i8x2_to_bf16x2(v.w >> 16);
}

// Load kN fp32 (kN a multiple of 4; pointer 16-byte aligned) with float4 loads.
template <int kN>
__device__ __forceinline__ void load_f32x4s(const float* p, float (&f)[kN]) {
  static_assert(kN % 4 == 0, "load_f32x4s: a multiple of 4 elements");
#pragma unroll
  for (int i = 0; i < kN / 4; ++i) {
    const float4 a = reinterpret_cast<const float4*>(p)[i];
    f[4 * i] = a.x; f[4 * i + 1] = a.y; f[4 * i + 2] = a.z; f[4 * i + 3] = a.w;
  }
}

// Sum over aligned segments of kW lanes (kW a power of two <= 32): every lane of a segment gets its total.
// All 32 lanes must call it.
template <int kW>
__device__ __forceinline__ float segment_sum(float v) {
  static_assert(kW >= 1 && kW <= ninfer::kWarpSize && (kW & (kW - 1)) == 0, "segment_sum: power of two <= 32");
#pragma unroll
  for (int offset = kW / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(ninfer::kFullMask, v, offset);
  return v;
}

}  // namespace ninfer_attn
