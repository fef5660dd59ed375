"""Device probe (diagnostic, runs 121-129): how fast one attention layer's paged K/V can be moved at the 27B shape
(4 KV heads, head_dim 256, 64-token bf16 pages; 8,192 tokens = 128 pages = 33.5 MB of K + V), by kernels that only
move the bytes -- no attention arithmetic -- so the staged ``attn_decode`` (~20 us per layer at 8,192 in the traced
step, bench/NOTES.md run 126, ~1.7 TB/s) can be set against its memory path alone.

Kernels (raw CUDA here, not ninferc templates; grid (splits, 4 KV heads), 128 threads, pages through a shuffled page
table as the pool is used):
  cpasync_seq   per page: cp.async of its K and V rows (64 KB) into shared memory, wait, barrier (the staged
                kernel's per-tile order without any overlap)
  cpasync_all   every page of the CTA's range at once (pps x 64 KB of shared memory), one wait
  ldg           16-byte ld.global.nc loads into registers, 16 per thread issued before any is used, XOR-reduced
Each configuration is timed as a CUDA graph of 50 launches (no host launch gaps), median of 5 replays, twice: "l2"
re-reads one pool (33.5 MB fits the H200's 50 MB L2, so this is L2 bandwidth), "dram" rotates over 5 pools (168 MB)
so each launch reads lines evicted since its pool's last turn, as in the decode step where the weights stream between
layers. The reference is CuPy's device-to-device copy of one pool's 33.5 MB (read + write).

Usage (GPU machine): python bench/kv_stream_probe.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

SRC = r"""
extern "C" __global__ void __launch_bounds__(128) cpasync_seq(const unsigned short* __restrict__ k,
    const unsigned short* __restrict__ v, const int* __restrict__ pt, int pps, unsigned int* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int kvh = blockIdx.y;
  unsigned int acc = 0;
  for (int i = 0; i < pps; ++i) {
    const int page = pt[blockIdx.x * pps + i];
    const size_t row0 = ((size_t)page * 4 + kvh) * 64;
    const unsigned char* ks = reinterpret_cast<const unsigned char*>(k + row0 * 256);
    const unsigned char* vs = reinterpret_cast<const unsigned char*>(v + row0 * 256);
    for (int o = threadIdx.x * 16; o < 32768; o += 128 * 16) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"((unsigned)__cvta_generic_to_shared(smem + o)), "l"(ks + o) : "memory");
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"((unsigned)__cvta_generic_to_shared(smem + 32768 + o)), "l"(vs + o) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    acc ^= reinterpret_cast<const unsigned int*>(smem)[threadIdx.x] ^ reinterpret_cast<const unsigned int*>(smem + 32768)[threadIdx.x];
    __syncthreads();
  }
  if (acc == 0x12345678u) out[0] = acc;
}

extern "C" __global__ void __launch_bounds__(128) cpasync_all(const unsigned short* __restrict__ k,
    const unsigned short* __restrict__ v, const int* __restrict__ pt, int pps, unsigned int* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int kvh = blockIdx.y;
  for (int i = 0; i < pps; ++i) {
    const int page = pt[blockIdx.x * pps + i];
    const size_t row0 = ((size_t)page * 4 + kvh) * 64;
    const unsigned char* ks = reinterpret_cast<const unsigned char*>(k + row0 * 256);
    const unsigned char* vs = reinterpret_cast<const unsigned char*>(v + row0 * 256);
    unsigned char* d = smem + (size_t)i * 65536;
    for (int o = threadIdx.x * 16; o < 32768; o += 128 * 16) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"((unsigned)__cvta_generic_to_shared(d + o)), "l"(ks + o) : "memory");
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"((unsigned)__cvta_generic_to_shared(d + 32768 + o)), "l"(vs + o) : "memory");
    }
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  unsigned int acc = 0;
  for (int i = 0; i < pps; ++i) acc ^= reinterpret_cast<const unsigned int*>(smem + (size_t)i * 65536)[threadIdx.x];
  if (acc == 0x12345678u) out[0] = acc;
}

extern "C" __global__ void __launch_bounds__(128) ldg(const unsigned short* __restrict__ k,
    const unsigned short* __restrict__ v, const int* __restrict__ pt, int pps, unsigned int* out) {
  const int kvh = blockIdx.y;
  unsigned int acc = 0;
  for (int i = 0; i < pps; ++i) {
    const int page = pt[blockIdx.x * pps + i];
    const size_t row0 = ((size_t)page * 4 + kvh) * 64;
    const uint4* ks = reinterpret_cast<const uint4*>(k + row0 * 256);
    const uint4* vs = reinterpret_cast<const uint4*>(v + row0 * 256);
    uint4 r[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint4* src = (j < 8 ? ks : vs) + (j % 8) * 128 + threadIdx.x;  // 2048 16-byte chunks per 32 KB
      asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r[j].x), "=r"(r[j].y), "=r"(r[j].z), "=r"(r[j].w) : "l"(src));
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {  // volatile like the loads, so after all of them: 16 loads in flight per thread
      asm volatile("" : "+r"(r[j].x), "+r"(r[j].y), "+r"(r[j].z), "+r"(r[j].w));
      acc ^= r[j].x ^ r[j].y ^ r[j].z ^ r[j].w;
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint4* src = (j < 8 ? ks : vs) + (8 + j % 8) * 128 + threadIdx.x;
      asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r[j].x), "=r"(r[j].y), "=r"(r[j].z), "=r"(r[j].w) : "l"(src));
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {  // volatile like the loads, so after all of them: 16 loads in flight per thread
      asm volatile("" : "+r"(r[j].x), "+r"(r[j].y), "+r"(r[j].z), "+r"(r[j].w));
      acc ^= r[j].x ^ r[j].y ^ r[j].z ^ r[j].w;
    }
  }
  if (acc == 0x12345678u) out[0] = acc;
}
"""

PAGES, HKV, P, HD = 128, 4, 64, 256  # 8,192 tokens of one attention layer at the 27B shape


def main(argv=None) -> int:
    """Time every (kernel, split) configuration (module docstring); print a table; write ``--json``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import cupy as cp

    from ninferc.bench import git_commit

    mod = cp.RawModule(code=SRC, options=("--std=c++17",))
    rng = np.random.default_rng(0)
    pool = PAGES + 8
    pools = [(cp.asarray(rng.integers(0, 2**16, (pool, HKV, P, HD), dtype=np.uint16)),
              cp.asarray(rng.integers(0, 2**16, (pool, HKV, P, HD), dtype=np.uint16))) for _ in range(5)]
    k, v = pools[0]
    pt = cp.asarray(rng.permutation(pool)[:PAGES].astype(np.int32))
    out = cp.zeros(4, cp.uint32)
    nbytes = 2 * PAGES * HKV * P * HD * 2
    stream = cp.cuda.Stream(non_blocking=True)

    def timed(launch, n=50, repeats=5) -> float:
        with stream:
            for i in range(3):
                launch(i)
            stream.synchronize()
            stream.begin_capture()
            for i in range(n):
                launch(i)
            g = stream.end_capture()
            g.launch(stream)
            stream.synchronize()
            ts = []
            for _ in range(repeats):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(stream)
                g.launch(stream)
                e1.record(stream)
                e1.synchronize()
                ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / n)
        return float(np.median(ts))

    rows = []
    src_a, dst_a = cp.concatenate([k[:PAGES].ravel(), v[:PAGES].ravel()]), None
    dst_a = cp.empty_like(src_a)
    us = timed(lambda i: cp.copyto(dst_a, src_a))
    rows.append({"kernel": "cupy copy (read + write)", "source": "l2", "ctas": 0, "pps": 0, "us": us,
                 "read_gbs": nbytes / us / 1e3})
    for name in ("cpasync_seq", "cpasync_all", "ldg"):
        kern = mod.get_function(name)
        for pps in (1, 2, 4):
            smem = 65536 * (pps if name == "cpasync_all" else 1)
            if smem > 227 * 1024:
                continue
            if smem > 48 * 1024:
                kern.max_dynamic_shared_size_bytes = smem
            grid = (PAGES // pps, HKV)
            for where, npool in (("l2", 1), ("dram", len(pools))):
                def go(i, kern=kern, grid=grid, smem=smem, npool=npool, pps=pps, name=name):
                    kk, vv = pools[i % npool]
                    kern(grid, (128,), (kk, vv, pt, np.int32(pps), out), shared_mem=smem if name != "ldg" else 0)
                us = timed(go)
                rows.append({"kernel": name, "source": where, "ctas": grid[0] * grid[1], "pps": pps, "us": us,
                             "read_gbs": nbytes / us / 1e3})
    print(f"K + V of {PAGES} pages x {HKV} KV heads ({nbytes / 1e6:.1f} MB), graph of 50 launches, median of 5")
    for r in rows:
        print(f"  {r['kernel']:26s} {r['source']:4s} ctas {r['ctas']:4d} pages/CTA {r['pps']}  {r['us']:7.2f} us  "
              f"{r['read_gbs']:7.0f} GB/s read")
    if a.json:
        Path(a.json).write_text(json.dumps({"commit": git_commit(), "command": "python bench/kv_stream_probe.py",
                                            "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                                            "bytes": nbytes, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
