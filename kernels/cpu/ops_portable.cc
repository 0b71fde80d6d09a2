// Portable (plain C++) inner loops of the CPU kernels: the fallback for CPUs
// without AVX2/FMA/F16C, and a second implementation the tests compare.
#include <cmath>
#include <cstring>

#include "cpu/cpu_ops.h"
#include "kvtier/kernels/numeric.h"

namespace kvtier::kernels::internal {
namespace {

void Scores(const float* q, const float* k, uint32_t n, uint32_t d, float scale, float* out) {
  for (uint32_t t = 0; t < n; ++t) {
    const float* kr = k + uint64_t(t) * d;
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    uint32_t i = 0;
    for (; i + 4 <= d; i += 4) {
      s0 += q[i] * kr[i];
      s1 += q[i + 1] * kr[i + 1];
      s2 += q[i + 2] * kr[i + 2];
      s3 += q[i + 3] * kr[i + 3];
    }
    for (; i < d; ++i) s0 += q[i] * kr[i];
    out[t] = scale * ((s0 + s1) + (s2 + s3));
  }
}

void Accumulate(float* acc, float alpha, const float* p, const float* v, uint32_t n, uint32_t d) {
  if (alpha != 1.f) {
    for (uint32_t i = 0; i < d; ++i) acc[i] *= alpha;
  }
  for (uint32_t t = 0; t < n; ++t) {
    const float pt = p[t];
    const float* vr = v + uint64_t(t) * d;
    for (uint32_t i = 0; i < d; ++i) acc[i] += pt * vr[i];
  }
}

float ExpSum(float* x, uint32_t n, float m) {
  float sum = 0;
  for (uint32_t t = 0; t < n; ++t) {
    x[t] = std::exp(x[t] - m);
    sum += x[t];
  }
  return sum;
}

void ToF32(KvDtype dtype, const uint8_t* src, const uint8_t* scales, uint32_t n, uint32_t d,
           float* dst) {
  const float* fp8 = Fp8Table();
  const uint32_t eb = KvDtypeBytes(dtype);
  for (uint32_t t = 0; t < n; ++t) {
    const uint8_t* row = src + uint64_t(t) * d * eb;
    float* out = dst + uint64_t(t) * d;
    const float s = scales != nullptr ? LoadF32(scales + 4 * t) : 1.f;
    if (dtype == KvDtype::kFp32) {
      std::memcpy(out, row, uint64_t(d) * 4);
    } else if (dtype == KvDtype::kFp8E4M3) {
      for (uint32_t i = 0; i < d; ++i) out[i] = fp8[row[i]] * s;
    } else if (dtype == KvDtype::kInt8) {
      for (uint32_t i = 0; i < d; ++i) out[i] = float(int8_t(row[i])) * s;
    } else {
      for (uint32_t i = 0; i < d; ++i) out[i] = LoadElem(dtype, row, i);
    }
  }
}

}  // namespace

const CpuOps& PortableOps() {
  static const CpuOps ops{"portable", &Scores, &Accumulate, &ExpSum, &ToF32, nullptr, nullptr};
  return ops;
}

const float* Fp8Table() {
  static const auto* table = [] {
    static float t[256];
    for (int i = 0; i < 256; ++i) t[i] = Fp8E4M3ToFloat(uint8_t(i));
    return t;
  }();
  return table;
}

}  // namespace kvtier::kernels::internal
