// ninfer_trace.cuh -- the device probes' per-CTA timestamps, for the empty trace hooks that gemv_dp (GEMV_TRACE_*),
// attn_decode (ATTN_TRACE) and gdn_recurrent (GDN_TRACE_*) keep; bench/dp_trace_probe.py and bench/attn_trace_probe.py define the
// hooks, include this header and read the records back. No product kernel includes it, and no plan launches a traced
// kernel.
// %globaltimer is the GPU's nanosecond timer (PTX ISA "Special Registers": %globaltimer), %smid the SM of the CTA.
#pragma once

namespace ninfer_trace {
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Append one record {blockIdx.x, blockIdx.y, %smid, stamps[0..kStamps-1]} to `records` ([max][3 + kStamps] u64) at
// the slot `count` hands out; records past `max` are dropped. Called by one thread per CTA.
template <int kStamps>
__device__ __forceinline__ void record(unsigned long long* records, unsigned int* count, unsigned int max,
                                       const unsigned long long (&stamps)[kStamps]) {
  unsigned int smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  const unsigned int slot = atomicAdd(count, 1u);
  if (slot < max) {
    unsigned long long* r = records + (size_t)slot * (3 + kStamps);
    r[0] = blockIdx.x;
    r[1] = blockIdx.y;
    r[2] = smid;
#pragma unroll
    for (int i = 0; i < kStamps; ++i) r[3 + i] = stamps[i];
  }
}
}  // namespace ninfer_trace
