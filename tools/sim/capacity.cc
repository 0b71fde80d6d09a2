// Parsing of capacities and byte sizes for kvtier-sim's flags.
#include "tools/sim/capacity.h"

#include <cctype>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvtier::sim {
namespace {

struct Unit {
  const char* suffix;
  double factor;
  bool bytes;
};

// Longest suffixes first, so "KiB" is not read as "B".
constexpr Unit kUnits[] = {
    {"KiB", 1024.0, true},
    {"MiB", 1048576.0, true},
    {"GiB", 1073741824.0, true},
    {"TiB", 1099511627776.0, true},
    {"KB", 1e3, true},
    {"MB", 1e6, true},
    {"GB", 1e9, true},
    {"TB", 1e12, true},
    {"B", 1, true},
    {"Ki", 1024.0, false},
    {"Mi", 1048576.0, false},
    {"k", 1e3, false},
    {"K", 1e3, false},
    {"m", 1e6, false},
    {"M", 1e6, false},
};

}  // namespace

absl::StatusOr<CapacitySpec> ParseCapacity(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  CapacitySpec spec;
  spec.label = std::string(t);
  double factor = 1;
  for (const Unit& u : kUnits) {
    if (absl::ConsumeSuffix(&t, u.suffix)) {
      factor = u.factor;
      spec.bytes = u.bytes;
      break;
    }
  }
  double number = 0;
  if (t.empty() || !absl::SimpleAtod(t, &number) || !(number > 0) || !std::isfinite(number)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "capacity '", std::string(text),
        "': expected a positive number of pages (e.g. 4k, 4096, 4Ki) or bytes (e.g. 4GiB, 512MB)"));
  }
  const double value = number * factor;
  if (value != std::floor(value) || value > 1e18) {
    return absl::InvalidArgumentError(absl::StrCat("capacity '", std::string(text),
                                                   "' is not a whole number of ",
                                                   spec.bytes ? "bytes" : "pages"));
  }
  spec.value = static_cast<uint64_t>(value);
  return spec;
}

absl::StatusOr<std::vector<CapacitySpec>> ParseCapacityList(absl::string_view csv) {
  std::vector<CapacitySpec> out;
  for (absl::string_view item : absl::StrSplit(csv, ',', absl::SkipWhitespace())) {
    absl::StatusOr<CapacitySpec> spec = ParseCapacity(item);
    if (!spec.ok()) return spec.status();
    out.push_back(*std::move(spec));
  }
  if (out.empty()) return absl::InvalidArgumentError("--capacities: no capacity given");
  return out;
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::StatusOr<CapacitySpec> spec = ParseCapacity(text);
  if (!spec.ok()) return spec.status();
  const bool plain =
      !spec->label.empty() && std::isdigit(static_cast<unsigned char>(spec->label.back()));
  if (!spec->bytes && !plain) {
    return absl::InvalidArgumentError(absl::StrCat(
        "size '", std::string(text), "': expected bytes, e.g. 4096, 1MiB, 16MiB, 1GB"));
  }
  return spec->value;
}

absl::StatusOr<TierSize> ResolveTier(const CapacitySpec& spec, uint64_t page_bytes,
                                     uint64_t slab_bytes, uint64_t slot_align) {
  if (!spec.bytes) return PagesTier(spec.value);
  if (page_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity '", spec.label, "' is in bytes: give --page_bytes too"));
  }
  absl::StatusOr<TierSize> size = BytesTier(spec.value, page_bytes, slab_bytes, slot_align);
  if (!size.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity '", spec.label, "': ", size.status().message()));
  }
  return size;
}

absl::StatusOr<uint64_t> ResolveRecords(const CapacitySpec& spec, uint64_t page_bytes) {
  if (!spec.bytes) return spec.value;
  if (page_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity '", spec.label, "' is in bytes: give --page_bytes too"));
  }
  if (spec.value < page_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity '", spec.label, "' holds no page of ", page_bytes, " bytes"));
  }
  return spec.value / page_bytes;
}

}  // namespace kvtier::sim
