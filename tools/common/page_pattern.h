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

// A cheaper pattern for tools that move tens of GB (kvtier-stress): word i
// of the page is PatternSeed(key) ^ ((i + 1) * golden ratio), which the
// compiler vectorizes, so filling and checking run near memory speed where
// the xorshift pattern above is bound by its serial dependency chain. Every
// word depends on the key and on its position, so a wrong page, a shifted
// copy, stale bytes or zeros are all caught.
inline void FillFastPattern(const PageKey& key, uint8_t* dst, uint64_t n) {
  const uint64_t seed = PatternSeed(key);
  const uint64_t words = n / 8;
  for (uint64_t i = 0; i < words; ++i) {
    const uint64_t w = seed ^ ((i + 1) * 0x9E3779B97F4A7C15ull);
    std::memcpy(dst + 8 * i, &w, 8);
  }
  const uint64_t tail = seed ^ ((words + 1) * 0x9E3779B97F4A7C15ull);
  for (uint64_t i = 8 * words; i < n; ++i) dst[i] = static_cast<uint8_t>(tail >> (8 * (i & 7)));
}

// Returns the offset of the first wrong byte, or n when the page is intact.
inline uint64_t CheckFastPattern(const PageKey& key, const uint8_t* src, uint64_t n) {
  const uint64_t seed = PatternSeed(key);
  const uint64_t words = n / 8;
  constexpr uint64_t kChunk = 512;  // words per branch-free (vectorizable) pass
  for (uint64_t c = 0; c < words; c += kChunk) {
    const uint64_t end = c + kChunk < words ? c + kChunk : words;
    uint64_t diff = 0;
    for (uint64_t i = c; i < end; ++i) {
      uint64_t w;
      std::memcpy(&w, src + 8 * i, 8);
      diff |= w ^ (seed ^ ((i + 1) * 0x9E3779B97F4A7C15ull));
    }
    if (diff == 0) continue;
    for (uint64_t i = 8 * c; i < 8 * end; ++i) {
      const uint64_t w = seed ^ ((i / 8 + 1) * 0x9E3779B97F4A7C15ull);
      if (src[i] != static_cast<uint8_t>(w >> (8 * (i & 7)))) return i;
    }
  }
  const uint64_t tail = seed ^ ((words + 1) * 0x9E3779B97F4A7C15ull);
  for (uint64_t i = 8 * words; i < n; ++i)
    if (src[i] != static_cast<uint8_t>(tail >> (8 * (i & 7)))) return i;
  return n;
}

}  // namespace kvtier::tools
