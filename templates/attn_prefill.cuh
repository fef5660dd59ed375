// attn_prefill.cuh -- device helpers of attn_prefill.cu.j2's kernel (documented there and in
// ninferc.targets.kernels.attention). Included by that template after its constants (kInt8, kMma, kThreads, kHd, kQT,
// kKT, the tile strides and sizes, ..., all defined for every variant), which the helpers below use; a helper of one
// route (simt_* / mma_*) is compiled, never called, by the other route's kernels, whose `if constexpr` branch discards
// the call. The int8 / bf16 difference inside a helper is an `if constexpr` too.
//
// A helper is optimised before it is inlined, so moving code here can change what ptxas allocates (most of all on
// sm_120a): the staging copies, the simt P.V, the mma softmax, the int8 group scores, the q loads and the simt output
// write stay in the kernel for that reason (bench/template_resources.py attn_prefill showed the difference); what is
// here left every kernel's registers, shared memory and local memory unchanged on the four archs.
//
// Same house rules as ninfer_common.cuh (included first) and attn_common.cuh.
#pragma once

// The int8 KV header's helpers that the kernel's int8 branches call, declared so that the bf16 variants (which do not
// include that header) compile those branches, which they discard: never called there, so never defined there.
namespace ninfer_attn {
__device__ float i8_at(unsigned int w, int i);
__device__ void dequant_i8x4(unsigned int w, float s, float* f);
__device__ void i8x16_to_bf16(const uint4& v, uint4& lo, uint4& hi);
}  // namespace ninfer_attn

namespace attn_pre {

// ---- simt route ---------------------------------------------------------------------------------

// Dims d .. d + 7 of the scores of this warp's rows (w, w + warps, ...) x this lane's keys (l, l + 32, ...) of the
// tile, added to sc: q from q_s (fp32 [kQT][kHd]), K from k_s ([kKT][kKStride]: bf16, or int8 codes dequantised as
// fl32(code * scale) with the key's scale of the group of 64 from ks_s, [kKT][kGroups]).
__device__ __forceinline__ void simt_score_step(float (&sc)[kRowsPerWarp][kKeysPerLane], const KvElem* k_s,
                                                const float* ks_s, const float* q_s, int d, int warp, int lane) {
  float kf[kKeysPerLane][8];
  if constexpr (kInt8) {
#pragma unroll
    for (int u = 0; u < kKeysPerLane; ++u) {
      const int key = lane + ninfer::kWarpSize * u;
      const uint2 w = *reinterpret_cast<const uint2*>(k_s + key * kKStride + d);
      const float sk = ks_s[key * kGroups + d / kScaleGroup];
      ninfer_attn::dequant_i8x4(w.x, sk, kf[u]);
      ninfer_attn::dequant_i8x4(w.y, sk, kf[u] + 4);
    }
  } else {
#pragma unroll
    for (int u = 0; u < kKeysPerLane; ++u)
      ninfer::bf16x8_to_f32(
          *reinterpret_cast<const uint4*>(k_s + (lane + ninfer::kWarpSize * u) * kKStride + d), kf[u]);
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const float* qrow = q_s + (warp + r * kWarps) * kHd + d;
    const float4 qa = *reinterpret_cast<const float4*>(qrow);
    const float4 qb = *reinterpret_cast<const float4*>(qrow + 4);
#pragma unroll
    for (int u = 0; u < kKeysPerLane; ++u) {
      float s = sc[r][u];
      s = fmaf(qa.x, kf[u][0], s); s = fmaf(qa.y, kf[u][1], s);
      s = fmaf(qa.z, kf[u][2], s); s = fmaf(qa.w, kf[u][3], s);
      s = fmaf(qb.x, kf[u][4], s); s = fmaf(qb.y, kf[u][5], s);
      s = fmaf(qb.z, kf[u][6], s); s = fmaf(qb.w, kf[u][7], s);
      sc[r][u] = s;
    }
  }
}

// Online softmax per row (the row's warp holds all kKT scores sc of the tile of keys kt ..): causal mask key > pos ->
// -inf; the probabilities go to p_s [kQT][kKT], each row's rescale factor alpha = exp(m_old - m_new) to a_s [kQT];
// m_run / l_run are the warp's rows' running max and sum.
__device__ __forceinline__ void simt_softmax(const float (&sc)[kRowsPerWarp][kKeysPerLane],
                                             const int (&pos_r)[kRowsPerWarp], float (&m_run)[kRowsPerWarp],
                                             float (&l_run)[kRowsPerWarp], float* p_s, float* a_s, int kt,
                                             float scale, int warp, int lane) {
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = warp + r * kWarps;
    float s[kKeysPerLane];
    float mx = ninfer_attn::neg_inf();
#pragma unroll
    for (int u = 0; u < kKeysPerLane; ++u) {
      const int key = kt + lane + ninfer::kWarpSize * u;
      s[u] = key <= pos_r[r] ? sc[r][u] * scale : ninfer_attn::neg_inf();
      mx = fmaxf(mx, s[u]);
    }
    mx = ninfer_attn::warp_max(mx);
    const float m_new = fmaxf(m_run[r], mx);  // finite: key 0 (first tile) is visible to every row
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < kKeysPerLane; ++u) {
      const float p = expf(s[u] - m_new);
      p_s[i * kKT + lane + ninfer::kWarpSize * u] = p;
      sum += p;
    }
    sum = ninfer::warp_sum(sum);
    const float alpha = expf(m_run[r] - m_new);
    l_run[r] = l_run[r] * alpha + sum;
    m_run[r] = m_new;
    if (lane == 0) a_s[i] = alpha;
  }
}

// ---- mma route ----------------------------------------------------------------------------------

// One 16-dim k-step of S += (q_hi + q_lo) K^T for the warp's rows ra, rb (= ra + 8) x the tile's kKT keys: A fragments
// of q hi / lo (qh32, ql32: bf16 pairs of [kQT][kStride]) at columns col, col + 8 (col = 16 ks + 2 tq), B fragments of
// the K tile kv32 (bf16 pairs of [kKT][kStride]) for key j * 8 + g of n-tile j. int8: K holds the codes as exact bf16
// and acc one group's partial scores (the kernel applies the scales).
__device__ __forceinline__ void mma_qk_step(float (&acc)[kNT][4], const unsigned int* qh32, const unsigned int* ql32,
                                            const unsigned int* kv32, int col, int ra, int rb, int g) {
  const unsigned int ah[4] = {qh32[(ra * kStride + col) / 2], qh32[(rb * kStride + col) / 2],
                              qh32[(ra * kStride + col + 8) / 2], qh32[(rb * kStride + col + 8) / 2]};
  const unsigned int al[4] = {ql32[(ra * kStride + col) / 2], ql32[(rb * kStride + col) / 2],
                              ql32[(ra * kStride + col + 8) / 2], ql32[(rb * kStride + col + 8) / 2]};
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    const int key = j * 8 + g;
    const unsigned int b0 = kv32[(key * kStride + col) / 2];
    const unsigned int b1 = kv32[(key * kStride + col + 8) / 2];
    ninfer_attn::mma_bf16_16816(acc[j], ah, b0, b1);
    ninfer_attn::mma_bf16_16816(acc[j], al, b0, b1);
  }
}

// acc += (P_hi + P_lo) V for one 8-column n-tile of the output: ph / pl the A fragment (P split into bf16 hi + lo), the
// B fragment V rows k0, k0 + 1 (b0) and k0 + 8, k0 + 9 (b1) at column col of the V tile kv_s (bf16 [kKT][kStride]).
__device__ __forceinline__ void mma_pv_step(float (&acc)[4], const unsigned int (&ph)[4], const unsigned int (&pl)[4],
                                            const unsigned short* kv_s, int k0, int col) {
  const unsigned int b0 = (unsigned int)kv_s[k0 * kStride + col] |
                          ((unsigned int)kv_s[(k0 + 1) * kStride + col] << 16);
  const unsigned int b1 = (unsigned int)kv_s[(k0 + 8) * kStride + col] |
                          ((unsigned int)kv_s[(k0 + 9) * kStride + col] << 16);
  ninfer_attn::mma_bf16_16816(acc, ph, b0, b1);
  ninfer_attn::mma_bf16_16816(acc, pl, b0, b1);
}

// The output of rows ra and rb (= ra + 8) of the tile (those < nv): the row sums l_a / l_b (this thread's shares)
// quad-reduced, O / l times sigmoid(gate) (gate of head h in proj, fp32 [T, kProjDim]) as bf16 pairs into out
// (bf16 [T, Hq * hd]) at columns jd * 8 + 2 tq (+ 1) of each n-tile jd.
__device__ __forceinline__ void mma_write(const float (&o)[kDT][4], float l_a, float l_b, const float* proj,
                                          unsigned short* out, int t0, int nv, int h, int ra, int rb, int tq) {
  l_a += __shfl_xor_sync(ninfer::kFullMask, l_a, 1);
  l_a += __shfl_xor_sync(ninfer::kFullMask, l_a, 2);
  l_b += __shfl_xor_sync(ninfer::kFullMask, l_b, 1);
  l_b += __shfl_xor_sync(ninfer::kFullMask, l_b, 2);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = half ? rb : ra;
    if (r < nv) {
      const int t = t0 + r;
      const float l = half ? l_b : l_a;
      const float* gate = proj + (size_t)t * kProjDim + h * 2 * kHd + kHd;
      unsigned int* dst = reinterpret_cast<unsigned int*>(out + ((size_t)t * kHq + h) * kHd);
#pragma unroll
      for (int jd = 0; jd < kDT; ++jd) {
        const int col = jd * 8 + 2 * tq;
        const float y0 = (o[jd][2 * half] / l) * ninfer_attn::sigmoid(gate[col]);
        const float y1 = (o[jd][2 * half + 1] / l) * ninfer_attn::sigmoid(gate[col + 1]);
        dst[col / 2] = ninfer_attn::pack_bf16x2(y0, y1);
      }
    }
  }
}

}  // namespace attn_pre
