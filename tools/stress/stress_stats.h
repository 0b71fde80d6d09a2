// Figures of a replay: live counters the workers bump (read by the progress
// bar and the CSV sampler while the run goes on), per-call latencies kept per
// worker and merged at the end, and the first few error messages.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kvtier/client.h"

namespace kvtier::stress {

inline constexpr size_t kTiers = 4;  // indexed by TierKind: none, hbm, host, nvme

// Monotonic counters; every field only grows during a run.
struct Counters {
  std::atomic<uint64_t> requests{0};       // requests finished (with or without error)
  std::atomic<uint64_t> pages{0};          // pages looked up (input pages of finished requests)
  std::atomic<uint64_t> hit_pages{0};      // leading pages LOOKUP found and GET served
  std::atomic<uint64_t> blocks{0};         // trace blocks of finished requests
  std::atomic<uint64_t> hit_blocks{0};     // blocks all of whose pages were hits
  std::array<std::atomic<uint64_t>, kTiers> hit_pages_by_tier{};  // by LOOKUP's tier
  std::array<std::atomic<uint64_t>, kTiers> get_bytes_by_tier{};  // by GET's served tier
  std::atomic<uint64_t> get_races{0};      // LOOKUP hits gone by the GET (counted as misses)
  std::atomic<uint64_t> put_stored{0};     // pages newly stored
  std::atomic<uint64_t> put_dedup{0};      // pages already present
  std::atomic<uint64_t> put_not_stored{0}; // pages refused for room (chain cut)
  std::atomic<uint64_t> decode_pages{0};   // of the PUT pages, those the output completed
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> corrupt_pages{0};

  static void Add(std::atomic<uint64_t>& c, uint64_t n) { c.fetch_add(n, std::memory_order_relaxed); }
  uint64_t GetBytes() const;
};

// One point of the CSV time series.
struct Sample {
  double elapsed_s = 0;
  uint64_t requests = 0, pages = 0, hit_pages = 0, get_bytes = 0, put_bytes = 0;
  uint64_t errors = 0, corrupt_pages = 0;
};
Sample TakeSample(const Counters& c, double elapsed_s, uint64_t page_bytes);

// Per-call latencies in microseconds, one set per worker (no sharing).
struct Latencies {
  std::vector<double> lookup_us, get_us, put_us;
  void Merge(const Latencies& o);
};

struct Quantiles {
  uint64_t count = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
};
// Nearest-rank quantiles of `v` (sorted in place).
Quantiles ComputeQuantiles(std::vector<double>& v);

// Error messages: all are counted, the first `kKept` are kept for the report.
class ErrorLog {
 public:
  static constexpr size_t kKept = 20;
  void Record(std::string message);
  std::vector<std::string> Kept() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::stress
