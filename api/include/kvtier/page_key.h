// Page keys: 128-bit prefix hashes that name a page of KV cache.
// key[i] = SHA-256(version, layout_id, key[i-1], tokens of block i), truncated
// to 16 bytes; key[-1] is all zeros. Equal keys mean equal prefixes (and so
// equal KV), which is what makes deduplication free. The exact byte encoding
// is specified in docs/PROTOCOL.md so other clients can reproduce it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvtier {

inline constexpr uint32_t kPageKeyVersion = 1;
inline constexpr size_t kPageKeyBytes = 16;

struct PageKey {
  std::array<uint8_t, kPageKeyBytes> bytes{};

  static PageKey Zero() { return PageKey{}; }
  bool IsZero() const;
  std::string ToHex() const;
  static absl::StatusOr<PageKey> FromHex(absl::string_view hex);
  // Reads a key from exactly kPageKeyBytes raw bytes.
  static PageKey FromBytes(const void* data);

  friend bool operator==(const PageKey& a, const PageKey& b) { return a.bytes == b.bytes; }
  friend bool operator!=(const PageKey& a, const PageKey& b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, const PageKey& k) {
    return H::combine_contiguous(std::move(h), k.bytes.data(), k.bytes.size());
  }
};

// Key of one block given its parent's key. `tokens` must hold exactly one
// block (tokens_per_page ids) for keys to match across clients.
PageKey DerivePageKey(uint64_t layout_id, const PageKey& parent,
                      absl::Span<const uint32_t> tokens);

// Keys of every *full* block of `tokens`, chained from `parent` (zero for a
// prompt's first block). A trailing partial block gets no key.
std::vector<PageKey> DeriveChain(uint64_t layout_id, uint32_t tokens_per_page,
                                 absl::Span<const uint32_t> tokens,
                                 const PageKey& parent = PageKey::Zero());

// Packs keys into the wire form (n * 16 bytes) and back.
std::string PackKeys(absl::Span<const PageKey> keys);
absl::StatusOr<std::vector<PageKey>> UnpackKeys(absl::string_view packed);

}  // namespace kvtier
