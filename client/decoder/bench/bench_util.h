// Helpers the decoder benchmarks share (kvtier-decoder-bench,
// kvtier-gpu-decoder-bench, kvtier-remote-ttft-bench): medians, and dying
// with a Status named by the program.
#pragma once

#include <errno.h>  // program_invocation_short_name (glibc)

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace kvtier::decoder::bench {

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

[[noreturn]] inline void Die(const absl::Status& st) {
  absl::FPrintF(stderr, "%s: %s\n", program_invocation_short_name, st.ToString());
  std::exit(1);
}

template <typename T>
T Check(absl::StatusOr<T> v) {
  if (!v.ok()) Die(v.status());
  return *std::move(v);
}

}  // namespace kvtier::decoder::bench
