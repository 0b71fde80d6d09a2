// Internal: the inner loops of the CPU kernels behind one function table, so
// the AVX2/FMA/F16C file (compiled with -mavx2 -mfma -mf16c) and the portable
// file are interchangeable; common.cc picks one at run time.
#pragma once

#include <cstdint>

#include "kvtier/kernels/paged_kv.h"

namespace kvtier::kernels::internal {

struct CpuOps {
  const char* name;
  // out[t] = scale * dot(q, k + t * d) for t in [0, n); k rows are fp32.
  void (*scores)(const float* q, const float* k, uint32_t n, uint32_t d, float scale, float* out);
  // acc[0, d) = acc * alpha + sum_t p[t] * v[t * d, ...); v rows are fp32.
  void (*accumulate)(float* acc, float alpha, const float* p, const float* v, uint32_t n,
                     uint32_t d);
  // x[t] = exp(x[t] - m) for t in [0, n); returns the sum of the new x.
  float (*exp_sum)(float* x, uint32_t n, float m);
  // dst[t * d + i] = element i of row t (rows d elements apart) times
  // scale[t]; `scales` (unaligned fp32s) is null for unscaled dtypes.
  void (*to_f32)(KvDtype dtype, const uint8_t* src, const uint8_t* scales, uint32_t n, uint32_t d,
                 float* dst);
  // Optional (null in the portable table): scores / accumulate reading fp16
  // rows directly, so fp16 pages need no converted copy.
  void (*scores_f16)(const float* q, const uint16_t* k, uint32_t n, uint32_t d, float scale,
                     float* out);
  void (*accumulate_f16)(float* acc, float alpha, const float* p, const uint16_t* v, uint32_t n,
                         uint32_t d);
};

const CpuOps& PortableOps();
// Only valid when the CPU supports AVX2, FMA and F16C.
const CpuOps& Avx2Ops();
// The table in use (AVX2 when supported and not forced portable).
const CpuOps& ActiveOps();

// 256-entry fp8 e4m3 -> float table shared by both paths.
const float* Fp8Table();

}  // namespace kvtier::kernels::internal
