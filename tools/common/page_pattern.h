// Page bytes that are a pure function of the page key, so any reader can
// verify a page it got back without having kept a copy. Used by the demo,
// benchmarks, stress tools and tests.
#pragma once

#include <cstdint>
#include <cstring>

#include "kvtier/page_key.h"

namespace kvtier::tools {

inline uint64_t PatternSeed(const PageKey& key) {
  uint64_t a, b;
  std::memcpy(&a, key.bytes.data(), 8);
  std::memcpy(&b, key.bytes.data() + 8, 8);
  return (a ^ (b * 0x9E3779B97F4A7C15ull)) | 1;
}

inline void FillPattern(const PageKey& key, uint8_t* dst, uint64_t n) {
  uint64_t x = PatternSeed(key);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(dst + i, &x, 8);
  }
  for (; i < n; ++i) dst[i] = static_cast<uint8_t>(x >> (8 * (i & 7)));
}

// Returns the offset of the first wrong byte, or n when the page is intact.
inline uint64_t CheckPattern(const PageKey& key, const uint8_t* src, uint64_t n) {
  uint64_t x = PatternSeed(key);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    if (std::memcmp(src + i, &x, 8) != 0) return i;
  }
  for (; i < n; ++i)
    if (src[i] != static_cast<uint8_t>(x >> (8 * (i & 7)))) return i;
  return n;
}

}  // namespace kvtier::tools
