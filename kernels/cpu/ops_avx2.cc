// AVX2 + FMA + F16C inner loops of the CPU kernels. Compiled with
// -mavx2 -mfma -mf16c; only reached after common.cc checked the CPU with
// __builtin_cpu_supports, so other files stay baseline x86-64.
#include <immintrin.h>

#include <cstring>

#include "cpu/cpu_ops.h"
#include "kvtier/kernels/numeric.h"

namespace kvtier::kernels::internal {
namespace {

// Sums each of eight vectors: lane j of the result = horizontal sum of a[j].
inline __m256 Reduce8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

inline float Reduce1(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Row element loads: fp32 rows as is, fp16 rows widened with F16C, so fp16
// pages are read once, without a converted copy.
inline __m256 Ld(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Ld(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float Ld1(const float* p) { return *p; }
inline float Ld1(const uint16_t* p) { return HalfToFloat(*p); }

template <typename T>
void ScoresT(const float* q, const T* k, uint32_t n, uint32_t d, float scale, float* out) {
  const uint32_t d8 = d & ~7u;
  uint32_t t = 0;
  for (; t + 8 <= n; t += 8) {
    __m256 acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
    const T* kr = k + uint64_t(t) * d;
    for (uint32_t i = 0; i < d8; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i);
      for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, Ld(kr + j * d + i), acc[j]);
    }
    __m256 s = Reduce8(acc);
    if (d8 != d) {
      alignas(32) float tail[8];
      for (int j = 0; j < 8; ++j) {
        float x = 0;
        for (uint32_t i = d8; i < d; ++i) x += q[i] * Ld1(kr + j * d + i);
        tail[j] = x;
      }
      s = _mm256_add_ps(s, _mm256_load_ps(tail));
    }
    _mm256_storeu_ps(out + t, _mm256_mul_ps(s, _mm256_set1_ps(scale)));
  }
  for (; t < n; ++t) {
    const T* kr = k + uint64_t(t) * d;
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t i = 0; i < d8; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), Ld(kr + i), acc);
    float x = Reduce1(acc);
    for (uint32_t i = d8; i < d; ++i) x += q[i] * Ld1(kr + i);
    out[t] = x * scale;
  }
}

void Scores(const float* q, const float* k, uint32_t n, uint32_t d, float scale, float* out) {
  ScoresT(q, k, n, d, scale, out);
}

void ScoresF16(const float* q, const uint16_t* k, uint32_t n, uint32_t d, float scale,
               float* out) {
  ScoresT(q, k, n, d, scale, out);
}

// acc[0, 8R) += sum_t p[t] * v[t][0, 8R), accumulators held in registers.
template <int R, typename T>
inline void AccumulateBlock(float* acc, const float* p, const T* v, uint32_t n, uint32_t d) {
  __m256 a[R];
  for (int r = 0; r < R; ++r) a[r] = _mm256_loadu_ps(acc + 8 * r);
  for (uint32_t t = 0; t < n; ++t) {
    const __m256 pt = _mm256_set1_ps(p[t]);
    const T* vr = v + uint64_t(t) * d;
    for (int r = 0; r < R; ++r) a[r] = _mm256_fmadd_ps(pt, Ld(vr + 8 * r), a[r]);
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(acc + 8 * r, a[r]);
}

template <typename T>
void AccumulateT(float* acc, float alpha, const float* p, const T* v, uint32_t n, uint32_t d) {
  if (alpha != 1.f) {
    const __m256 av = _mm256_set1_ps(alpha);
    uint32_t i = 0;
    for (; i + 8 <= d; i += 8) _mm256_storeu_ps(acc + i, _mm256_mul_ps(av, _mm256_loadu_ps(acc + i)));
    for (; i < d; ++i) acc[i] *= alpha;
  }
  uint32_t i = 0;
  for (; i + 64 <= d; i += 64) AccumulateBlock<8>(acc + i, p, v + i, n, d);
  for (; i + 32 <= d; i += 32) AccumulateBlock<4>(acc + i, p, v + i, n, d);
  for (; i + 8 <= d; i += 8) AccumulateBlock<1>(acc + i, p, v + i, n, d);
  for (; i < d; ++i) {
    float x = acc[i];
    for (uint32_t t = 0; t < n; ++t) x += p[t] * Ld1(v + uint64_t(t) * d + i);
    acc[i] = x;
  }
}

void Accumulate(float* acc, float alpha, const float* p, const float* v, uint32_t n, uint32_t d) {
  AccumulateT(acc, alpha, p, v, n, d);
}

void AccumulateF16(float* acc, float alpha, const float* p, const uint16_t* v, uint32_t n,
                   uint32_t d) {
  AccumulateT(acc, alpha, p, v, n, d);
}

// exp(x) for x <= 0 (Cephes polynomial, ~1 ulp in range; clamps below -87).
inline __m256 Exp(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f),
                                               _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

float ExpSum(float* x, uint32_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  uint32_t t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(x + t), mv));
    _mm256_storeu_ps(x + t, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (t < n) {
    alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (uint32_t j = t; j < n; ++j) buf[j - t] = x[j];
    const __m256 e = Exp(_mm256_sub_ps(_mm256_load_ps(buf), mv));
    _mm256_store_ps(buf, e);
    for (uint32_t j = t; j < n; ++j) x[j] = buf[j - t];
    float s = Reduce1(sum);
    for (uint32_t j = t; j < n; ++j) s += x[j];
    return s;
  }
  return Reduce1(sum);
}

// 8 elements of a row starting at element i, unscaled, as floats.
inline __m256 Load8(KvDtype dtype, const uint8_t* row, uint32_t i) {
  switch (dtype) {
    case KvDtype::kFp16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    case KvDtype::kBf16:
      return _mm256_castsi256_ps(_mm256_slli_epi32(
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i))),
          16));
    case KvDtype::kInt8:
      return _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i))));
    case KvDtype::kFp8E4M3: {
      // e4m3 bits re-biased into fp16 bits (exponent bias 7 -> 15 is a 2^8
      // factor, applied by the caller's scale); exact for all finite codes.
      const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i)));
      const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8),
                                     _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7F)), 7));
      return _mm256_cvtph_ps(h);
    }
    case KvDtype::kFp32:
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row + 4 * i));
  }
  return _mm256_setzero_ps();
}

void ToF32(KvDtype dtype, const uint8_t* src, const uint8_t* scales, uint32_t n, uint32_t d,
           float* dst) {
  const uint32_t eb = KvDtypeBytes(dtype);
  const uint32_t d8 = d & ~7u;
  const float* fp8 = Fp8Table();
  const float bias = dtype == KvDtype::kFp8E4M3 ? 256.f : 1.f;
  for (uint32_t t = 0; t < n; ++t) {
    const uint8_t* row = src + uint64_t(t) * d * eb;
    float* out = dst + uint64_t(t) * d;
    const float s = scales != nullptr ? LoadF32(scales + 4 * t) : 1.f;
    const __m256 sv = _mm256_set1_ps(s * bias);
    if (s * bias == 1.f) {  // fp16 / bf16: plain widening
      for (uint32_t i = 0; i < d8; i += 8) _mm256_storeu_ps(out + i, Load8(dtype, row, i));
    } else {
      for (uint32_t i = 0; i < d8; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(Load8(dtype, row, i), sv));
    }
    for (uint32_t i = d8; i < d; ++i) {
      out[i] = (dtype == KvDtype::kFp8E4M3 ? fp8[row[i]] : LoadElem(dtype, row, i)) * s;
    }
  }
}

}  // namespace

const CpuOps& Avx2Ops() {
  static const CpuOps ops{"avx2", &Scores, &Accumulate, &ExpSum, &ToF32, &ScoresF16, &AccumulateF16};
  return ops;
}

}  // namespace kvtier::kernels::internal
