// Verification chunks; see verify_chunks.h.
#include "tiers/common/verify_chunks.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>

namespace kvtier::tiers {

uint32_t ChunkBytesFor(uint64_t page_bytes) {
  if (page_bytes < kMinChunkedPageBytes) return 0;
  uint64_t chunk = kMinChunkBytes;
  while ((page_bytes + chunk - 1) / chunk > kMaxChunks) chunk <<= 1;
  return chunk > UINT32_MAX ? 0 : static_cast<uint32_t>(chunk);
}

ChunkSums ComputeChunkSums(const uint8_t* bytes, uint64_t n) {
  ChunkSums out;
  out.chunk_bytes = ChunkBytesFor(n);
  if (out.chunk_bytes == 0) return out;
  for (uint64_t at = 0; at < n; at += out.chunk_bytes)
    out.sums.push_back(XXH3_64bits(bytes + at, std::min<uint64_t>(out.chunk_bytes, n - at)));
  return out;
}

bool VerifyChunks(const ChunkSums& sums, uint64_t page_bytes, uint64_t begin, uint64_t end,
                  const uint8_t* bytes) {
  const uint64_t c = sums.chunk_bytes;
  if (c == 0 || begin % c != 0 || end > page_bytes || begin > end) return false;
  for (uint64_t at = begin; at < end; at += c) {
    const uint64_t len = std::min(c, page_bytes - at);
    if (at + len > end) return false;  // a chunk cut short: not verifiable
    const size_t i = at / c;
    if (i >= sums.sums.size() || XXH3_64bits(bytes + (at - begin), len) != sums.sums[i]) return false;
  }
  return true;
}

}  // namespace kvtier::tiers
