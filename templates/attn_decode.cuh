// attn_decode.cuh -- the derived constants and device helpers of attn_decode.cu.j2's kernel (documented there and in
// ninferc.targets.kernels.attention). Included by that template after its parameter constants (kInt8, kThreads, kHd,
// kTile, ...); the constants derived from them (below, all defined for every variant) serve the helpers and the
// kernel. A helper used by one variant only is a template, so the others never instantiate it (they call it in an
// `if constexpr` branch they discard). A helper is optimised before it is inlined, so moving code here can change
// what ptxas allocates: the int8 loops, the mma scores, the bf16 q load and the (m, l) write stay in the kernel for
// that reason (bench/template_resources.py showed the difference).
//
// Same house rules as ninfer_common.cuh (included first) and attn_common.cuh.
#pragma once

// The kernel's derived constants: sizes and layouts from the template's parameters (attn_decode.cu.j2: kInt8, kStage,
// kMma, kPrep, kThreads, kHd, kHq, kHkv, kPage, kBalance, kRot, kTile, KvElem), defined for every variant.
namespace {
constexpr int kWarps = kThreads / ninfer::kWarpSize;
constexpr int kG = kHq / kHkv;  // q heads per KV head
static_assert(kThreads % ninfer::kWarpSize == 0, "threads must be a multiple of the warp size");
static_assert(kHq % kHkv == 0, "hq must be a multiple of hkv");

// The folded attn_prep (kPrep): proj's layout and the RoPE split, as attn_prep.cu.j2.
constexpr int kHalf = kPrep ? kRot / 2 : 1;
constexpr int kKOffset = kHq * 2 * kHd;          // first k column of proj
constexpr int kVOffset = kKOffset + kHkv * kHd;  // first v column of proj
constexpr int kProjDim = kVOffset + kHkv * kHd;  // row stride of proj
constexpr int kPerLaneP = kHd / ninfer::kWarpSize;
static_assert(!kPrep || kHd % ninfer::kWarpSize == 0, "prep: head_dim must be a multiple of 32");
static_assert(!kPrep || (kRot % 2 == 0 && kRot > 0 && kRot <= kHd),
              "prep: rotary_dim must be even and in (0, head_dim]");

// Scores. int8: kLanesPerKey lanes per key (kKeysPerWarp keys per warp and pass); lane l of a key reads kVecPerLane
// 16-byte vectors of 16 int8 codes at elements (v * kLanesPerKey + l) * 16 (each inside one group of 64) and
// dequantises them with the group's scale, k = fl32(code * scale), as the reference does. bf16: one warp per key;
// lane l reads kVecPerLane vectors of kVec bf16 at elements (v * 32 + l) * kVec (4/8/16-byte vectors for hd = 64/128/
// 256, 16-byte vectors for multiples of 256).
constexpr int kScaleGroup = 64;             // int8: head_dim elements per K/V scale (ninfer_attn::kKvGroup)
constexpr int kGroups = kHd / kScaleGroup;  // int8: scales per K/V row
constexpr int kVec = kInt8 ? 16 : kHd >= 256 ? 8 : kHd / ninfer::kWarpSize;
constexpr int kLanesPerKey = kInt8 ? (kHd / kVec < ninfer::kWarpSize ? kHd / kVec : ninfer::kWarpSize)
                                   : ninfer::kWarpSize;
constexpr int kKeysPerWarp = ninfer::kWarpSize / kLanesPerKey;
constexpr int kVecPerLane = kHd / (kVec * kLanesPerKey);
static_assert(!kInt8 || kHd % 64 == 0, "int8 KV: head_dim must be a multiple of 64");
static_assert(kInt8 || kHd == 64 || kHd == 128 || kHd % 256 == 0, "head_dim must be 64, 128 or a multiple of 256");
static_assert(kHd % (kVec * kLanesPerKey) == 0, "head_dim must split into vectors per lane");

// P.V (FMA loops): a thread owns column units (int8: quads of 4 codes per 4-byte load, one scale; bf16: pairs of 2
// per 4-byte load) and a residue class of keys.
constexpr int kUnitCols = kInt8 ? 4 : 2;
constexpr int kUnits = kHd / kUnitCols;
constexpr int kKeyLanes = kThreads >= kUnits ? kThreads / kUnits : 1;
constexpr int kUnitsPerThread = kThreads >= kUnits ? 1 : kUnits / kThreads;
constexpr int kHeadsPerWarp = (kG + kWarps - 1) / kWarps;  // softmax: warp w owns heads w, w + warps, ...
static_assert(kThreads >= kUnits ? kThreads % kUnits == 0 : kUnits % kThreads == 0,
              "threads and head_dim / (2 bf16, 4 int8) must divide one another");

// Staged tiles (kStage): the bytes of one row (codes of KvElem; int8: and scales).
constexpr int kRowBytes = kHd * (int)sizeof(KvElem);
constexpr int kScaleRowBytes = kGroups * 4;
static_assert(kPage % kTile == 0, "the staged tile must divide the page");
static_assert(!kStage || kRowBytes % 16 == 0, "staged K/V rows must be whole 16-byte chunks");
static_assert(!(kStage && kInt8) || kTile * kScaleRowBytes % 16 == 0,
              "a tile's int8 scales must be whole 16-byte chunks");

// Tensor cores (kMma): the G <= 8 q heads are rows of the 16-row A operand; warp w scores tile rows
// w * kKeysPerWarpMma ... (kNTk 8-key n-tiles) and accumulates output columns w * kColsPerWarp ... (kDT n-tiles).
constexpr int kMmaRows = 8;  // q rows held per KV group (mma rows 8..15 are zero)
constexpr int kChunks = kHd / 8;  // 16-byte chunks of a bf16 row
constexpr int kKeysPerWarpMma = kTile / kWarps;
constexpr int kNTk = kMma ? kKeysPerWarpMma / 8 : 1;
constexpr int kColsPerWarp = kHd / kWarps;
constexpr int kDT = kMma ? kColsPerWarp / 8 : 1;
constexpr int kPartKeys = kMma ? (kWarps - 1) * kKeysPerWarpMma : 1;  // s_part row: k-split score parts 1 .. ks - 1
static_assert(!kMma || kG <= kMmaRows, "mma decode: at most 8 q heads per KV head");
static_assert(!kMma || kChunks % 8 == 0, "mma decode: head_dim must be a multiple of 64 (swizzle of 8 chunks)");
static_assert(!kMma || (kTile % 16 == 0 && kKeysPerWarpMma % 8 == 0),
              "mma decode: tile / warps must be a multiple of 8 keys");
static_assert(!kMma || kColsPerWarp % 8 == 0, "mma decode: head_dim / warps must be a multiple of 8");
}  // namespace

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

// Staged: copy rows [r_lo, r_hi) of the tile whose row 0 is pool row `prow0` into the K (v = false) or V buffer (mma:
// swizzled rows). int8 scale rows (kScaleRowBytes each) go in 16-byte chunks from floor16(r_lo) to floor16(r_hi), or
// ceil16(r_hi) at the tile's end row (`end`): neighbouring rows of the same tile come along, stale or not, and are
// never read.
template <class Page, class Tile>
__device__ __forceinline__ void stage_rows(Tile* s_k, Tile* s_v, float* s_ks, float* s_vs, const Page* k_pages,
                                           const Page* v_pages, const float* k_scales, const float* v_scales,
                                           size_t prow0, bool v, int r_lo, int r_hi, bool end) {
  if constexpr (kMma) {
    KvElem* dst = v ? s_v : s_k;  // swizzled rows (swz)
    const unsigned char* src = reinterpret_cast<const unsigned char*>((v ? v_pages : k_pages) + prow0 * kHd);
    for (int i = r_lo * kChunks + (int)threadIdx.x; i < r_hi * kChunks; i += kThreads) {
      const int row = i / kChunks;
      ninfer::cp_async16(dst + swz(row, (i % kChunks) * 8), src + (size_t)i * 16, 16);
    }
  } else {
    stage_bytes(reinterpret_cast<unsigned char*>(v ? s_v : s_k), (v ? v_pages : k_pages) + prow0 * kHd,
                          r_lo * kRowBytes, r_hi * kRowBytes);
  }
  if constexpr (kInt8) {
    const int b1 = r_hi * kScaleRowBytes;
    stage_bytes(reinterpret_cast<unsigned char*>(v ? s_vs : s_ks), (v ? v_scales : k_scales) + prow0 * kGroups,
                          (r_lo * kScaleRowBytes) & ~15, end ? (b1 + 15) & ~15 : b1 & ~15);
  }
}

// Before the PDL wait: pull the first K and V page of this CTA's key range into L2 (an L2 prefetch is safe whatever
// the previous kernel writes -- ninfer_common.cuh section 7; the batch metadata is from the host).
template <class Page>
__device__ __forceinline__ void prefetch_first_page(const Page* k_pages, const Page* v_pages, const int* page_table,
                                                    const int* seq_ctx, int max_pages, int splits,
                                                    int pages_per_split) {
  const int first = blockIdx.x * ninfer_attn::split_keys(seq_ctx[blockIdx.z], splits, pages_per_split * kPage,
                                                         kBalance, kPage);
  if (first < seq_ctx[blockIdx.z]) {
    const int page = page_table[(size_t)blockIdx.z * max_pages + first / kPage];
    const size_t row0 = ((size_t)page * kHkv + blockIdx.y) * kPage;
    constexpr int kPageBytes = kPage * kHd * (int)sizeof(*k_pages);
    for (int off = threadIdx.x * 128; off < kPageBytes; off += kThreads * 128) {
      ninfer::prefetch_l2(reinterpret_cast<const char*>(k_pages + row0 * kHd) + off);
      ninfer::prefetch_l2(reinterpret_cast<const char*>(v_pages + row0 * kHd) + off);
    }
  }
}

// mma: q rows of the group -> bf16 hi / lo pairs in swizzled shared memory (rows kG .. 7 zero); nothing for an empty
// key range (`any` false: no tile reads q).
__device__ __forceinline__ void mma_load_q(const float* q, unsigned short* s_qh, unsigned short* s_ql, int b, int kvh,
                                           bool any) {
  for (int i = any ? threadIdx.x : kMmaRows * kHd / 2; i < kMmaRows * kHd / 2; i += kThreads) {
    const int row = i / (kHd / 2);  // (an empty range: no tile reads q)
    const int col = (i % (kHd / 2)) * 2;
    const float2 v = row < kG ? reinterpret_cast<const float2*>(q + ((size_t)b * kHq + kvh * kG + row) * kHd)[col / 2]
                              : make_float2(0.0f, 0.0f);
    unsigned short h0, l0, h1, l1;
    ninfer_attn::split_bf16(v.x, h0, l0);
    ninfer_attn::split_bf16(v.y, h1, l1);
    reinterpret_cast<unsigned int*>(s_qh)[swz(row, col) / 2] = (unsigned int)h0 | ((unsigned int)h1 << 16);
    reinterpret_cast<unsigned int*>(s_ql)[swz(row, col) / 2] = (unsigned int)l0 | ((unsigned int)l1 << 16);
  }
}

// bf16 FMA loops, step 1: scores s[g][j] = (q_g . k_j) * scale for the valid keys of the tile (kb: its first row,
// staged or in the pages); warp w takes keys w, w + warps, ...; lane l reads kVecPerLane vectors of kVec bf16 at
// elements (v * 32 + l) * kVec.
template <class Elem>
__device__ __forceinline__ void scores_bf16(const Elem* kb, const float (&qr)[kG][kVecPerLane][kVec],
                                            float (&s_p)[kG][kPage], int n_valid, float scale, int warp, int lane) {
#pragma unroll 4
  for (int j = warp; j < n_valid; j += kWarps) {  // warp-uniform
    float part[kG];
#pragma unroll
    for (int g = 0; g < kG; ++g) part[g] = 0.0f;
#pragma unroll
    for (int v = 0; v < kVecPerLane; ++v) {
      float kf[kVec];
      if constexpr (kStage) {
        tile_bf16<kVec>(kb + (size_t)j * kHd + (v * ninfer::kWarpSize + lane) * kVec, kf);
      } else {
        load_bf16<kVec>(kb + (size_t)j * kHd + (v * ninfer::kWarpSize + lane) * kVec, kf);
      }
#pragma unroll
      for (int g = 0; g < kG; ++g)
#pragma unroll
        for (int e = 0; e < kVec; ++e) part[g] = fmaf(qr[g][v][e], kf[e], part[g]);
    }
#pragma unroll
    for (int g = 0; g < kG; ++g) part[g] = ninfer::warp_sum(part[g]);
    if (lane == 0) {
#pragma unroll
      for (int g = 0; g < kG; ++g) s_p[g][j] = part[g] * scale;
    }
  }
}

// Step 2: online softmax update, one warp per head: p = exp(s - m_new), alpha = exp(m_old - m_new) (mma with k-split
// scores: their parts summed in part order and scaled first); s_p becomes P, s_alpha the heads' rescale factors.
__device__ __forceinline__ void softmax_update(float (&s_p)[kG][kPage], const float (&s_part)[kG][kPartKeys],
                                               float* s_alpha, float (&m_run)[kHeadsPerWarp],
                                               float (&l_run)[kHeadsPerWarp], int n_valid, int off, int nt0,
                                               int n_teams, int ks_mma, float scale, int warp, int lane) {
#pragma unroll
  for (int i = 0; i < kHeadsPerWarp; ++i) {
    const int g = warp + i * kWarps;
    if (g < kG) {
      if (kMma && ks_mma > 1) {  // CTA-uniform: the k-split scores' parts, summed in part order, then scaled
        for (int j = lane; j < n_valid; j += ninfer::kWarpSize) {
          float v = s_p[g][j];
          for (int pt = 1; pt < ks_mma; ++pt)
            v += s_part[g][(pt - 1) * n_teams * kKeysPerWarpMma + off - nt0 * 8 + j];
          s_p[g][j] = v * scale;
        }
      }
      float mx = ninfer_attn::neg_inf();
      for (int j = lane; j < n_valid; j += ninfer::kWarpSize) mx = fmaxf(mx, s_p[g][j]);
      mx = ninfer_attn::warp_max(mx);
      const float m_new = fmaxf(m_run[i], mx);
      float sum = 0.0f;
      for (int j = lane; j < n_valid; j += ninfer::kWarpSize) {
        const float p = expf(s_p[g][j] - m_new);
        s_p[g][j] = p;
        sum += p;
      }
      sum = ninfer::warp_sum(sum);
      const float alpha = expf(m_run[i] - m_new);  // 0 on the first page (m_run = -inf)
      l_run[i] = l_run[i] * alpha + sum;
      m_run[i] = m_new;
      if (lane == 0) s_alpha[g] = alpha;
    }
  }
}

// mma: tile rows of the 16-key steps kbeg / 16 .. kend / 16 that hold no key of this tile (before off, past off +
// n_valid) may be stale or never written (NaN): zero them, as P is 0 there and 0 * NaN would not be.
template <class Elem>
__device__ __forceinline__ void zero_stale_rows(Elem* s_v, int off, int n_valid, int kbeg, int kend) {
  if (off > kbeg || off + n_valid < kend) {  // CTA-uniform
    for (int i = kbeg * kChunks + threadIdx.x; i < kend * kChunks; i += kThreads) {
      const int row = i / kChunks;
      if (row < off || row >= off + n_valid) *reinterpret_cast<uint4*>(s_v + row * kHd + (i % kChunks) * 8) =
          make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// mma, step 3: o = o * alpha + (P_hi + P_lo) V on tensor cores over the 16-key steps kbeg / 16 .. kend / 16; A rows fr
// (P of head fr), rows fr + 8 zero; B columns: this warp's kDT n-tiles of output columns.
template <class Elem>
__device__ __forceinline__ void mma_pv(float (&o)[kDT][4], const Elem* s_v, const float (&s_p)[kG][kPage],
                                       const float* s_alpha, int off, int n_valid, int kbeg, int kend, int warp,
                                       int fr, int fq) {
  const float a = fr < kG ? s_alpha[fr] : 0.0f;  // rows >= kG stay 0
#pragma unroll
  for (int jd = 0; jd < kDT; ++jd) { o[jd][0] *= a; o[jd][1] *= a; }
#pragma unroll 1
  for (int kk = kbeg / 16; kk < kend / 16; ++kk) {
    const int k0 = kk * 16 + 2 * fq;  // tile rows of b0 (k0, k0 + 1) and b1 (k0 + 8, k0 + 9)
    float pf[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = k0 + (e & 1) + (e >> 1) * 8;
      pf[e] = fr < kG && r >= off && r < off + n_valid ? s_p[fr][r - off] : 0.0f;
    }
    unsigned int ph[4], pl[4];
    ninfer_attn::split_pack(pf[0], pf[1], ph[0], pl[0]);
    ninfer_attn::split_pack(pf[2], pf[3], ph[2], pl[2]);
    ph[1] = ph[3] = pl[1] = pl[3] = 0u;
#pragma unroll
    for (int jd = 0; jd < kDT; ++jd) {
      const int col = warp * kColsPerWarp + jd * 8 + fr;  // B column g of n-tile jd
      const unsigned int b0 = (unsigned int)s_v[swz(k0, col)] | ((unsigned int)s_v[swz(k0 + 1, col)] << 16);
      const unsigned int b1 = (unsigned int)s_v[swz(k0 + 8, col)] | ((unsigned int)s_v[swz(k0 + 9, col)] << 16);
      ninfer_attn::mma_bf16_16816(o[jd], ph, b0, b1);
      ninfer_attn::mma_bf16_16816(o[jd], pl, b0, b1);
    }
  }
}

// bf16 FMA loops, step 3: acc = acc * alpha + sum_j p_j v_j over the valid keys j = ks (mod kKeyLanes) of the tile
// (vb: its first V row), column pairs c = c0 + kThreads * e (2 bf16 per 4-byte load).
template <class Elem>
__device__ __forceinline__ void pv_bf16(float (&acc)[kG][kUnitsPerThread][kUnitCols], const Elem* vb,
                                        const float (&s_p)[kG][kPage], const float* s_alpha, int n_valid, int ks,
                                        int c0) {
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    const float a = s_alpha[g];
#pragma unroll
    for (int e = 0; e < kUnitsPerThread; ++e) { acc[g][e][0] *= a; acc[g][e][1] *= a; }
  }
#pragma unroll 8
  for (int j = ks; j < n_valid; j += kKeyLanes) {
#pragma unroll
    for (int e = 0; e < kUnitsPerThread; ++e) {
      const int c = c0 + e * kThreads;
      unsigned int packed;
      if constexpr (kStage) {
        packed = tile_ld4(reinterpret_cast<const unsigned int*>(vb + (size_t)j * kHd) + c);
      } else {
        packed = __ldg(reinterpret_cast<const unsigned int*>(vb + (size_t)j * kHd) + c);
      }
      const float2 vf = ninfer_attn::bf16x2_to_f32(packed);
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        const float p = s_p[g][j];
        acc[g][e][0] = fmaf(p, vf.x, acc[g][e][0]);
        acc[g][e][1] = fmaf(p, vf.y, acc[g][e][1]);
      }
    }
  }
}

}  // namespace attn_dec
