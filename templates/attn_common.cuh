// attn_common.cuh -- device helpers of the gated-attention family (attn_prep, attn_decode,
// attn_combine, attn_prefill). Documented in ninferc.targets.kernels.attention.
//
// Same house rules as ninfer_common.cuh (which must be included first): no CUDA/C headers, no SM
// counts, resident-CTA counts or arch numbers. Everything here is plain fp32 math that mirrors the
// numpy oracle (ninferc.ir.reference): expf / sinf / cosf (never the __expf / __sinf intrinsics).
#pragma once

namespace ninfer_attn {

// +infinity / -infinity without math.h (NVRTC ships no headers).
__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Keys per split of attn_decode (ninferc.targets.kernels.attention.split_keys mirrors it). granule 0: max_keys
// (= pages_per_split * P, page-aligned splits). Else n = ceil(ctx / splits) rounded up to granule * 2^i while that
// divides the page size P (so no split's range crosses a page), otherwise to a multiple of P; at most max_keys.
// splits * result >= ctx either way, since splits * max_keys covers the page table.
__device__ __forceinline__ int split_keys(int ctx, int splits, int max_keys, int granule, int page) {
  if (granule <= 0) return max_keys;
  const int per = (ctx + splits - 1) / splits;
  int k = granule;
  if (page % k == 0)
    while (k < per && page % (2 * k) == 0) k *= 2;
  if (k < per || page % k != 0) k = (per + page - 1) / page * page;
  return k < max_keys ? k : max_keys;
}

// Butterfly max over the warp: every lane ends with the maximum.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = ninfer::kWarpSize / 2; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(ninfer::kFullMask, v, offset));
  return v;
}

// (cos a, sin a) of an fp32 RoPE angle a = fp32(pos * inv_freq[f]) >= 0 without
// sinf / cosf: their argument reduction past |a| ~ 1e5 rad (Payne-Hanek, CUDA C Programming Guide "Mathematical
// Functions", sinf's slow path) works through a local-memory array, and positions of long contexts reach it
// (a = pos for f = 0). Here a / pi is formed in double (relative error ~2^-53: < 2^-35 pi rad at a = 2^18), reduced
// mod 2 exactly to r in [-1, 1], rounded to fp32 (< pi 2^-25 rad) and passed to sincospif, whose reduction of r is
// exact. Absolute error vs cos / sin of the fp32 angle: <= 1.2e-7 over positions < 2^18 at theta 1e7, rot 64
// (numpy, sincospif taken as correctly rounded; add its own <= 1 ulp), against 3e-8 for a correctly rounded cosf.
// Both attn_prep and attn_decode's folded prep call it (bit-equal RoPE); numpy's oracle is np.cos / np.sin of the
// same fp32 angle (ninferc.ir.reference.rope_cos_sin).
__device__ __forceinline__ float2 rope_cos_sin(float a) {
  const double t = (double)a * 0.31830988618379067154;  // 1 / pi
  const double r = t - 2.0 * rint(0.5 * t);             // t mod 2 in [-1, 1] (exact)
  float s, c;
  sincospif((float)r, &s, &c);
  return make_float2(c, s);
}

// q_norm / k_norm then partial NeoX RoPE of one head row held by a warp, lane l owning elements d = l + 32 j
// (kPerLane = hd / 32 of them), as attn_prep computes it (ref_rmsnorm with unit offset, ref_partial_rope):
// y = x / sqrt(mean(x^2) + eps) * (1 + w), then for d < kRot: y_d = y_d cos(a_f) + r_d sin(a_f), f = d mod kRot/2,
// r_d = -y_{d+kRot/2} (d < kRot/2) or y_{d-kRot/2}, products and sum rounded separately (no FMA contraction).
// `buf` (kHd floats of shared memory, this warp's alone) passes the rotate-half partners; `cos_sin(f)` gives
// (cos a_f, sin a_f) of a_f = fp32(pos * inv_freq[f]) (rope_cos_sin). Used by attn_prep and by attn_decode's folded
// prep (template `prep`) -- test_emulated_decode_with_prep_folded holds the two bit-equal.
template <int kPerLane, int kRot, class CosSin>
__device__ __forceinline__ void norm_rope_row(float (&y)[kPerLane], const float (&x)[kPerLane], const float* w,
                                              float eps, float* buf, int lane, CosSin cos_sin) {
  constexpr int kHd = kPerLane * ninfer::kWarpSize;
  constexpr int kHalf = kRot / 2;
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) ss = fmaf(x[j], x[j], ss);
  ss = ninfer::warp_sum(ss);
  const float rinv = 1.0f / sqrtf(ss / (float)kHd + eps);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + ninfer::kWarpSize * j;
    y[j] = x[j] * rinv * (1.0f + w[d]);
    buf[d] = y[j];
  }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + ninfer::kWarpSize * j;
    if (d < kRot) {
      const bool lo = d < kHalf;
      const int f = lo ? d : d - kHalf;
      const float2 cs = cos_sin(f);
      const float partner = lo ? -buf[d + kHalf] : buf[d - kHalf];
      y[j] = __fadd_rn(__fmul_rn(y[j], cs.x), __fmul_rn(partner, cs.y));
    }
  }
  __syncwarp();  // every lane has read its partners before `buf` is reused
}

// sigmoid(x) = 1 / (1 + exp(-x)) in fp32, as ninferc.ir.reference._sigmoid computes it.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Unpack 2 bf16 packed in a u32 (element 0 in the low half).
__device__ __forceinline__ float2 bf16x2_to_f32(unsigned int packed) {
  return make_float2(ninfer::bf16_lo(packed), ninfer::bf16_hi(packed));
}

// Pack two fp32 into 2 bf16 (round to nearest even), element a in the low half.
__device__ __forceinline__ unsigned int pack_bf16x2(float a, float b) {
  return (unsigned int)ninfer::f32_to_bf16(a) | ((unsigned int)ninfer::f32_to_bf16(b) << 16);
}

// Load kN bf16 (kN = 2, 4 or 8; pointer aligned to 2*kN bytes) through the read-only path into fp32.
template <int kN>
__device__ __forceinline__ void load_bf16(const unsigned short* p, float (&f)[kN]) {
  static_assert(kN == 2 || kN == 4 || kN == 8, "load_bf16: 2, 4 or 8 elements");
  if (kN == 8) {
    const uint4 v = ninfer::ld_ro_v4(p);
    const unsigned int w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) { f[2 * i] = ninfer::bf16_lo(w[i]); f[2 * i + 1] = ninfer::bf16_hi(w[i]); }
  } else if (kN == 4) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    const unsigned int w[2] = {v.x, v.y};
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) { f[2 * i] = ninfer::bf16_lo(w[i]); f[2 * i + 1] = ninfer::bf16_hi(w[i]); }
  } else {
    const unsigned int w = __ldg(reinterpret_cast<const unsigned int*>(p));
    f[0] = ninfer::bf16_lo(w);
    f[kN - 1] = ninfer::bf16_hi(w);
  }
}

// Load kN fp32 (kN = 2, 4 or 8; pointer aligned to 4*min(kN, 4) bytes) with vector loads.
template <int kN>
__device__ __forceinline__ void load_f32(const float* p, float (&f)[kN]) {
  static_assert(kN == 2 || kN == 4 || kN == 8, "load_f32: 2, 4 or 8 elements");
  if (kN == 2) {
    const float2 a = *reinterpret_cast<const float2*>(p);
    f[0] = a.x; f[kN - 1] = a.y;
  } else {
#pragma unroll
    for (int i = 0; i < kN / 4; ++i) {
      const float4 a = reinterpret_cast<const float4*>(p)[i];
      f[4 * i] = a.x; f[4 * i + 1] = a.y; f[4 * i + 2] = a.z; f[4 * i + 3] = a.w;
    }
  }
}

// D += A * B, one warp-wide mma.sync.m16n8k16 (ninfer_common.cuh section 8).
using ninfer::mma_bf16_16816;

// Split fp32 x into bf16 hi + lo with hi + lo = x to ~16 mantissa bits (hi = bf16(x), lo = bf16(x - hi)):
// two bf16 MMAs on (hi, lo) keep an fp32 operand's accuracy.
__device__ __forceinline__ void split_bf16(float x, unsigned short& hi, unsigned short& lo) {
  hi = ninfer::f32_to_bf16(x);
  lo = ninfer::f32_to_bf16(x - __uint_as_float((unsigned int)hi << 16));
}

// Two fp32 values split into bf16 hi + lo (split_bf16), packed as the (hi, lo) words of an mma A/B register pair (a in
// the low halves): attn_decode's and attn_prefill's P.V on tensor cores.
__device__ __forceinline__ void split_pack(float a, float b, unsigned int& hi, unsigned int& lo) {
  unsigned short h0, l0, h1, l1;
  split_bf16(a, h0, l0);
  split_bf16(b, h1, l1);
  hi = (unsigned int)h0 | ((unsigned int)h1 << 16);
  lo = (unsigned int)l0 | ((unsigned int)l1 << 16);
}

}  // namespace ninfer_attn
