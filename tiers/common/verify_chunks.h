// Verification chunks: a page written to a persistent tier also records the
// xxh3-64 of each fixed-size chunk of its bytes, so a part of the page (one
// layer of its KV) can be read and verified without reading the whole page.
// The chunk size depends on the page size only (not on the model layout,
// which the store does not know): a layer is verified by the chunks that
// cover it.
#pragma once

#include <cstdint>
#include <vector>

namespace kvtier::tiers {

struct ChunkSums {
  uint32_t chunk_bytes = 0;     // 0: none recorded (read and verify the page whole)
  std::vector<uint64_t> sums;   // chunk i covers [i*chunk_bytes, min((i+1)*chunk_bytes, page))
  bool empty() const { return chunk_bytes == 0 || sums.empty(); }
};

// Pages below this size are not chunked: one read of the whole page is as
// cheap as a read of a part of it.
inline constexpr uint64_t kMinChunkedPageBytes = 128 << 10;
inline constexpr uint64_t kMinChunkBytes = 16 << 10;  // a multiple of the 4 KiB block
inline constexpr uint32_t kMaxChunks = 64;  // bounds the index record (8 bytes a chunk)

// The chunk size of a page of `page_bytes`: the smallest kMinChunkBytes << k
// that needs at most kMaxChunks chunks; 0 below kMinChunkedPageBytes.
uint32_t ChunkBytesFor(uint64_t page_bytes);

// The sums of `bytes` (a whole page) under ChunkBytesFor(n).
ChunkSums ComputeChunkSums(const uint8_t* bytes, uint64_t n);

// Checks the chunks wholly inside [begin, end) of a page of `page_bytes`
// whose bytes [begin, end) are at `bytes` (begin a chunk boundary; end a
// chunk boundary or the page end). False on the first mismatch.
bool VerifyChunks(const ChunkSums& sums, uint64_t page_bytes, uint64_t begin, uint64_t end,
                  const uint8_t* bytes);

}  // namespace kvtier::tiers
