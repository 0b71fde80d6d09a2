// Byte sizes as operators write them in flags and config files: "4096",
// "512MiB", "1G", "1.5k" (binary units, case-insensitive). One parser for
// kvtierd, the tenants file and the tools, so a size means the same everywhere.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvtier {

// Bytes for `text`: a non-negative number, then nothing or b, k/kb/kib,
// m/mb/mib, g/gb/gib, t/tb/tib (all powers of 1024). InvalidArgument naming
// the text otherwise.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

}  // namespace kvtier
