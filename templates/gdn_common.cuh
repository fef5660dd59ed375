// gdn_common.cuh -- device helpers shared by the Gated DeltaNet kernel templates (gdn_*.cu.j2).
//
// Included after ninfer_common.cuh. Same house rules: no CUDA/C headers, no SM counts or
// per-arch numbers. Everything here is fp32 and mirrors ninferc.ir.reference:
//   1. scalar math: softplus, sigmoid, the GDN gating (ref_gdn_gating)
//   2. CTA-wide sums (two __syncthreads each, so the scratch can be reused at once)
//   3. the conv-ring / projection layout (templates/README.md "State layouts")
#pragma once

namespace gdn {

// ---------------------------------------------------------------------------------------------
// 1. scalar math
// ---------------------------------------------------------------------------------------------

// softplus(x) = log(1 + exp(x)) in the overflow-safe form numpy's logaddexp(0, x) uses.
__device__ __forceinline__ float softplus(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }

// sigmoid(x) = 1 / (1 + exp(-x)) (ir.reference._sigmoid).
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)  (ref_gdn_gating, HF Qwen3_5GatedDeltaNet).
__device__ __forceinline__ void gating(float a, float b, float a_log, float dt_bias, float& g, float& beta) {
  g = -expf(a_log) * softplus(a + dt_bias);
  beta = sigmoid(b);
}

// ---------------------------------------------------------------------------------------------
// 2. CTA-wide sums. `scratch` holds at least (blockDim.x / 32) floats (float2 for block_sum2).
//    Every thread of the CTA must call; every thread gets the total. Two barriers: the second one
//    lets the caller reuse `scratch` (or call again) immediately.
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int warp = threadIdx.x / ninfer::kWarpSize, lane = threadIdx.x % ninfer::kWarpSize;
  const int nwarps = blockDim.x / ninfer::kWarpSize;
  v = ninfer::warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < nwarps; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

__device__ __forceinline__ float2 block_sum2(float a, float b, float2* scratch) {
  const int warp = threadIdx.x / ninfer::kWarpSize, lane = threadIdx.x % ninfer::kWarpSize;
  const int nwarps = blockDim.x / ninfer::kWarpSize;
  a = ninfer::warp_sum(a);
  b = ninfer::warp_sum(b);
  if (lane == 0) scratch[warp] = make_float2(a, b);
  __syncthreads();
  float2 total = make_float2(0.0f, 0.0f);
  for (int w = 0; w < nwarps; ++w) {
    total.x += scratch[w].x;
    total.y += scratch[w].y;
  }
  __syncthreads();
  return total;
}

// ---------------------------------------------------------------------------------------------
// 3. layouts (templates/README.md):
//    proj [T, proj_dim] fp32, columns [q (Hk*dk) | k (Hk*dk) | v (Hv*dv) | z (Hv*dv) | b (Hv) | a (Hv)]
//    conv_ring [slots, W, conv_dim] fp32: the conv input of position p lives in row p % W.
//    rec_state [slots, Hv, dk, dv] fp32.
//    A conv input at a position < 0 is 0 (the ring is never read for it).
// ---------------------------------------------------------------------------------------------

// Conv input (pre-activation) of channel c at absolute position p of a sequence whose tokens of
// this step start at token index t_first with position pos0: from proj when p >= pos0 (this step),
// from the ring when 0 <= p < pos0 (earlier steps), else 0.
__device__ __forceinline__ float conv_input(const float* __restrict__ proj, int proj_dim,
                                            const float* __restrict__ ring_slot, int conv_dim, int width,
                                            int t_first, int pos0, int p, int c) {
  if (p < 0) return 0.0f;
  if (p >= pos0) return proj[(size_t)(t_first + (p - pos0)) * proj_dim + c];
  return ring_slot[(size_t)(p % width) * conv_dim + c];
}

}  // namespace gdn
