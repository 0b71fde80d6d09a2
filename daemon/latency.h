// Request latency histograms: fixed log-spaced buckets (powers of two from
// 1 us to ~16.8 s) of lock-free counters, so any thread records and any
// thread (the frontend for STATS, the metrics HTTP thread) reads without locks.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace kvtier::daemon {

// Monotonic clock in ns, for request timing (wall time may step).
inline int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One histogram. Record() is wait-free except for the max (a CAS loop that
// only retries while a larger value races in).
class LatencyHistogram {
 public:
  // Finite bucket upper bounds: 1 us * 2^i, i = 0..kFiniteBuckets-1; one more
  // bucket (+Inf) catches the rest.
  static constexpr int kFiniteBuckets = 25;
  static constexpr int kBuckets = kFiniteBuckets + 1;
  static constexpr uint64_t UpperBoundNs(int i) { return 1000ull << i; }

  // A consistent-enough copy: each counter is read once, so count and the
  // bucket sum can differ by records that raced the copy.
  struct Snapshot {
    std::array<uint64_t, kBuckets> buckets{};  // not cumulative
    uint64_t count = 0;
    uint64_t sum_ns = 0;
    uint64_t max_ns = 0;

    // The q-quantile (0 <= q <= 1) in ns, interpolated linearly inside its
    // bucket (as Prometheus' histogram_quantile does) and clamped to the
    // largest value seen. 0 when empty.
    double QuantileNs(double q) const;
    double MeanNs() const { return count == 0 ? 0 : double(sum_ns) / double(count); }
  };

  void Record(uint64_t ns);
  Snapshot Snap() const;
  // Index of the bucket `ns` falls in (upper bound inclusive, like `le`).
  static int BucketFor(uint64_t ns);

 private:
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
  std::atomic<uint64_t> max_ns_{0};
};

// Where GETs spend their time, grouped by their total time (the buckets of
// LatencyHistogram): per bucket, how many GETs and the summed time of each
// stage, so STATS can say what the slow ones waited on. Lock-free like
// LatencyHistogram.
class GetStages {
 public:
  enum Stage {
    kPrefetchWait,  // waiting for promotions of its pages already under way
    kCopyQueue,     // submitted, waiting for a copy worker
    kCopy,          // reading (the disk, below RAM) and copying into the buffer
    kStages
  };
  using Durations = std::array<uint64_t, kStages>;
  struct Bucket {
    uint64_t count = 0;
    Durations sum_ns{};
  };

  void Record(uint64_t total_ns, const Durations& ns);
  std::array<Bucket, LatencyHistogram::kBuckets> Snap() const;

 private:
  std::array<std::atomic<uint64_t>, LatencyHistogram::kBuckets> count_{};
  std::array<std::array<std::atomic<uint64_t>, kStages>, LatencyHistogram::kBuckets> sum_ns_{};
};

// Per-request-type figures, indexed by the request's oneof field number in
// kvtier.wire.Request (so types added to the schema are covered without a
// table to update).
class RequestMetrics {
 public:
  static constexpr int kMaxType = 64;  // field numbers of the oneof are below this

  // Counts a request (any thread). `type` out of range is counted as type 0.
  void CountRequest(int type);
  void CountError(int type);
  void RecordLatency(int type, uint64_t ns);

  uint64_t requests(int type) const;
  uint64_t errors(int type) const;
  const LatencyHistogram& histogram(int type) const { return hist_[Clamp(type)]; }
  // "LOOKUP", "GET", ... from the schema; "UNKNOWN" for 0 or unknown numbers.
  static std::string TypeName(int type);

  // Open sessions, published by the frontend thread (which owns the table).
  std::atomic<uint64_t> sessions{0};
  // GETs by stage (any thread records).
  GetStages get_stages;

 private:
  static int Clamp(int type) { return type > 0 && type < kMaxType ? type : 0; }
  std::array<LatencyHistogram, kMaxType> hist_;
  std::array<std::atomic<uint64_t>, kMaxType> requests_{};
  std::array<std::atomic<uint64_t>, kMaxType> errors_{};
};

}  // namespace kvtier::daemon
