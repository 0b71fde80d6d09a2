// The shape of one page. A session declares its layout at HELLO; the daemon
// checks every page it moves against layout.PageBytes(). Pages are page-first:
// layer l's K and V (and their scales for quantized dtypes) are one contiguous
// slice of LayerBytes(), so a page or a layer moves in one copy.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier {

enum class Dtype : uint32_t { kFp32 = 1, kFp16 = 2, kBf16 = 3, kFp8E4M3 = 4, kInt8 = 5 };

absl::StatusOr<Dtype> ParseDtype(absl::string_view name);
absl::string_view DtypeName(Dtype d);
uint32_t DtypeBytes(Dtype d);
// fp8 and int8 pages carry one fp32 scale per token per head, for K and V.
bool DtypeHasScales(Dtype d);

inline constexpr uint64_t kMaxPageBytes = 256ull << 20;

struct Layout {
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t tokens_per_page = 256;
  Dtype dtype = Dtype::kFp16;

  // Fields non-zero, within sane limits, and PageBytes() <= kMaxPageBytes.
  absl::Status Validate() const;
  uint64_t LayerBytes() const;
  uint64_t PageBytes() const { return LayerBytes() * layers; }
  // Stable 64-bit id of the layout (SHA-256 of its tagged fields); part of
  // every page key so two layouts never share a key.
  uint64_t Id() const;
  std::string DebugString() const;

  friend bool operator==(const Layout&, const Layout&) = default;
};

}  // namespace kvtier
