// attn_decode.cuh -- device helpers of attn_decode.cu.j2's kernel (documented there and in
// ninferc.targets.kernels.attention). Included by that template after its constants (kThreads, kHd, kG, kTile, ...,
// all defined for every variant), which the helpers below use; a helper used by one variant only is a template, so
// the others never instantiate it (they call it in an `if constexpr` branch they discard). The loops over a tile's
// keys stay in the kernel: moved into a helper, they are optimised before inlining, and ptxas then allocates some
// variants differently.
//
// Same house rules as ninfer_common.cuh (included first) and attn_common.cuh.
#pragma once

// The int8 KV header's helpers that the kernel's int8 branches call, declared so that the bf16 variants (which do not
// include that header) compile those branches, which they discard: never called there, so never defined there.
namespace ninfer_attn {
__device__ void dequant_i8x4(unsigned int w, float s, float* f);
__device__ void dequant_i8x16(const uint4& v, float s, float (&f)[16]);
template <int kN>
__device__ void load_f32x4s(const float* p, float (&f)[kN]);
template <int kW>
__device__ float segment_sum(float v);
}  // namespace ninfer_attn

namespace attn_dec {

// cp.async bytes [b0, b1) (multiples of 16) of src to dst, the CTA's threads taking 16-byte chunks in turn.
__device__ __forceinline__ void stage_bytes(unsigned char* dst, const void* src, int b0, int b1) {
  for (int o = b0 + (int)threadIdx.x * 16; o < b1; o += kThreads * 16) {
    ninfer::cp_async16(dst + o, reinterpret_cast<const unsigned char*>(src) + o, 16);
  }
}

// Loads from the staged tiles (shared memory; plain loads, not the global read-only path).
__device__ __forceinline__ uint4 tile_ld16(const void* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ unsigned int tile_ld4(const void* p) { return *reinterpret_cast<const unsigned int*>(p); }
// (Elem: unsigned short; a template so that the int8 variants' discarded bf16 branches name it with their pointers.)
template <int kN, class Elem>
__device__ __forceinline__ void tile_bf16(const Elem* p, float (&f)[kN]) {
  static_assert(kN == 2 || kN == 4 || kN == 8, "tile_bf16: 2, 4 or 8 elements");
  unsigned int w[kN / 2];
  if (kN == 8) {
    const uint4 v = tile_ld16(p);
    w[0] = v.x; w[kN / 2 > 1 ? 1 : 0] = v.y; w[kN / 2 > 2 ? 2 : 0] = v.z; w[kN / 2 > 3 ? 3 : 0] = v.w;
  } else if (kN == 4) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x; w[kN / 2 > 1 ? 1 : 0] = v.y;
  } else {
    w[0] = tile_ld4(p);
  }
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) { f[2 * i] = ninfer::bf16_lo(w[i]); f[2 * i + 1] = ninfer::bf16_hi(w[i]); }
}

// ninfer_attn::load_bf16 (global memory), a template for the same reason as tile_bf16.
template <int kN, class Elem>
__device__ __forceinline__ void load_bf16(const Elem* p, float (&f)[kN]) { ninfer_attn::load_bf16<kN>(p, f); }

// Element index of (row, col) in a swizzled [rows][kHd] bf16 buffer (mma): 16-byte chunk col / 8 of row r at chunk
// (col / 8) ^ (r & 7), so the 8 rows a fragment load touches fall in 8 different bank groups.
__device__ __forceinline__ int swz(int row, int col) { return row * kHd + (((col >> 3) ^ (row & 7)) << 3) + (col & 7); }

// Two fp32 values split into bf16 hi + lo, packed as the (hi, lo) words of an mma A/B register pair.
__device__ __forceinline__ void split_pack(float a, float b, unsigned int& hi, unsigned int& lo) {
  unsigned short h0, l0, h1, l1;
  ninfer_attn::split_bf16(a, h0, l0);
  ninfer_attn::split_bf16(b, h1, l1);
  hi = (unsigned int)h0 | ((unsigned int)h1 << 16);
  lo = (unsigned int)l0 | ((unsigned int)l1 << 16);
}

// The folded attn_prep (template parameter prep): warp w takes rows w, w + warps, ... of: the group's kG q heads
// (into s_q), then -- in the CTA whose range ends at the context (it holds position ctx - 1) -- the new K row and
// V row, written as bf16 to the page and, when they fall in the first tile (tile_row >= 0), into the staged tile;
// a later tile copies them from the page after barriers. Arithmetic as attn_prep.cu.j2's.
template <class Page, class Tile>
__device__ __forceinline__ void prep_rows(const float* proj, const float* q_norm_w,
                                          const float* k_norm_w, float eps, Page* k_pages,
                                          Page* v_pages, const int* page_table, int max_pages, int ctx,
                                          bool any, bool owner, int tile_row, Tile* s_k, Tile* s_v,
                                          float (&s_q)[kG][kHd], float* s_kbuf, const float (&s_cs)[2][kHalf]) {
  const int warp = threadIdx.x / ninfer::kWarpSize;
  const int lane = threadIdx.x % ninfer::kWarpSize;
  const int pos = ctx - 1;  // this step's token: seq_ctx counts it
  const int n_rows = any ? (owner ? kG + 2 : kG) : 0;  // an empty range needs no q
  const float* prow = proj + (size_t)blockIdx.z * kProjDim;  // decode: token b is sequence b
  Page* new_k = nullptr;
  Page* new_v = nullptr;
  if (owner) {
    const int page = page_table[(size_t)blockIdx.z * max_pages + pos / kPage];
    const size_t r = ((size_t)page * kHkv + blockIdx.y) * kPage + pos % kPage;
    new_k = k_pages + r * kHd;
    new_v = v_pages + r * kHd;
  }
  for (int r = warp; r < n_rows; r += kWarps) {  // warp-uniform
    const int kind = r < kG ? 0 : r - kG + 1;  // 0 = q, 1 = k, 2 = v
    const float* src = kind == 0 ? prow + (size_t)(blockIdx.y * kG + r) * 2 * kHd
                                 : prow + (kind == 1 ? kKOffset : kVOffset) + (size_t)blockIdx.y * kHd;
    float x[kPerLaneP];
#pragma unroll
    for (int j = 0; j < kPerLaneP; ++j) x[j] = src[lane + ninfer::kWarpSize * j];
    if (kind == 2) {
#pragma unroll
      for (int j = 0; j < kPerLaneP; ++j) {
        const unsigned short h = ninfer::f32_to_bf16(x[j]);
        new_v[lane + ninfer::kWarpSize * j] = h;
        if (tile_row >= 0) s_v[tile_row * kHd + lane + ninfer::kWarpSize * j] = h;
      }
      continue;
    }
    // RMSNorm with (1 + w), then partial NeoX RoPE: attn_prep's arithmetic (attn_common.cuh norm_rope_row); the
    // partner buffer is the q row's own s_q row, or for the K row s_kbuf (s_p: free until the first tile's scores)
    float y[kPerLaneP];
    ninfer_attn::norm_rope_row<kPerLaneP, kRot>(y, x, kind == 0 ? q_norm_w : k_norm_w, eps,
                                                kind == 0 ? &s_q[r][0] : s_kbuf, lane,
                                                [&](int f) { return make_float2(s_cs[0][f], s_cs[1][f]); });
#pragma unroll
    for (int j = 0; j < kPerLaneP; ++j) {
      const int d = lane + ninfer::kWarpSize * j;
      if (kind == 0) {
        s_q[r][d] = y[j];
      } else {
        const unsigned short h = ninfer::f32_to_bf16(y[j]);
        new_k[d] = h;
        if (tile_row >= 0) s_k[tile_row * kHd + d] = h;
      }
    }
  }
}

// FMA loops: reduce the key lanes' accumulators (all scaled by the same running max) into key lane 0, which then
// writes the partial outputs o [B, Hq, splits, hd]. A thread holds kUnitsPerThread column units (kUnitCols columns:
// bf16 pairs, int8 quads) c = c0 + kThreads * e of each head; key lane ks.
__device__ __forceinline__ void reduce_and_write(float (&acc)[kG][kUnitsPerThread][kUnitCols],
                                                 float (&s_red)[kKeyLanes > 1 ? kKeyLanes - 1 : 1][kG][kHd],
                                                 float* ws, int b, int kvh, int split, int splits, int ks,
                                                 int c0) {
  if (kKeyLanes > 1) {
    if (ks > 0) {
#pragma unroll
      for (int g = 0; g < kG; ++g)
#pragma unroll
        for (int e = 0; e < kUnitsPerThread; ++e) {
          const int c = c0 + e * kThreads;
          if constexpr (kInt8) {
#pragma unroll
            for (int i = 0; i < 4; ++i) s_red[ks - 1][g][4 * c + i] = acc[g][e][i];
          } else {
            s_red[ks - 1][g][2 * c] = acc[g][e][0];
            s_red[ks - 1][g][2 * c + 1] = acc[g][e][1];
          }
        }
    }
    __syncthreads();
    if (ks == 0) {
      for (int r = 0; r < kKeyLanes - 1; ++r)
#pragma unroll
        for (int g = 0; g < kG; ++g)
#pragma unroll
          for (int e = 0; e < kUnitsPerThread; ++e) {
            const int c = c0 + e * kThreads;
            if constexpr (kInt8) {
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[g][e][i] += s_red[r][g][4 * c + i];
            } else {
              acc[g][e][0] += s_red[r][g][2 * c];
              acc[g][e][1] += s_red[r][g][2 * c + 1];
            }
          }
    }
  }
  if (ks == 0) {
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      float* o = ws + (((size_t)b * kHq + kvh * kG + g) * splits + split) * kHd;
#pragma unroll
      for (int e = 0; e < kUnitsPerThread; ++e) {
        const int c = c0 + e * kThreads;
        if constexpr (kInt8) {
          *reinterpret_cast<float4*>(o + 4 * c) = make_float4(acc[g][e][0], acc[g][e][1], acc[g][e][2], acc[g][e][3]);
        } else {
          *reinterpret_cast<float2*>(o + 2 * c) = make_float2(acc[g][e][0], acc[g][e][1]);
        }
      }
    }
  }
}

}  // namespace attn_dec
