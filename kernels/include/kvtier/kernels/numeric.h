// Scalar conversions between fp32 and the page dtypes (fp16, bf16, fp8 e4m3fn,
// int8 with a scale), host- and device-safe, round-to-nearest-even. The
// vectorized CPU paths must agree with these bit for bit.
//
// Usage: uint16_t h = FloatToHalf(x); float y = HalfToFloat(h);
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kvtier/kernels/paged_kv.h"

namespace kvtier::kernels {

inline constexpr float kFp8E4M3Max = 448.f;
inline constexpr float kInt8Max = 127.f;

KVTIER_HD float BitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

KVTIER_HD uint32_t FloatToBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// IEEE half -> float (exact), after Maratyszcza's FP16 library.
KVTIER_HD float HalfToFloat(uint16_t h) {
  const uint32_t w = uint32_t(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = BitsToFloat((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = BitsToFloat((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t bits = two_w < (1u << 27) ? FloatToBits(denormalized) : FloatToBits(normalized);
  return BitsToFloat(sign | bits);
}

// float -> IEEE half, round to nearest even, overflow to inf, NaN kept.
KVTIER_HD uint16_t FloatToHalf(float f) {
  float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = FloatToBits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = BitsToFloat((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = FloatToBits(base);
  const uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return uint16_t((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

KVTIER_HD float Bf16ToFloat(uint16_t b) { return BitsToFloat(uint32_t(b) << 16); }

KVTIER_HD uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatToBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// fp8 e4m3fn (bias 7, no infinities, 0x7F/0xFF = NaN, max 448) -> float.
KVTIER_HD float Fp8E4M3ToFloat(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80) << 24;
  const uint32_t e = (b >> 3) & 0xF;
  const uint32_t m = b & 0x7;
  if (e == 0xF && m == 0x7) return BitsToFloat(sign | 0x7FC00000u);
  if (e == 0) return BitsToFloat(sign | FloatToBits(float(m) * 0x1.0p-9f));
  return BitsToFloat(sign | ((e + 120) << 23) | (m << 20));
}

// float -> fp8 e4m3fn, round to nearest even, saturating at +-448, NaN -> 0x7F.
KVTIER_HD uint8_t FloatToFp8E4M3(float x) {
  const uint32_t u = FloatToBits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7F;
  const float a = fabsf(x);
  if (a >= kFp8E4M3Max) return sign | 0x7E;
  if (a < 0x1.0p-6f) {  // subnormal: multiples of 2^-9 (q == 8 is the smallest normal)
    return sign | uint8_t(rintf(a * 512.f));
  }
  const uint32_t au = FloatToBits(a);
  uint32_t e = (au >> 23) - 127 + 7;
  uint32_t r = (au & 0x7FFFFFu) >> 20;
  const uint32_t rem = au & 0xFFFFFu;
  if (rem > 0x80000u || (rem == 0x80000u && (r & 1u))) ++r;
  if (r == 8) {
    r = 0;
    ++e;
  }
  if (e > 15 || (e == 15 && r == 7)) return sign | 0x7E;
  return sign | uint8_t((e << 3) | r);
}

KVTIER_HD int8_t FloatToInt8(float x, float inv_scale) {
  float q = rintf(x * inv_scale);
  q = q > kInt8Max ? kInt8Max : (q < -kInt8Max ? -kInt8Max : q);
  return int8_t(q);
}

// Scale for a row whose max |x| is amax: stored * scale recovers the value.
KVTIER_HD float QuantScale(KvDtype d, float amax) {
  return amax / (d == KvDtype::kInt8 ? kInt8Max : kFp8E4M3Max);
}

// Element i of a row of dtype d at p (unscaled for int8 / fp8).
KVTIER_HD float LoadElem(KvDtype d, const uint8_t* p, uint32_t i) {
  switch (d) {
    case KvDtype::kFp32: return BitsToFloat(uint32_t(p[4 * i]) | uint32_t(p[4 * i + 1]) << 8 |
                                            uint32_t(p[4 * i + 2]) << 16 |
                                            uint32_t(p[4 * i + 3]) << 24);
    case KvDtype::kFp16: return HalfToFloat(uint16_t(p[2 * i] | p[2 * i + 1] << 8));
    case KvDtype::kBf16: return Bf16ToFloat(uint16_t(p[2 * i] | p[2 * i + 1] << 8));
    case KvDtype::kFp8E4M3: return Fp8E4M3ToFloat(p[i]);
    case KvDtype::kInt8: return float(int8_t(p[i]));
  }
  return 0.f;
}

// Reads a possibly unaligned fp32 (scales) at p.
KVTIER_HD float LoadF32(const uint8_t* p) {
  return BitsToFloat(uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                     uint32_t(p[3]) << 24);
}

}  // namespace kvtier::kernels
