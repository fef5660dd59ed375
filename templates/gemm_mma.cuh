// gemm_mma.cuh -- tensor-core and async-copy building blocks for the gemm family (sm_80+ PTX, valid
// on every ninferc target: sm_86, sm_89, sm_90, sm_120a). Family-specific header of templates/gemm.cu.j2
// (kept out of ninfer_common.cuh; any family may include it). No CUDA headers, no per-arch numbers.
//
//   smem_addr     generic -> 32-bit shared-window address (for cp.async / ldmatrix operands)
//   cp_async16, cp_async_commit, cp_async_wait<N>   (ninfer_common.cuh section 8, re-exported)
//   ldmatrix_x4   four 8x8 b16 matrices from shared memory, one per 8-lane address group
//   mma_bf16      D += A * B, mma.sync m16n8k16, A row-major bf16, B column-major bf16, fp32 accumulators
#pragma once

namespace ninfer {
namespace mma {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

using ninfer::cp_async16;  // ninfer_common.cuh section 8
using ninfer::cp_async_commit;
using ninfer::cp_async_wait;

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// D = A * B + D, m16n8k16, A row-major bf16, B column-major bf16, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace mma
}  // namespace ninfer
