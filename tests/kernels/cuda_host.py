"""Run a rendered ninferc CUDA kernel on the CPU, for tests of index math and barriers without a GPU.

The rendered source (template + inlined headers) is compiled by the host C++ compiler against a small shim:

* every CUDA thread of a CTA is a fiber on one OS thread (entered through a ``ucontext``, switched by ``_setjmp`` /
  ``_longjmp``, which make no system call; stacks pooled between launches); CTAs run one after another;
* ``__syncthreads`` / ``__syncwarp`` / ``__shfl_xor_sync`` are barriers of a deterministic scheduler that runs
  each ready fiber up to its next barrier, in thread order (or reverse order: run both to expose a read that
  is not separated from another thread's write by a barrier, in either direction). Both keep the warps in step
  from barrier to barrier, so a race between warps whose barrier sequences are alike goes unseen; ``skew`` runs
  the lowest warp with a ready lane alone, through its warp barriers, until it waits at ``__syncthreads`` or is
  done -- each warp as far ahead of the next as the CTA barriers allow (non-cooperative launches only;
  ``NINFERC_EMU_SKEW=1`` runs every non-cooperative launch that does not ask for reverse order skewed: an audit of the
  whole emulated tier). A warp whose lanes wait
  at different barriers, or a CTA split between ``__syncthreads`` and a warp barrier, is reported as a
  deadlock (undefined behaviour on the GPU);
* ``__shared__`` becomes ``static`` (one CTA at a time), dynamic shared memory is a buffer filled with NaN
  before every CTA, ``%dynamic_smem_size`` reads its size, ``__trap()`` fails the launch;
* ``ninfer_common.cuh`` is replaced by host versions of the helpers (bf16 rounding to nearest even, warp sums
  through the shuffle barrier, ``silu``, the vector loads, the grid / group barriers); other headers are
  compiled as they are;
* ``cp_async16`` / ``cp_async4`` read their source when issued but write shared memory only when the issuing
  thread's ``cp_async_wait<N>`` covers their commit group (all groups but the N most recent), as on the GPU, so a
  wait count one group short leaves the buffer's old bytes (NaN before the CTA's first copy) to be read;
* ``ninfer::wait_count_geq`` (a thread waiting for a counter other CTAs raise) parks the fiber; in a cooperative
  launch the other CTAs run meanwhile and the wait re-checks every pass, and a pass in which nothing but those
  re-checks ran is a deadlock (so is any such wait in a non-cooperative launch);
* cooperative launches (``launch(..., cooperative=True)``) keep every CTA's fibers alive and run one CTA at a
  time up to its next grid barrier (``ninfer::grid_barrier``): the barrier releases once
  every CTA has reached it or exited, and it checks that the number of CTAs waiting equals the count the
  kernel passed (so a wrong participant count fails instead of hanging a GPU), applying the real counter
  arithmetic to the barrier word so tests can check it is left reusable. Static ``__shared__`` arrays are one
  copy for all CTAs, which is exact because a CTA runs alone between two grid barriers; a kernel keeping
  static shared data live across a grid barrier would not be emulated faithfully (dynamic shared memory is
  per CTA).

Host math (glibc ``expf``, ``fmaf``...) is correctly rounded where the GPU's is within 2 ulp, so results match
the GPU to fp32 rounding, not bit for bit. Compiled libraries are cached by source hash in a temp folder.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

_SHIM = r"""
#include <math.h>
#include <string.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <ucontext.h>
#include <setjmp.h>

struct dim3 { unsigned int x, y, z; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned int x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline uint2 make_uint2(unsigned int x, unsigned int y) { return uint2{x, y}; }
static inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return uint4{x, y, z, w}; }

namespace shim {
enum { READY = 0, WAIT_CTA = 1, WAIT_WARP = 2, DONE = 3, WAIT_GRID = 4, WAIT_SPIN = 5 };
// A cp.async copy this thread issued and no cp_async_wait has completed yet: the source bytes (read at issue), the
// destination, and the commit group it belongs to (the thread's count of commits when it was issued).
struct CpPending { void* dst; unsigned char bytes[16]; int size; int group; };
struct Fiber { ucontext_t ctx; jmp_buf jb; int started; dim3 tid; int state; int warp, lane; char* stack; dim3 bid; char* dyn;
               unsigned int* bar; unsigned int bar_n; int from_spin;
               Fiber* cta; unsigned long long xfer;  // the CTA's first fiber; this lane's shuffle value
               CpPending* cp; int cp_n, cp_cap, cp_groups; };  // this thread's cp.async copies in flight
static int progress = 0;  // a cooperative pass ran a fiber beyond a counter wait (see run_cta)
static Fiber* cur = nullptr;
static ucontext_t sched_ctx;
static dim3 block_dim, grid_dim;
static unsigned int dyn_smem_bytes = 0;
static int trapped = 0;
// a fiber's switch to the scheduler and back: _setjmp / _longjmp, which (unlike swapcontext) make no system call
// for the signal mask; a fiber is entered the first time through its ucontext (run_cta)
static jmp_buf sched_jb;
static inline void wait(int st) { cur->state = st; if (!_setjmp(cur->jb)) _longjmp(sched_jb, 1); }
}  // namespace shim

#define threadIdx (shim::cur->tid)
#define blockIdx (shim::cur->bid)
#define blockDim (shim::block_dim)
#define gridDim (shim::grid_dim)
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

static inline void __syncthreads() { shim::wait(shim::WAIT_CTA); }
static inline void __syncwarp(unsigned int = 0xffffffffu) { shim::wait(shim::WAIT_WARP); }
// Shuffles: each lane puts its value in its own fiber, a warp barrier, each reads its source lane's fiber (of the
// same CTA: kept per CTA, as CTAs of a cooperative launch may interleave at counter waits), a warp barrier.
namespace shim {
template <typename T> static inline void put_lane(T v) {
  unsigned long long u = 0; memcpy(&u, &v, sizeof(T)); cur->xfer = u;
}
template <typename T> static inline T get_lane(int l) {
  T v; memcpy(&v, &cur->cta[cur->warp * 32 + l].xfer, sizeof(T)); return v;
}
template <typename T> static inline T shfl_from(T v, int src) {
  put_lane(v); __syncwarp(); const T r = get_lane<T>(src & 31); __syncwarp(); return r;
}
}  // namespace shim
static inline float __shfl_xor_sync(unsigned int, float v, int off) { return shim::shfl_from(v, shim::cur->lane ^ off); }
static inline float __shfl_sync(unsigned int, float v, int src) { return shim::shfl_from(v, src); }
static inline unsigned long long __shfl_xor_sync(unsigned int, unsigned long long v, int off) {
  return shim::shfl_from(v, shim::cur->lane ^ off);
}
// The other warp intrinsics the templates use (every lane of the warp takes part, as in the kernels).
template <typename T> static inline T __shfl_up_sync(unsigned int, T v, unsigned int d) {
  const int l = shim::cur->lane; return shim::shfl_from(v, l >= (int)d ? l - (int)d : l);
}
template <typename T> static inline T __shfl_down_sync(unsigned int, T v, unsigned int d) {
  const int l = shim::cur->lane; return shim::shfl_from(v, l + (int)d < 32 ? l + (int)d : l);
}
static inline unsigned int __ballot_sync(unsigned int, int pred) {
  shim::put_lane<unsigned int>(pred ? 1u : 0u); __syncwarp();
  unsigned int r = 0;
  for (int l = 0; l < 32; ++l) r |= shim::get_lane<unsigned int>(l) << l;
  __syncwarp(); return r;
}
static inline int __any_sync(unsigned int m, int pred) { return __ballot_sync(m, pred) != 0u; }
static inline unsigned int __match_any_sync(unsigned int, unsigned int v) {
  shim::put_lane(v); __syncwarp();
  unsigned int r = 0;
  for (int l = 0; l < 32; ++l) r |= (shim::get_lane<unsigned int>(l) == v ? 1u : 0u) << l;
  __syncwarp(); return r;
}
static inline unsigned int __reduce_add_sync(unsigned int, unsigned int v) {
  shim::put_lane(v); __syncwarp();
  unsigned int r = 0;
  for (int l = 0; l < 32; ++l) r += shim::get_lane<unsigned int>(l);
  __syncwarp(); return r;
}
static inline int __clz(unsigned int v) { return v ? __builtin_clz(v) : 32; }
static inline int __ffs(unsigned int v) { return __builtin_ffs((int)v); }
// Device-scope atomics and fences: one OS thread runs every fiber, so plain read-modify-writes are atomic.
template <typename T> static inline T atomicMax(T* a, T v) { const T o = *a; if (v > o) *a = v; return o; }
template <typename T> static inline T atomicAdd(T* a, T v) { const T o = *a; *a = o + v; return o; }
template <typename T> static inline T atomicExch(T* a, T v) { const T o = *a; *a = v; return o; }
static inline int __popc(unsigned int v) { return __builtin_popcount(v); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline void __threadfence() {}
template <typename T> static inline T __ldg(const T* p) { return *p; }  // the read-only cache path: a plain load
static inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return (unsigned int)(((unsigned long long)a * b) >> 32);
}
static inline unsigned int __float2uint_rn(float f) { return (unsigned int)llrintf(f); }
static inline float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
  const unsigned long long v = ((unsigned long long)y << 32) | x;  // bytes 0..3 of x, then 4..7 of y
  unsigned int r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned int)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return r;
}
static inline unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline int __float2int_rn(float f) { return (int)lrintf(f); }  // round to nearest even (default mode)
static inline void __trap() {
  shim::trapped = 1;
  shim::cur->state = shim::DONE;
  _longjmp(shim::sched_jb, 1);
}

namespace ninfer {
constexpr int kWarpSize = 32;
constexpr unsigned int kFullMask = 0xffffffffu;
static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
static inline int imin(int a, int b) { return a < b ? a : b; }
static inline float bf16_lo(unsigned int p) { return __uint_as_float(p << 16); }
static inline float bf16_hi(unsigned int p) { return __uint_as_float(p & 0xffff0000u); }
static inline unsigned short f32_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
static inline float warp_sum(float v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline void pdl_wait() {}               // one grid at a time on the host: nothing to wait for
static inline void pdl_launch_dependents() {}
static inline void prefetch_l2(const void*) {}
static inline void bf16x8_to_f32(const uint4& v, float (&f)[8]) {
  f[0] = bf16_lo(v.x); f[1] = bf16_hi(v.x); f[2] = bf16_lo(v.y); f[3] = bf16_hi(v.y);
  f[4] = bf16_lo(v.z); f[5] = bf16_hi(v.z); f[6] = bf16_lo(v.w); f[7] = bf16_hi(v.w);
}
static inline float dot_bf16x8(const uint4& w, const float (&x)[8], float acc) {
  acc = fmaf(bf16_lo(w.x), x[0], acc); acc = fmaf(bf16_hi(w.x), x[1], acc);
  acc = fmaf(bf16_lo(w.y), x[2], acc); acc = fmaf(bf16_hi(w.y), x[3], acc);
  acc = fmaf(bf16_lo(w.z), x[4], acc); acc = fmaf(bf16_hi(w.z), x[5], acc);
  acc = fmaf(bf16_lo(w.w), x[6], acc); acc = fmaf(bf16_hi(w.w), x[7], acc);
  return acc;
}
static inline uint4 ld_ro_v4(const void* p) { uint4 v; memcpy(&v, p, 16); return v; }
static inline uint4 ld_stream_v4(const void* p) { uint4 v; memcpy(&v, p, 16); return v; }
static inline float ld_cg_f32(const float* p) { return *p; }
static inline uint4 ld_cg_v4(const void* p) { uint4 v; memcpy(&v, p, 16); return v; }
// cp.async on the host, deferred as on the GPU: a copy reads its source when issued but lands in shared memory only
// when this thread's cp_async_wait<N> completes its commit group (every group but the N most recent; copies not
// yet committed stay in flight), so a read of a buffer whose group is still pending -- a wait count one too high,
// a missing commit -- sees the buffer's old bytes (NaN before the CTA's first copy), not the new ones.
static inline void cp_issue(void* dst, const void* src, int size, int n) {
  ::shim::Fiber* f = ::shim::cur;
  if (f->cp_n == f->cp_cap) {
    f->cp_cap = f->cp_cap ? 2 * f->cp_cap : 64;
    f->cp = (::shim::CpPending*)realloc(f->cp, sizeof(::shim::CpPending) * (size_t)f->cp_cap);
  }
  ::shim::CpPending& c = f->cp[f->cp_n++];
  c.dst = dst;
  c.size = size;
  c.group = f->cp_groups;
  memset(c.bytes, 0, sizeof(c.bytes));
  if (n > 0) memcpy(c.bytes, src, (size_t)n);
}
static inline void cp_async4(void* dst, const void* src) { cp_issue(dst, src, 4, 4); }
static inline void cp_async16(void* dst, const void* src, int n) { cp_issue(dst, src, 16, n); }
static inline void cp_async_commit() { ++::shim::cur->cp_groups; }
template <int N> static inline void cp_async_wait() {
  ::shim::Fiber* f = ::shim::cur;
  int kept = 0;
  for (int i = 0; i < f->cp_n; ++i) {  // in issue order
    ::shim::CpPending& c = f->cp[i];
    if (c.group < f->cp_groups - N) memcpy(c.dst, c.bytes, (size_t)c.size);
    else f->cp[kept++] = c;
  }
  f->cp_n = kept;
}
// fma.rn.bf16x2: per half, the fp32 fma (exact for bf16 inputs' products up to 16 bits) rounded to bf16.
static inline unsigned int fma_bf16x2(unsigned int a, unsigned int b, unsigned int c) {
  unsigned int d = 0;
  for (int h = 0; h < 2; ++h) {
    const float r = fmaf(__uint_as_float(((a >> (16 * h)) & 0xffffu) << 16), __uint_as_float(((b >> (16 * h)) & 0xffffu) << 16),
                         __uint_as_float(((c >> (16 * h)) & 0xffffu) << 16));
    d |= (unsigned int)f32_to_bf16(r) << (16 * h);
  }
  return d;
}
// fp16 on the host: GCC's _Float16 (IEEE binary16, conversions rounded to nearest even, subnormals kept).
static inline float f16_bits_to_f32(unsigned int h) { _Float16 v; unsigned short b = (unsigned short)h; memcpy(&v, &b, 2); return (float)v; }
static inline unsigned int f32_to_f16_bits(float f) { _Float16 v = (_Float16)f; unsigned short b; memcpy(&b, &v, 2); return b; }
static inline unsigned int f32x2_to_f16x2(float lo, float hi) { return f32_to_f16_bits(lo) | (f32_to_f16_bits(hi) << 16); }
// fma.rn.f16x2: per half, the exact a * b + c (double: exact for fp16 inputs) rounded once to fp16.
static inline unsigned int fma_f16x2(unsigned int a, unsigned int b, unsigned int c) {
  unsigned int d = 0;
  for (int h = 0; h < 2; ++h) {
    const double r = (double)f16_bits_to_f32((a >> (16 * h)) & 0xffffu) * (double)f16_bits_to_f32((b >> (16 * h)) & 0xffffu)
                     + (double)f16_bits_to_f32((c >> (16 * h)) & 0xffffu);
    _Float16 v = (_Float16)r;  // double -> fp16, one rounding
    unsigned short bits; memcpy(&bits, &v, 2);
    d |= (unsigned int)bits << (16 * h);
  }
  return d;
}
static inline unsigned int add_f16x2(unsigned int a, unsigned int b) { return fma_f16x2(a, 0x3C003C00u, b); }
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 for one warp (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type"), g = lane / 4, t = lane % 4, element 2i of a pair in the low half:
// A (16 x 16): a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9];
// B (16 x 8, k x n): b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]; D: d0, d1 = D[g][2t, 2t+1], d2, d3 = D[g+8][..].
// ``half(word, hi)`` decodes one 16-bit element. The warp's fragments are gathered through warp barriers;
// products summed in double, then rounded once.
template <typename Half>
static inline void mma_16816(float (&d)[4], const unsigned int (&a)[4], unsigned int b0, unsigned int b1, Half half) {
  static unsigned int fa[32][32][4], fb[32][32][2];
  const int w = shim::cur->warp, l = shim::cur->lane;
  for (int i = 0; i < 4; ++i) fa[w][l][i] = a[i];
  fb[w][l][0] = b0;
  fb[w][l][1] = b1;
  __syncwarp();
  auto A = [&](int r, int k) { return half(fa[w][(r % 8) * 4 + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)], k % 2); };
  auto B = [&](int k, int n) { return half(fb[w][n * 4 + (k % 8) / 2][k >= 8], k % 2); };
  const int g = l / 4, t = l % 4;
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int r = g + 8 * (e / 2), c = 2 * t + e % 2;
    double acc = d[e];
    for (int k = 0; k < 16; ++k) acc += (double)A(r, k) * (double)B(k, c);
    out[e] = (float)acc;
  }
  __syncwarp();
  for (int e = 0; e < 4; ++e) d[e] = out[e];
}
static inline float bf16_half(unsigned int word, int hi) { return hi ? __uint_as_float(word & 0xffff0000u) : __uint_as_float(word << 16); }
static inline float f16_half(unsigned int word, int hi) { return f16_bits_to_f32(hi ? word >> 16 : word & 0xffffu); }
static inline void mma_bf16_16816(float (&d)[4], const unsigned int (&a)[4], unsigned int b0, unsigned int b1) {
  mma_16816(d, a, b0, b1, bf16_half);
}
static inline void mma_f16_16816(float (&d)[4], const unsigned int (&a)[4], unsigned int b0, unsigned int b1) {
  mma_16816(d, a, b0, b1, f16_half);
}
// dp2a.{lo,hi}.s32.s32: the two signed 16-bit halves of a times two signed bytes of b (bytes 0, 1 or 2, 3), plus c.
static inline int dp2a_sel(unsigned int a, unsigned int b, int c, int hi) {
  const long long s = (long long)c + (long long)(short)(a & 0xffffu) * (signed char)((b >> (16 * hi)) & 0xffu) +
                      (long long)(short)(a >> 16) * (signed char)((b >> (16 * hi + 8)) & 0xffu);
  return (int)(unsigned int)(unsigned long long)s;  // wraps like the 32-bit adder
}
static inline int dp2a_lo(unsigned int a, unsigned int b, int c) { return dp2a_sel(a, b, c, 0); }
static inline int dp2a_hi(unsigned int a, unsigned int b, int c) { return dp2a_sel(a, b, c, 1); }
// Grid / group barrier of a cooperative emulated launch: every thread of the CTA parks in WAIT_GRID; thread 0
// records the counter and the participant count for the scheduler, which checks the count and applies the
// real protocol's arithmetic (ninfer_common.cuh section 5) when it releases the barrier.
static inline void barrier_sync(unsigned int* bar, unsigned int nctas, bool first) {
  shim::cur->bar = bar;
  shim::cur->bar_n = nctas;
  (void)first;
  shim::wait(shim::WAIT_GRID);
}
// A counter wait (ninfer_common.cuh section 5): the fiber parks (WAIT_SPIN) until another CTA of the cooperative
// launch has raised the counter; the scheduler runs the other CTAs meanwhile and reports a deadlock when no
// parked fiber's counter moves in a whole pass over the grid.
static inline void wait_count_geq(const unsigned int* p, unsigned int target) {
  while (*(volatile const unsigned int*)p < target) shim::wait(shim::WAIT_SPIN);
}
static inline void grid_barrier(unsigned int* bar) {
  barrier_sync(bar, shim::grid_dim.x * shim::grid_dim.y * shim::grid_dim.z,
               (shim::cur->bid.x | shim::cur->bid.y | shim::cur->bid.z) == 0);
}
}  // namespace ninfer
#define NINFER_PDL_ENTRY() do { ninfer::pdl_wait(); ninfer::pdl_launch_dependents(); } while (0)
"""

_LAUNCHER = r"""
static void* const* g_args = nullptr;
static void fiber_main() {
  shim_call(g_args);
  shim::cur->state = shim::DONE;
  _longjmp(shim::sched_jb, 1);  // never returns: its ucontext's uc_link frame is gone
}

// Run the fibers f[0..threads) of one CTA until every live one waits at a grid barrier or is done.
// order 0: every ready fiber per pass in thread order, 1: reverse order, 2 (skew): only the lowest warp with a
// ready fiber, in thread order. Returns 0, 1 on __trap(), 2 on a CTA/warp barrier deadlock.
static int run_cta(shim::Fiber* f, int threads, int order) {
  for (;;) {
    int lo = 0, hi = threads;  // the fibers this pass may run
    if (order == 2) {
      int first = -1;
      for (int i = 0; i < threads && first < 0; ++i)
        if (f[i].state == shim::READY) first = i;
      if (first >= 0) {
        lo = first / 32 * 32;
        hi = lo + 32 < threads ? lo + 32 : threads;
      }
    }
    for (int k = lo; k < hi; ++k) {
      const int i = order == 1 ? threads - 1 - k : k;
      if (f[i].state != shim::READY) continue;
      shim::cur = &f[i];
      const int was_spin = f[i].from_spin;
      f[i].from_spin = 0;
      if (!_setjmp(shim::sched_jb)) {
        if (!f[i].started) {
          f[i].started = 1;
          swapcontext(&shim::sched_ctx, &f[i].ctx);  // the first entry; the fiber comes back by _longjmp
        } else {
          _longjmp(f[i].jb, 1);
        }
      }
      if (shim::trapped) return 1;
      if (!(was_spin && f[i].state == shim::WAIT_SPIN)) shim::progress = 1;  // not just a counter re-check
    }
    int live = 0, at_cta = 0, at_grid = 0, at_spin = 0, ready = 0;
    for (int i = 0; i < threads; ++i) {
      if (f[i].state == shim::READY) ++ready;  // (skew: the warps that did not run this pass)
      if (f[i].state != shim::DONE) ++live;
      if (f[i].state == shim::WAIT_CTA) ++at_cta;
      if (f[i].state == shim::WAIT_GRID) ++at_grid;
      if (f[i].state == shim::WAIT_SPIN) ++at_spin;
    }
    if (live == 0 || (at_grid && at_grid == live)) return 0;
    if (at_grid && !ready) return 2;  // some threads at a grid barrier, the others stuck elsewhere
    bool released = false;
    for (int w = 0; w * 32 < threads; ++w) {
      int waiting = 0, others = 0;
      for (int i = w * 32; i < threads && i < w * 32 + 32; ++i) {
        if (f[i].state == shim::WAIT_WARP) ++waiting;
        else if (f[i].state != shim::DONE) ++others;
      }
      if (waiting && !others) {
        for (int i = w * 32; i < threads && i < w * 32 + 32; ++i)
          if (f[i].state == shim::WAIT_WARP) f[i].state = shim::READY;
        released = true;
      }
    }
    if (!released && at_cta == live) {
      for (int i = 0; i < threads; ++i)
        if (f[i].state == shim::WAIT_CTA) f[i].state = shim::READY;
      released = true;
    }
    if (!released && ready) continue;
    if (!released) return at_spin ? 4 : 2;  // 4: parked at counter waits (other CTAs must run)
  }
}

static void init_fiber(shim::Fiber& f, int i, dim3 bid, char* stack, size_t stack_bytes, char* dyn) {
  static ucontext_t tmpl;  // getcontext once (a system call), copied for every fiber
  static int have_tmpl = 0;
  if (!have_tmpl) { getcontext(&tmpl); have_tmpl = 1; }
  f.ctx = tmpl;
  f.started = 0;
  f.ctx.uc_stack.ss_sp = stack;
  f.ctx.uc_stack.ss_size = stack_bytes;
  f.ctx.uc_link = &shim::sched_ctx;
  makecontext(&f.ctx, fiber_main, 0);
  f.tid = dim3{(unsigned)i, 0u, 0u};
  f.bid = bid;
  f.dyn = dyn;
  f.warp = i / 32;
  f.lane = i % 32;
  f.state = shim::READY;
  f.bar = nullptr;
  f.bar_n = 0;
  f.from_spin = 0;
  f.cta = nullptr;
  f.xfer = 0;
  f.cp_n = 0;  // (copies a finished CTA left in flight land nowhere: its shared memory is gone)
  f.cp_groups = 0;
}

// Returns 0 on success, 1 on __trap(), 2 on a barrier deadlock, 3 on a grid barrier whose waiting CTAs do
// not match the count the kernel passed (or CTAs waiting on different counters).
extern "C" int shim_launch(int gx, int gy, int gz, int threads, unsigned int dyn_bytes, int reverse, int coop,
                           void* const* args) {
  const int nctas = gx * gy * gz;
  const int live_ctas = coop ? nctas : 1;  // CTAs whose fibers exist at once
  const size_t kStack = coop ? 64 * 1024 : 256 * 1024;
  const size_t dyn_alloc = dyn_bytes ? ((dyn_bytes + 63) / 64) * 64 : 64;
  shim::Fiber* f = (shim::Fiber*)calloc((size_t)live_ctas * threads, sizeof(shim::Fiber));
  // fiber stacks come from a pool kept between launches (allocating them per launch -- an mmap and its page
  // faults per thread -- cost more than running a small kernel)
  static char* pool = nullptr;
  static size_t pool_bytes = 0;
  const size_t need = (size_t)live_ctas * threads * kStack;
  if (need > pool_bytes) {
    free(pool);
    pool = (char*)aligned_alloc(64, need);
    pool_bytes = need;
  }
  for (int i = 0; i < live_ctas * threads; ++i) f[i].stack = pool + (size_t)i * kStack;
  char* dyn = (char*)aligned_alloc(64, dyn_alloc * live_ctas);
  shim::dyn_smem_bytes = dyn_bytes;
  shim::grid_dim = dim3{(unsigned)gx, (unsigned)gy, (unsigned)gz};
  shim::block_dim = dim3{(unsigned)threads, 1u, 1u};
  shim::trapped = 0;
  g_args = args;
  int rc = 0;
  if (!coop) {
    for (int z = 0; z < gz && rc == 0; ++z)
      for (int y = 0; y < gy && rc == 0; ++y)
        for (int x = 0; x < gx && rc == 0; ++x) {
          memset(dyn, 0xff, dyn_bytes);  // NaN in every float
          for (int i = 0; i < threads; ++i) {
            init_fiber(f[i], i, dim3{(unsigned)x, (unsigned)y, (unsigned)z}, f[i].stack, kStack, dyn);
            f[i].cta = f;
          }
          rc = run_cta(f, threads, reverse);
          if (rc == 4) rc = 2;  // a counter wait no other CTA can satisfy (one CTA at a time)
          if (rc == 0)
            for (int i = 0; i < threads; ++i)
              if (f[i].state == shim::WAIT_GRID) rc = 3;  // a grid barrier in a non-cooperative launch
        }
  } else {
    memset(dyn, 0xff, dyn_alloc * live_ctas);
    for (int c = 0; c < nctas; ++c) {
      const dim3 bid{(unsigned)(c % gx), (unsigned)((c / gx) % gy), (unsigned)(c / (gx * gy))};
      for (int i = 0; i < threads; ++i) {
        init_fiber(f[c * threads + i], i, bid, f[c * threads + i].stack, kStack, dyn + c * dyn_alloc);
        f[c * threads + i].cta = f + (size_t)c * threads;
      }
    }
    for (;;) {
      shim::progress = 0;
      for (int c = 0; c < nctas && rc == 0; ++c) {
        rc = run_cta(f + (size_t)c * threads, threads, reverse);
        if (rc == 4) rc = 0;  // parked at a counter wait
      }
      if (rc) break;
      int spinning = 0;
      for (int i = 0; i < nctas * threads; ++i) spinning += f[i].state == shim::WAIT_SPIN;
      if (spinning) {  // counter waits: re-check them next pass, unless nothing but re-checks ran in this one
        if (!shim::progress) { rc = 2; break; }
        for (int i = 0; i < nctas * threads; ++i)
          if (f[i].state == shim::WAIT_SPIN) { f[i].state = shim::READY; f[i].from_spin = 1; }
        continue;
      }
      int waiting = 0, done = 0;
      unsigned int* bar = nullptr;
      unsigned int count = 0;
      bool first_waiting = false;
      for (int c = 0; c < nctas; ++c) {
        shim::Fiber& t0 = f[(size_t)c * threads];
        bool any_live = false;
        for (int i = 0; i < threads; ++i) any_live |= f[(size_t)c * threads + i].state != shim::DONE;
        if (!any_live) { ++done; continue; }
        if (t0.state != shim::WAIT_GRID) { rc = 2; break; }  // thread 0 exited while others wait
        if (bar && (t0.bar != bar || t0.bar_n != count)) { rc = 3; break; }
        bar = t0.bar;
        count = t0.bar_n;
        ++waiting;
        first_waiting |= (t0.bid.x | t0.bid.y | t0.bid.z) == 0;
      }
      if (rc) break;
      if (waiting == 0) break;  // every CTA finished
      if ((unsigned)waiting != count || !first_waiting) { rc = 3; break; }
      // the protocol's arithmetic: CTA 0 adds 0x80000000 - (n - 1), the others 1 (bit 31 flips, low bits back)
      *bar += 0x80000000u - (count - 1u);
      *bar += count - 1u;
      for (int i = 0; i < nctas * threads; ++i)
        if (f[i].state == shim::WAIT_GRID) f[i].state = shim::READY;
    }
  }
  for (int i = 0; i < live_ctas * threads; ++i) free(f[i].cp);
  free(f);
  free(dyn);
  return rc;
}
"""

_BLOCK_RE = re.compile(r"// ---- begin ninfer_common\.cuh \(inlined by ninferc\) ----\n.*?// ---- end ninfer_common\.cuh ----",
                       re.S)
_DYN_RE = re.compile(r"extern __shared__ (\w+) (\w+)\[\];")
_DYNSIZE_RE = re.compile(r'asm\("mov\.u32 %0, %%dynamic_smem_size;" : "=r"\((\w+)\)\);')


# Host versions of CUDA intrinsics the attention kernels use beyond the shim, and their aligned dynamic shared
# memory declaration (which _DYN_RE does not match): added by with_host_helpers.
_HELPERS = r"""
// ---- host helpers added by cuda_host.with_host_helpers ----
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
// sincospif (attn_common.cuh rope_cos_sin): sin / cos of pi x, x in [-1, 1] there, through the double library
static inline void sincospif(float x, float* s, float* c) {
  *s = (float)sin(3.14159265358979323846 * (double)x);
  *c = (float)cos(3.14159265358979323846 * (double)x);
}
"""  # __float2int_rn is in the shim
_END_COMMON = "// ---- end ninfer_common.cuh ----\n"
_ALIGNED_SMEM = "extern __shared__ __align__(16) unsigned char smem[];"


def with_host_helpers(source: str) -> str:
    """A rendered kernel with the host helpers above added after its inlined ``ninfer_common.cuh`` (once) and its
    aligned ``smem`` declaration pointed at the emulator's dynamic shared memory: what the attention kernels need
    to compile for the host; other kernels are unchanged by it."""
    if _END_COMMON in source and "cuda_host.with_host_helpers" not in source:
        source = source.replace(_END_COMMON, _END_COMMON + _HELPERS, 1)
    return source.replace(_ALIGNED_SMEM, "unsigned char* smem = reinterpret_cast<unsigned char*>(shim::cur->dyn);")


class HostKernelError(RuntimeError):
    """The emulated launch trapped, deadlocked, or the source could not be compiled for the host."""


def _cache_dir() -> Path:
    d = Path(os.environ.get("NINFERC_HOST_CACHE", Path(tempfile.gettempdir()) / "ninferc-host-kernels"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def _signature(source: str, entry: str) -> list[tuple[str, str]]:
    m = re.search(r"\b" + re.escape(entry) + r"\(([^)]*)\)\s*\{", source, re.S)
    if not m:
        raise HostKernelError(f"entry {entry!r} not found in the source")
    params = []
    for raw in m.group(1).split(","):
        p = " ".join(raw.replace("__restrict__", "").split())
        name = re.findall(r"(\w+)$", p)[0]
        typ = p[: -len(name)].strip()
        params.append((typ, name))
    return params


class HostKernel:
    """A rendered kernel compiled for the host.

    Args:
        source: rendered CUDA C (``KernelSpec.render()``).
        entry: the ``extern "C"`` entry name.

    Raises:
        HostKernelError: the host compiler rejected the transformed source (message carries its log).
    """

    def __init__(self, source: str, entry: str):
        self.entry = entry
        self.params = _signature(source, entry)
        body, n = _BLOCK_RE.subn("// ninfer_common.cuh replaced by the host shim", source)
        if n != 1:
            raise HostKernelError("expected exactly one inlined ninfer_common.cuh block")
        body = _DYN_RE.sub(r"\1* \2 = reinterpret_cast<\1*>(shim::cur->dyn);", body)
        body = _DYNSIZE_RE.sub(r"\1 = shim::dyn_smem_bytes;", body)
        call = ", ".join(f"*({t}*)a[{i}]" for i, (t, _) in enumerate(self.params))
        tramp = f'\nstatic void shim_call(void* const* a) {{ {entry}({call}); }}\n'
        full = _SHIM + body + tramp + _LAUNCHER
        key = hashlib.sha256(full.encode()).hexdigest()[:20]
        lib = _cache_dir() / f"{entry[:60]}-{key}.so"
        if not lib.exists():
            src = lib.with_suffix(".cpp")
            src.write_text(full)
            tmp = lib.with_suffix(f".{os.getpid()}.tmp")
            cmd = ["g++", "-std=c++17", "-O2", "-U_FORTIFY_SOURCE", "-shared", "-fPIC", "-w", "-o", str(tmp), str(src)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise HostKernelError(f"host compile of {entry} failed ({src}):\n{r.stderr[-4000:]}")
            os.replace(tmp, lib)
        self._lib = ctypes.CDLL(str(lib))
        self._lib.shim_launch.restype = ctypes.c_int
        self._lib.shim_launch.argtypes = [ctypes.c_int] * 4 + [ctypes.c_uint, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]

    def launch(self, grid, block, args, *, smem: int = 0, reverse: bool = False, cooperative: bool = False,
               skew: bool = False) -> None:
        """Run the grid. ``args`` in kernel order: numpy arrays (passed by address; must stay alive and
        contiguous), numpy/int/float scalars, ``np.uint64(0)`` for a null pointer, or ``np.uint64(address)`` for a
        pointer into memory the caller keeps alive. ``cooperative``: every
        CTA's fibers live at once and grid barriers are honoured (module docstring). ``reverse`` / ``skew``: the
        scheduler's order (module docstring; at most one of them; ``skew`` not with ``cooperative``).

        Raises:
            HostKernelError: wrong argument count/kind, ``__trap()``, a barrier deadlock, or a grid barrier
                whose participants do not match its count (or one reached outside a cooperative launch);
                ``reverse`` and ``skew`` both set, or ``skew`` with ``cooperative``.
        """
        if reverse and skew:
            raise HostKernelError(f"{self.entry}: reverse and skew are two scheduler orders; pick one")
        if not reverse and not cooperative and os.environ.get("NINFERC_EMU_SKEW") == "1":
            skew = True  # the whole emulated tier's non-cooperative launches, skewed (an audit)
        if skew and cooperative:
            raise HostKernelError(f"{self.entry}: the skewed order is for non-cooperative launches (a cooperative "
                                  "launch's CTAs take turns at grid barriers and counter waits)")
        grid = tuple(int(g) for g in (tuple(grid) + (1, 1))[:3])
        threads = int(block[0] if isinstance(block, (tuple, list)) else block)
        if len(args) != len(self.params):
            raise HostKernelError(f"{self.entry}: {len(args)} args for {len(self.params)} parameters")
        holders = []
        for (typ, name), a in zip(self.params, args):
            if "*" in typ:
                if isinstance(a, np.ndarray):
                    if not a.flags.c_contiguous:
                        raise HostKernelError(f"{self.entry}: argument {name} must be C-contiguous")
                    holders.append(ctypes.c_void_p(a.ctypes.data))
                elif int(a) == 0 or isinstance(a, np.uint64):  # null, or an address (tests/emulated_device.py)
                    holders.append(ctypes.c_void_p(int(a)))
                else:
                    raise HostKernelError(f"{self.entry}: pointer argument {name} got {type(a).__name__}")
            elif typ in ("int", "const int"):
                holders.append(ctypes.c_int(int(a)))
            elif typ in ("unsigned int", "const unsigned int"):
                holders.append(ctypes.c_uint(int(a)))
            elif typ in ("float", "const float"):
                holders.append(ctypes.c_float(float(a)))
            else:
                raise HostKernelError(f"{self.entry}: unsupported parameter type {typ!r} ({name})")
        arr = (ctypes.c_void_p * len(holders))(*[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
        rc = self._lib.shim_launch(grid[0], grid[1], grid[2], threads, int(smem), 2 if skew else int(reverse),
                                   int(cooperative), arr)
        if rc == 1:
            raise HostKernelError(f"{self.entry}: __trap() (grid {grid}, block {threads}, smem {smem})")
        if rc == 2:
            raise HostKernelError(f"{self.entry}: barrier deadlock (divergent __syncthreads/__syncwarp, or a CTA "
                                  "stuck while others wait at a grid barrier, or counter waits no CTA can satisfy)")
        if rc == 3:
            raise HostKernelError(f"{self.entry}: grid barrier mismatch (CTAs waiting != the count passed, CTA 0 "
                                  "absent, different counters, or a grid barrier in a non-cooperative launch)")
