// Pieces shared by the trace parsers and generators: a line reader that
// numbers lines from 1, the "path:line: reason" error convention with the
// skip-or-stop rule, and a small seeded RNG whose output is the same on
// every platform (std:: distributions are not), so a seed names a trace.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"
#include "tools/trace/trace.h"

namespace kvtier::trace::internal {

// Reads a file line by line; strips a trailing '\r'.
class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path), in_(path) {}
  absl::Status Open() const {
    if (in_.is_open()) return absl::OkStatus();
    return absl::NotFoundError(absl::StrCat("cannot open trace file '", path_, "'"));
  }
  // False at end of file.
  bool Next(std::string* line) {
    if (!std::getline(in_, *line)) return false;
    ++line_no_;
    if (!line->empty() && line->back() == '\r') line->pop_back();
    return true;
  }
  uint64_t line_no() const { return line_no_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t line_no_ = 0;
};

// A malformed line: with stop_on_error the parse fails with
// "path:line: reason"; otherwise the line is recorded in `skipped` and the
// caller goes on with the next one (returns OK).
inline absl::Status BadLine(const LineReader& r, const std::string& reason,
                            const ParseOptions& opts, Trace* t) {
  std::string msg = absl::StrCat(r.path(), ":", r.line_no(), ": ", reason);
  if (opts.stop_on_error) return absl::InvalidArgumentError(msg);
  t->skipped.push_back(std::move(msg));
  return absl::OkStatus();
}

inline uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// SplitMix64: tiny, well mixed, and fully specified.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return Mix64(state_++ * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull); }
  // Uniform in [0, n); n > 0. The modulo bias (< n / 2^64) is negligible here.
  uint64_t Uniform(uint64_t n) { return Next() % n; }
  // Uniform in [lo, hi].
  uint64_t Between(uint64_t lo, uint64_t hi) { return lo + Uniform(hi - lo + 1); }
  // Uniform in [0, 1).
  double Real() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  bool Chance(double p) { return Real() < p; }
  // Exponential with the given mean (Poisson inter-arrival times).
  double Exponential(double mean) { return -mean * std::log1p(-Real()); }

 private:
  uint64_t state_;
};

}  // namespace kvtier::trace::internal
