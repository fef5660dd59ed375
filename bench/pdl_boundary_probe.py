"""Device probe (diagnostic, runs 93-99; prepared, not yet run): what one kernel boundary of the decode step's chain
costs by itself, and what a producer-side arrival counter would cost instead of griddepcontrol.wait.

A CUDA graph of N back-to-back launches of G CTAs x T threads whose CTAs do nothing but a dependent read-modify-
write of one word each (``buf[cta] += 1``, so each launch needs the previous one's writes) and, with ``--work-ns``,
spin for that long (globaltimer) to stand for a kernel body. Three chains, microseconds per launch:

* ``pdl``: every CTA waits in griddepcontrol.wait, then calls griddepcontrol.launch_dependents (NINFER_PDL_ENTRY, as
  every decode kernel), launched with programmatic stream serialization -- the decode step's boundary;
* ``stream``: the same kernel launched without the attribute (plain stream order; the wait is a no-op);
* ``flag``: no griddepcontrol.wait: thread 0 of every CTA spins (ld.acquire.gpu) until the previous launch's
  arrival counter reaches that launch's CTA count, then the CTA lets the next launch start; at its end each CTA
  fences and increments its own launch's counter (release). Launch i resets launch i - 2's counter (every CTA of
  launch i - 1 has passed its wait on it: launch i only starts once they all called launch_dependents after it).
  Deadlock-free for the same reason: a launch's CTAs are scheduled only after every CTA of the one before has
  started. (A chain with real data would also need the counters' memory order to cover every write the next
  kernel reads -- it does here: release after the writes, acquire before the reads, at gpu scope.)

The per-launch difference between ``pdl`` and ``flag`` at the decode kernels' grids (e.g. 528 x 256, 128 x 640)
bounds what replacing the PDL wait by counters could save per boundary (the step has ~360); ``pdl`` minus the
work is the boundary the fusing of kernels would remove.

Usage (GPU machine, sm_90+): python bench/pdl_boundary_probe.py [--launches 64] [--shapes 528x256,128x640]
[--work-ns 0,5000] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from gemv_ksplit_sweep import time_graph, write_rows  # noqa: E402

from ninferc.runtime.kernels import DeviceKernel, cupy, device_arch, device_bandwidth_gbs, device_sm_count  # noqa: E402
from ninferc.targets.render import _inline_headers  # noqa: E402 (the renderer's header inlining, for a probe's source)

SOURCE = r"""
#include "ninfer_common.cuh"

__device__ __forceinline__ unsigned long long probe_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void probe_work(long long work_ns) {
  if (work_ns <= 0) return;
  const unsigned long long t0 = probe_ns();
  while ((long long)(probe_ns() - t0) < work_ns) {
  }
}

// The decode step's boundary: wait for the previous grid, let the next one launch, a dependent write.
extern "C" __global__ void chain_pdl(unsigned int* __restrict__ buf, long long work_ns) {
  NINFER_PDL_ENTRY();  // ninfer_common.cuh section 7
  probe_work(work_ns);
  if (threadIdx.x == 0) buf[blockIdx.x] += 1u;
}

// The same boundary through launch i - 1's arrival counter instead of griddepcontrol.wait.
extern "C" __global__ void chain_flag(unsigned int* __restrict__ buf, unsigned int* __restrict__ ctr, int i, int n,
                                      unsigned int prev_ctas, long long work_ns) {
  if (threadIdx.x == 0) {
    const unsigned int* c = ctr + (i + n - 1) % n;
    unsigned int v;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(c) : "memory");
    } while (v < prev_ctas);
  }
  __syncthreads();
  ninfer::pdl_launch_dependents();
  if (blockIdx.x == 0 && threadIdx.x == 0) ctr[(i + n - 2) % n] = 0u;  // launch i - 2's: no CTA waits on it now
  probe_work(work_ns);
  __syncthreads();
  if (threadIdx.x == 0) {
    buf[blockIdx.x] += 1u;
    __threadfence();
    atomicAdd(ctr + i, 1u);
  }
}
"""


def probe_source() -> str:
    """The probe kernels' CUDA C with ninfer_common.cuh inlined (as rendered templates are)."""
    return _inline_headers(SOURCE, "pdl_boundary_probe", set())


def main(argv=None) -> int:
    """Run the probe (module docstring); prints us per launch per chain and shape; ``--json`` with provenance.

    Raises:
        SystemExit: a malformed --shapes entry, or a device below sm_90 (no PDL).
    """
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=64)
    ap.add_argument("--shapes", default="528x256,128x640", help="CTAsxthreads, comma-separated")
    ap.add_argument("--work-ns", default="0,5000", help="per-CTA spin per launch (ns), comma-separated")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    try:
        shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",") if s]
    except ValueError:
        raise SystemExit(f"--shapes {a.shapes!r}: expected CTAsxthreads entries, e.g. 528x256")
    arch = device_arch()
    if int(arch.split("_")[1].rstrip("a")) < 90:
        raise SystemExit(f"{arch}: programmatic dependent launch needs sm_90+")
    cp = cupy()
    sms, bw = device_sm_count(), device_bandwidth_gbs()
    src = probe_source()
    kp = DeviceKernel(src, "chain_pdl", "pdl_boundary_probe.chain_pdl")
    kf = DeviceKernel(src, "chain_flag", "pdl_boundary_probe.chain_flag")
    stream = cp.cuda.Stream(non_blocking=True)
    n = a.launches
    rows = []
    for grid, threads in shapes:
        buf = cp.zeros(grid, cp.uint32)
        ctr = cp.zeros(n, cp.uint32)
        for work in [int(w) for w in a.work_ns.split(",") if w]:
            w = np.int64(work)
            res = {}
            res["pdl"] = time_graph(cp, stream, [lambda: kp.launch((grid,), (threads,), (buf, w), stream=stream,
                                                                   pdl=True)] * n)
            res["stream"] = time_graph(cp, stream, [lambda: kp.launch((grid,), (threads,), (buf, w), stream=stream)] * n)

            def flag_calls():
                return [lambda i=i: kf.launch((grid,), (threads,), (buf, ctr, np.int32(i), np.int32(n), np.uint32(grid),
                                                                    w), stream=stream, pdl=True) for i in range(n)]
            ctr.fill(0)
            ctr[n - 1] = grid  # launch 0's predecessor has "arrived" (each replay's launch n - 1 sets it again)
            cp.cuda.Device().synchronize()
            res["flag"] = time_graph(cp, stream, flag_calls())
            left = ctr.get()
            ok = bool(left[n - 1] == grid)  # launch n - 1 arrived, counted once per CTA, in every replay
            row = {"ctas": grid, "threads": threads, "work_ns": work, "launches": n, "flag_counters_ok": ok,
                   **{f"{k}_us_per_launch": v * 1e6 for k, v in res.items()}}
            rows.append(row)
            print(f"{grid} x {threads}, work {work} ns: pdl {row['pdl_us_per_launch']:.2f} us, stream "
                  f"{row['stream_us_per_launch']:.2f}, flag {row['flag_us_per_launch']:.2f} (counters ok: {ok})",
                  flush=True)
    if a.json:
        write_rows(a.json, cp, sms, bw, "bench/pdl_boundary_probe.py", argv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
