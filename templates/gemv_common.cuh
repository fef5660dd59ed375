// gemv_common.cuh -- the device code the decode GEMV's engine templates share (gemv_fma.cu.j2: fp32 FMAs; gemv_dp.cu.j2:
// integer dot products; gemv_mma.cu.j2: tensor cores; the contract, layouts and launch geometry are documented in
// ninferc.targets.kernels.gemv): the derived constants, the exact code -> fp32 conversions, the norm factor of an
// in_norm "parts" GEMV and the epilogue of one output. (The kernels' common tail -- the k_warps reduction, the plain
// stores with the add_norm_parts sums, the cooperative split-K -- is text in gemv.inc.j2: as helpers here it compiled
// to other code on sm_120a.)
//
// Included by each engine template inside its anonymous namespace, after the constants every variant defines from its
// template parameters: kThreads, kMaxTokens, kRowsPerWarp, kKWarps, kCoop, kSwiglu, kNormParts, kParts, kResidual,
// kUnitOffset, kW4 (false for bf16 weights) and OutT. A helper is a __forceinline__ function; each compiles to the code
// the kernels had inline (bench/template_resources.py --code compares the machine code). Same house rules as
// ninfer_common.cuh (included first).
#pragma once

// ---- derived constants ----
constexpr int kWarps = kThreads / ninfer::kWarpSize;
constexpr int kGroups = kWarps / kKWarps;  // row groups per CTA
// Outputs (columns of Y) per warp: swiglu warps hold gate and up rows for the same outputs.
constexpr int kOutsPerWarp = kSwiglu ? kRowsPerWarp / 2 : kRowsPerWarp;
constexpr int kOutsPerCta = kGroups * kOutsPerWarp;
constexpr int kUpOffset = kSwiglu ? kOutsPerWarp : 0;  // acc index of the up row paired with gate row j
constexpr int kW4Group = 64;  // w4: K elements per scale (ninferc.ir.quant.GROUP_SIZE)
// The writer warp stores its kOutsPerWarp x kMaxTokens outputs in rounds of one output (j, t) per lane.
constexpr int kRounds = (kOutsPerWarp * kMaxTokens + ninfer::kWarpSize - 1) / ninfer::kWarpSize;
static_assert(kThreads % ninfer::kWarpSize == 0, "threads must be a multiple of the warp size");
static_assert(kWarps % kKWarps == 0, "k_warps must divide the warps of a CTA");
static_assert(!kSwiglu || kRowsPerWarp % 2 == 0, "swiglu needs an even rows_per_warp");
static_assert(!kNormParts || !kCoop, "add_norm_parts is plain only (one CTA owns each output)");
static_assert(!(kNormParts && kParts), "a GEMV cannot both read and write norm parts (one workspace)");

// ---- codes -> fp32 (w8 / w4 weights) ----
// Exponent-bias int -> fp32 conversion (no I2F): the fp32 with bits 0x4B000000 | u (u < 2^23) is exactly
// 2^23 + u, so one PRMT (byte u into the low mantissa bits under the 0x4B exponent byte) and one FADD of
// -(2^23 + bias) give u - bias exactly.
constexpr unsigned int kMagicBits = 0x4B000000u;  // fp32 2^23
constexpr float kMagic = 8388608.0f;              // 2^23

// byte I of v (an unsigned 0..255) as the fp32 2^23 + byte
template <int I>
__device__ __forceinline__ float byte_magic(unsigned int v) {
  // result bytes (low to high): v.byte[I], 0, 0, 0x4B  (selector nibbles pick from v = 0..3, kMagicBits = 4..7)
  return __int_as_float(__byte_perm(v, kMagicBits, 0x7440 | I));
}

// 8 int8 codes (two words, element 4i+b in byte b of word i) -> fp32 q exactly.
__device__ __forceinline__ void w8x8_to_f32(unsigned int a, unsigned int b, float (&f)[8]) {
  constexpr float kBias = kMagic + 128.0f;  // codes are read as offset binary u = q + 128
  a ^= 0x80808080u;
  b ^= 0x80808080u;
  f[0] = byte_magic<0>(a) - kBias; f[1] = byte_magic<1>(a) - kBias;
  f[2] = byte_magic<2>(a) - kBias; f[3] = byte_magic<3>(a) - kBias;
  f[4] = byte_magic<0>(b) - kBias; f[5] = byte_magic<1>(b) - kBias;
  f[6] = byte_magic<2>(b) - kBias; f[7] = byte_magic<3>(b) - kBias;
}

// 8 int4 codes (one word: element 2i in the low nibble of byte i, 2i+1 in its high nibble, each nibble
// u = q + 8) -> fp32 q exactly.
__device__ __forceinline__ void w4x8_to_f32(unsigned int a, float (&f)[8]) {
  constexpr float kBias = kMagic + 8.0f;
  const unsigned int lo = a & 0x0F0F0F0Fu;         // elements 0, 2, 4, 6 in bytes 0..3
  const unsigned int hi = (a >> 4) & 0x0F0F0F0Fu;  // elements 1, 3, 5, 7
  f[0] = byte_magic<0>(lo) - kBias; f[1] = byte_magic<0>(hi) - kBias;
  f[2] = byte_magic<1>(lo) - kBias; f[3] = byte_magic<1>(hi) - kBias;
  f[4] = byte_magic<2>(lo) - kBias; f[5] = byte_magic<2>(hi) - kBias;
  f[6] = byte_magic<3>(lo) - kBias; f[7] = byte_magic<3>(hi) - kBias;
}

// Word i (0..3) of a 16-byte vector (i is a compile-time constant after unrolling).
__device__ __forceinline__ unsigned int word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Sub-chunk c (8 K elements) of a 16-byte weight vector, dequantised to the integer codes q (fp32).
__device__ __forceinline__ void codes_to_f32(const uint4& v, int c, float (&f)[8]) {
  if constexpr (kW4) {
    w4x8_to_f32(word(v, c), f);
  } else {
    w8x8_to_f32(word(v, 2 * c), word(v, 2 * c + 1), f);
  }
}

__device__ __forceinline__ float dot8(const float (&w)[8], const float (&x)[8], float acc) {
#pragma unroll
  for (int i = 0; i < 8; ++i) acc = fmaf(w[i], x[i], acc);
  return acc;
}

// ---- the norm of an in_norm "parts" GEMV ----
// The norm's per-token factor 1 / sqrt(sum(part[:ss_parts]) / k + in_eps) for one warp (part = ss_in's row of the
// token): 8 independent partial sums per lane (loads in flight together), a fixed order, then the butterfly -- the
// same bits in every warp and CTA. ps: the kernel's float[8] for the partial sums (a local array of an inlined helper
// would be allocated ahead of the kernel's own, which changes how ptxas allocates registers: the kernels declare them).
__device__ __forceinline__ float norm_factor(float (&ps)[8], const float* part, int ss_parts, int lane, int k,
                                             float in_eps) {
#pragma unroll
  for (int i = 0; i < 8; ++i) ps[i] = 0.0f;
  int p = lane;
  for (; p + 7 * ninfer::kWarpSize < ss_parts; p += 8 * ninfer::kWarpSize) {
#pragma unroll
    for (int i = 0; i < 8; ++i) ps[i] += part[p + i * ninfer::kWarpSize];
  }
  for (; p < ss_parts; p += ninfer::kWarpSize) ps[0] += part[p];
  const float s = ninfer::warp_sum(((ps[0] + ps[1]) + (ps[2] + ps[3])) + ((ps[4] + ps[5]) + (ps[6] + ps[7])));
  return 1.0f / sqrtf(s / (float)k + in_eps);
}

// ---- the epilogue ----
// Apply the store / residual_add / swiglu epilogue to one output element (t, o) given its dot products.
__device__ __forceinline__ void epilogue(OutT* __restrict__ y, int n_out, int t, int o, float acc, float acc_up) {
  OutT* dst = y + (size_t)t * n_out + o;
  if constexpr (kSwiglu) {
    *dst = ninfer::f32_to_bf16(ninfer::silu(acc) * acc_up);
  } else if constexpr (kResidual) {
    *dst += acc;
  } else {
    *dst = acc;
  }
}
