// Internal CUDA helpers shared by the kernels: warp reductions, typed element
// loads per page dtype, dtype dispatch, and launcher-side validation.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kvtier/kernels/cuda.h"
#include "kvtier/kernels/numeric.h"
#include "kvtier/kernels/paged_kv.h"

namespace kvtier::kernels::cuda_internal {

inline constexpr int kWarp = 32;
inline constexpr int kMaxElemsPerLane = 8;  // head_dim <= 256
inline constexpr uint32_t kMaxHeadDim = kWarp * kMaxElemsPerLane;

__device__ __forceinline__ float WarpSum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float WarpMax(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Element i of a row of dtype D (unscaled), with a load of the element's width.
template <KvDtype D>
__device__ __forceinline__ float Elem(const uint8_t* row, uint32_t i) {
  if constexpr (D == KvDtype::kFp32) return reinterpret_cast<const float*>(row)[i];
  if constexpr (D == KvDtype::kFp16) return HalfToFloat(reinterpret_cast<const uint16_t*>(row)[i]);
  if constexpr (D == KvDtype::kBf16) return Bf16ToFloat(reinterpret_cast<const uint16_t*>(row)[i]);
  if constexpr (D == KvDtype::kFp8E4M3) return Fp8E4M3ToFloat(row[i]);
  if constexpr (D == KvDtype::kInt8) return float(int8_t(row[i]));
  return 0.f;
}

// Calls fn(std::integral_constant<KvDtype, d>) for the runtime dtype d.
template <typename Fn>
cudaError_t DispatchDtype(KvDtype d, Fn fn) {
  switch (d) {
    case KvDtype::kFp32: return fn(std::integral_constant<KvDtype, KvDtype::kFp32>());
    case KvDtype::kFp16: return fn(std::integral_constant<KvDtype, KvDtype::kFp16>());
    case KvDtype::kBf16: return fn(std::integral_constant<KvDtype, KvDtype::kBf16>());
    case KvDtype::kFp8E4M3: return fn(std::integral_constant<KvDtype, KvDtype::kFp8E4M3>());
    case KvDtype::kInt8: return fn(std::integral_constant<KvDtype, KvDtype::kInt8>());
  }
  return cudaErrorInvalidValue;
}

// Host-side checks every launcher makes (shape, head_dim <= 256, alignment).
inline cudaError_t CheckKv(const PagedKv& kv) {
  if (kv.ElemBytes() == 0 || kv.layers == 0 || kv.kv_heads == 0 || kv.head_dim == 0 ||
      kv.tokens_per_page == 0 || kv.layer >= kv.layers || kv.arena == nullptr ||
      kv.head_dim > kMaxHeadDim || reinterpret_cast<uintptr_t>(kv.arena) % 4 != 0)
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

inline uint32_t CeilDiv(uint64_t a, uint64_t b) { return uint32_t((a + b - 1) / b); }

}  // namespace kvtier::kernels::cuda_internal
