// ninfer_common.cuh -- device helpers shared by every ninferc kernel template.
//
// House rules for this header (and every template that includes it):
//   * No #include of CUDA or C headers: NVRTC from the pip wheels ships none. Everything here uses
//     NVRTC built-ins (uint4, __shfl_xor_sync, atomics, expf...) or inline PTX (sm_80+ syntax; every
//     ninferc target is sm_86 or newer).
//   * No SM counts, resident-CTA counts or other per-arch numbers: launch geometry comes from the
//     plan (ninferc.targets), never from constants here. tests/targets/test_no_magic_numbers.py
//     enforces this.
//   * The header is inlined into each rendered kernel source by ninferc.targets.render, so the
//     rendered-source hash covers it. Keep additions in a section of their own, documented.
//
// Contents:
//   1. basic constants and integer helpers
//   2. bf16 <-> fp32 (bit-exact conversions, no cuda_bf16.h)
//   3. global-memory loads (16-byte vector, read-only / streaming / L1-bypassing)
//   4. warp reductions
//   5. grid-wide barrier for cooperative launches
//   6. activations
//   7. programmatic dependent launch (sm_90+)
//   8. tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate), bf16x2 fma, async copies (cp.async)
//   9. integer dot products (dp2a)
#pragma once

namespace ninfer {

// ---------------------------------------------------------------------------------------------
// 1. basic constants and integer helpers
// ---------------------------------------------------------------------------------------------

// Threads per warp: the same on every CUDA architecture (CUDA C++ Programming Guide, "Warp size").
constexpr int kWarpSize = 32;
constexpr unsigned int kFullMask = 0xffffffffu;

__device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// ---------------------------------------------------------------------------------------------
// 2. bf16 <-> fp32. A bf16 is the high half of an fp32, so widening is a shift; values are packed
//    two per 32-bit word, element 2i in the low half (little-endian memory order).
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float bf16_lo(unsigned int packed) { return __uint_as_float(packed << 16); }
__device__ __forceinline__ float bf16_hi(unsigned int packed) { return __uint_as_float(packed & 0xffff0000u); }

// fp32 -> bf16, round to nearest even, NaN preserved (PTX cvt.rn.bf16.f32, sm_80+).
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

// Unpack 8 bf16 held in a uint4 (one 16-byte load) into fp32.
__device__ __forceinline__ void bf16x8_to_f32(const uint4& v, float (&f)[8]) {
  f[0] = bf16_lo(v.x); f[1] = bf16_hi(v.x);
  f[2] = bf16_lo(v.y); f[3] = bf16_hi(v.y);
  f[4] = bf16_lo(v.z); f[5] = bf16_hi(v.z);
  f[6] = bf16_lo(v.w); f[7] = bf16_hi(v.w);
}

// Dot product of 8 bf16 (packed in a uint4) with 8 fp32, accumulated in fp32.
__device__ __forceinline__ float dot_bf16x8(const uint4& w, const float (&x)[8], float acc) {
  acc = fmaf(bf16_lo(w.x), x[0], acc); acc = fmaf(bf16_hi(w.x), x[1], acc);
  acc = fmaf(bf16_lo(w.y), x[2], acc); acc = fmaf(bf16_hi(w.y), x[3], acc);
  acc = fmaf(bf16_lo(w.z), x[4], acc); acc = fmaf(bf16_hi(w.z), x[5], acc);
  acc = fmaf(bf16_lo(w.w), x[6], acc); acc = fmaf(bf16_hi(w.w), x[7], acc);
  return acc;
}

// ---------------------------------------------------------------------------------------------
// 3. global-memory loads. Pointers must be 16-byte aligned for the v4 forms.
// ---------------------------------------------------------------------------------------------

// Read-only 16-byte load through the non-coherent path, cached in L1 (activations reused by warps).
__device__ __forceinline__ uint4 ld_ro_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Streaming read-only 16-byte load: data touched once (weights); do not allocate in L1.
__device__ __forceinline__ uint4 ld_stream_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// fp32 load cached in L2 only (bypasses L1): for data other CTAs wrote during this launch.
__device__ __forceinline__ float ld_cg_f32(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

// 16-byte load cached in L2 only (bypasses L1): for data other CTAs wrote during this launch.
__device__ __forceinline__ uint4 ld_cg_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// ---------------------------------------------------------------------------------------------
// 4. warp reductions (butterfly: every lane ends with the total)
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// ---------------------------------------------------------------------------------------------
// 5. grid-wide barrier.
//
// Requires a cooperative launch (cuLaunchCooperativeKernel): the driver then guarantees every CTA
// of the grid is resident, which is what makes spinning safe; the plan bounds the grid by
// CTAs/SM x SMs (ninferc.targets.plan.check_launch). Chosen over cooperative_groups::grid_group::
// sync() because that needs cooperative_groups.h, which NVRTC from pip wheels does not ship and
// which would tie rendered sources to a header search path.
//
// `bar` points to one unsigned int in global memory, zero-initialised once when it is allocated,
// private to one kernel launch at a time (one per stream is enough: launches on a stream are
// serial). Protocol (the same arithmetic CUDA's own grid sync uses): CTA (0,0,0) adds
// 0x80000000 - (nctas - 1), every other CTA adds 1, so after all nctas arrivals the low 31 bits are
// back to their value before the barrier and bit 31 has flipped; each CTA waits for bit 31 to
// differ from what it saw at arrival. The counter is therefore left reusable: it never needs
// resetting between barriers or between launches. Memory ordering: release on arrival (after a
// CTA-wide __syncthreads), acquire on the spin, then __syncthreads, so everything written by any
// CTA before the barrier is visible to every thread after it. Readers of data written by other
// CTAs should still use ld_cg_f32 (L1 is not coherent across SMs).
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ unsigned int atom_add_release_gpu(unsigned int* p, unsigned int v) {
  unsigned int old;
  asm volatile("atom.add.release.gpu.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

__device__ __forceinline__ unsigned int ld_acquire_gpu(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Arrive at the barrier counter `bar` shared by `nctas` CTAs (exactly one of them `first`) and wait for the
// last arrival (protocol above).
__device__ __forceinline__ void barrier_sync(unsigned int* bar, unsigned int nctas, bool first) {
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    const unsigned int inc = first ? (0x80000000u - (nctas - 1u)) : 1u;
    const unsigned int old = atom_add_release_gpu(bar, inc);
    while (((old ^ ld_acquire_gpu(bar)) & 0x80000000u) == 0u) {
      __nanosleep(32);
    }
  }
  __syncthreads();
}

// Every CTA of the grid.
__device__ __forceinline__ void grid_barrier(unsigned int* bar) {
  barrier_sync(bar, gridDim.x * gridDim.y * gridDim.z, (blockIdx.x | blockIdx.y | blockIdx.z) == 0);
}

// Wait (this thread) until the counter *p, which other CTAs of a co-resident grid raise by release atomics, is
// at least `target`; acquire: what they wrote before raising it is visible to this thread afterwards (through
// L2: read it with ld_cg_*). The grid must be co-resident (a cooperative launch), or the wait can deadlock.
__device__ __forceinline__ void wait_count_geq(const unsigned int* p, unsigned int target) {
  while (ld_acquire_gpu(p) < target) {
    __nanosleep(32);
  }
}

// ---------------------------------------------------------------------------------------------
// 6. activations (fp32)
// ---------------------------------------------------------------------------------------------

// silu(x) = x * sigmoid(x); expf (not __expf) so the result tracks the numpy reference closely.
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// ---------------------------------------------------------------------------------------------
// 7. programmatic dependent launch (PDL; PTX ISA "griddepcontrol", sm_90+)
// ---------------------------------------------------------------------------------------------
// A kernel launched with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may start while the
// previous kernel in the stream is still running; it must call pdl_wait() before touching any memory
// the previous kernels write (griddepcontrol.wait blocks until every prerequisite grid has completed
// and its memory operations are visible). pdl_launch_dependents() lets the next kernel's CTAs be
// scheduled as soon as every CTA of this grid has issued it (or exited) -- they then sit in their own
// pdl_wait(), so calling it early is safe. Reading constant data (weights) before pdl_wait() is
// allowed, and so is an L2 prefetch of anything (prefetch.global.L2 moves no data into registers and L2 is
// coherent for every SM, so a line the previous kernel writes afterwards is simply updated there): kernels
// prefetch constant weights, the GDN state and the first KV pages of their work before waiting, to overlap the
// previous kernel's tail. Data last written by a kernel two or more launches back may even be loaded into
// registers before the wait: every PDL-aware kernel lets its dependents launch only after its own pdl_wait()
// (NINFER_PDL_ENTRY below), so once this grid runs, the previous kernel has passed its wait, i.e. every kernel
// before that one has completed and its writes are visible (gdn_recurrent's decode preload of its state and conv ring relies
// on this; a kernel that called pdl_launch_dependents() before its wait would break it). Below sm_90 both are no-ops
// and the runtime launches without the attribute.
// NINFER_PDL_ENTRY marks a kernel as PDL-aware: the runtime only launches kernels whose source uses it
// with the attribute (ninferc.runtime.kernels.DeviceKernel.pdl_capable).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // ninferc: allow-magic (griddepcontrol is PTX sm_90+)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Ask for the 128-byte line holding p to be brought into L2 (PTX "prefetch.global.L2", sm_20+): lets a
// PDL-aware kernel start streaming constant data (weights) before its pdl_wait().
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // ninferc: allow-magic (griddepcontrol is PTX sm_90+)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------------------------
// 8. tensor cores, bf16x2 fma and async copies (sm_80+ PTX, so every ninferc target)
// ---------------------------------------------------------------------------------------------

// D += A * B with one warp-wide mma.sync.m16n8k16 (bf16 inputs, fp32 accumulate). Fragments (PTX ISA
// "Matrix Fragments for mma.m16n8k16 with floating point type"), with g = lane / 4, t = lane % 4, element 2i
// of a pair in the low half:
//   A 16x16 (row-major): a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..]
//   B 16x8  (k x n):     b0 = B[2t..2t+1][g],   b1 = B[2t+8..2t+9][g]
//   C/D 16x8:            d[0..1] = D[g][2t..2t+1], d[2..3] = D[g+8][2t..2t+1]
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned int (&a)[4], unsigned int b0,
                                               unsigned int b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same mma with fp16 inputs (mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32): same fragments, fp16
// halves instead of bf16. Products of fp16 values are exact in fp32.
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const unsigned int (&a)[4], unsigned int b0,
                                              unsigned int b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// a * b + c on two packed fp16 (element 2i in the low half), rounded to nearest even per element (PTX
// fma.rn.f16x2, sm_53+): exact whenever the result is an fp16 value, e.g. integers up to 2048.
__device__ __forceinline__ unsigned int fma_f16x2(unsigned int a, unsigned int b, unsigned int c) {
  unsigned int d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// a + b on two packed fp16, rounded to nearest even per element (PTX add.rn.f16x2, sm_53+).
__device__ __forceinline__ unsigned int add_f16x2(unsigned int a, unsigned int b) {
  unsigned int d;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Two fp32 -> packed fp16 (lo in the low half), each rounded to nearest even (PTX cvt.rn.f16x2.f32, sm_80+;
// overflow gives +-inf, values below the fp16 normal range become subnormal or zero).
__device__ __forceinline__ unsigned int f32x2_to_f16x2(float lo, float hi) {
  unsigned int d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// a * b + c on two packed bf16 (element 2i in the low half), rounded to nearest even per element
// (PTX fma.rn.bf16x2, sm_80+): exact whenever the result is a bf16 value, e.g. small integers.
__device__ __forceinline__ unsigned int fma_bf16x2(unsigned int a, unsigned int b, unsigned int c) {
  unsigned int d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Asynchronous global -> shared copies (PTX cp.async, sm_80+): 4 bytes cached in L1 (.ca; the only form for sizes
// below 16), both addresses aligned to the size. A thread's copies become visible to itself
// after cp_async_wait<N>() leaves at most N of its committed groups pending; to other threads after a
// barrier that follows that wait.
__device__ __forceinline__ void cp_async4(void* smem_dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((unsigned)__cvta_generic_to_shared(smem_dst)),
               "l"(src) : "memory");
}
// 16 bytes through L2 only (.cg: streamed data); src_bytes < 16 copies that many and zero-fills the rest
// (src_bytes = 0 reads nothing: a masked copy). Both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((unsigned)__cvta_generic_to_shared(smem_dst)),
               "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// ---------------------------------------------------------------------------------------------
// 9. integer dot products (PTX dp2a, sm_61+, so every ninferc target)
// ---------------------------------------------------------------------------------------------

// c + a.h0 * b.b0 + a.h1 * b.b1: the two signed 16-bit halves of a (h0 the low one) times the two signed low
// bytes of b, in int32 (PTX ISA "dp2a": .lo takes bytes 0 and 1 of b). Exact while the sum fits int32.
__device__ __forceinline__ int dp2a_lo(unsigned int a, unsigned int b, int c) {
  int d;
  asm("dp2a.lo.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
// The same with the two high bytes of b: c + a.h0 * b.b2 + a.h1 * b.b3 (PTX dp2a.hi).
__device__ __forceinline__ int dp2a_hi(unsigned int a, unsigned int b, int c) {
  int d;
  asm("dp2a.hi.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

}  // namespace ninfer

// Start of a PDL-aware kernel body: wait for the previous grids, then let the next one launch.
#define NINFER_PDL_ENTRY() \
  do {                     \
    ninfer::pdl_wait();    \
    ninfer::pdl_launch_dependents(); \
  } while (0)
