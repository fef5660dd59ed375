// gdn_common.cuh -- device helpers shared by the Gated DeltaNet kernel templates (gdn_*.cu.j2).
//
// Included after ninfer_common.cuh. Same house rules: no CUDA/C headers, no SM counts or
// per-arch numbers. Everything here is fp32 and mirrors ninferc.ir.reference:
//   1. scalar math: softplus, sigmoid, the GDN gating (ref_gdn_gating)
//   2. CTA-wide sums (two __syncthreads each, so the scratch can be reused at once)
//   3. the conv-ring / projection layout (templates/README.md "State layouts")
//   4. per-row scalars of one prefill chunk (gdn_chunk, gdn_chunk_wy)
//   5. the record gdn_chunk_wy writes and the gdn_chunk scan reads
//   6. float4 arithmetic and the gated norm's bf16 output (gdn_recurrent)
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

// ---------------------------------------------------------------------------------------------
// 4. per-row scalars of one chunk of kC tokens starting at token tc, L <= kC of them valid (rows >= L
//    are padding and get zeros, as in ref_gated_delta_rule_chunked): c = cumsum(g) (sequential, like
//    numpy's cumsum), beta, rq = 1/||q||, rk = 1/||k|| (l2_eps inside the root, ref_l2norm). One warp
//    per row for the norms; ends with a barrier, so every thread may read the four vectors.
// ---------------------------------------------------------------------------------------------
template <int kC, int kDk>
__device__ __forceinline__ void chunk_row_scalars(const float* __restrict__ conv_out, int conv_dim,
                                                  const float* __restrict__ proj, int proj_dim, int tc, int L,
                                                  int q_off, int k_off, int off_a, int off_b, float a_log, float dtb,
                                                  float l2_eps, float* s_c, float* s_beta, float* s_rq, float* s_rk) {
  const int warp = threadIdx.x / ninfer::kWarpSize, lane = threadIdx.x % ninfer::kWarpSize;
  const int nwarps = blockDim.x / ninfer::kWarpSize;
  for (int i = warp; i < kC; i += nwarps) {
    float sq = 0.0f, sk = 0.0f;
    if (i < L) {
      const float* __restrict__ row = conv_out + (size_t)(tc + i) * conv_dim;
      for (int d = lane; d < kDk; d += ninfer::kWarpSize) {
        const float qv = row[q_off + d], kv = row[k_off + d];
        sq += qv * qv;
        sk += kv * kv;
      }
    }
    sq = ninfer::warp_sum(sq);
    sk = ninfer::warp_sum(sk);
    if (lane == 0) {
      float g = 0.0f, beta = 0.0f, rq = 0.0f, rk = 0.0f;
      if (i < L) {
        const float* __restrict__ prow = proj + (size_t)(tc + i) * proj_dim;
        gating(prow[off_a], prow[off_b], a_log, dtb, g, beta);
        rq = 1.0f / sqrtf(sq + l2_eps);
        rk = 1.0f / sqrtf(sk + l2_eps);
      }
      s_c[i] = g;
      s_beta[i] = beta;
      s_rq[i] = rq;
      s_rk[i] = rk;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // c = cumsum(g), sequential like numpy
    float acc = 0.0f;
    for (int i = 0; i < kC; ++i) {
      acc += s_c[i];
      s_c[i] = acc;
    }
  }
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------
// 5. the record gdn_chunk_wy writes per (token t, V head h) at wy_ws + (t * Hv + h) * kFloats (fp32), which
//    the scan (gdn_chunk wy=1) reads: w row [dk] | u row [dv] | P row [C] (zeros above the diagonal) |
//    qf = rq scale e^c, kf = rk e^(c_last - c), e^(c_last), c.
// ---------------------------------------------------------------------------------------------
template <int kDk, int kDv, int kC>
struct WyRecord {
  static constexpr int kW = 0, kU = kDk, kP = kDk + kDv, kS = kDk + kDv + kC, kFloats = kDk + kDv + kC + 4;
};

// ---------------------------------------------------------------------------------------------
// 6. float4 arithmetic (4 state columns per thread) and the gated norm's bf16 output (gdn_recurrent)
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float4 f4_zero() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ __forceinline__ float4 f4_fma(float4 a, float s, float4 c) {
  return make_float4(fmaf(a.x, s, c.x), fmaf(a.y, s, c.y), fmaf(a.z, s, c.z), fmaf(a.w, s, c.w));
}
__device__ __forceinline__ float4 f4_scale(float4 a, float s) { return make_float4(a.x * s, a.y * s, a.z * s, a.w * s); }

// y = o rstd w silu(z) of 4 columns as 4 bf16.
__device__ __forceinline__ uint2 gated_bf16(const float4& o, float rstd, const float4& w4, const float4& z4) {
  const float y0 = ((o.x * rstd) * w4.x) * ninfer::silu(z4.x);
  const float y1 = ((o.y * rstd) * w4.y) * ninfer::silu(z4.y);
  const float y2 = ((o.z * rstd) * w4.z) * ninfer::silu(z4.z);
  const float y3 = ((o.w * rstd) * w4.w) * ninfer::silu(z4.w);
  uint2 packed;
  packed.x = (unsigned int)ninfer::f32_to_bf16(y0) | ((unsigned int)ninfer::f32_to_bf16(y1) << 16);
  packed.y = (unsigned int)ninfer::f32_to_bf16(y2) | ((unsigned int)ninfer::f32_to_bf16(y3) << 16);
  return packed;
}

}  // namespace gdn
