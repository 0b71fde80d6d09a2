// A background thread that watches a replay's counters: redraws a progress
// bar on stderr when it is a terminal, and samples the time series (cumulative
// counters; the report turns them into per-interval hit rates) every
// `sample_interval`.
#pragma once

#include <chrono>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "tools/stress/stress_stats.h"

namespace kvtier::stress {

class ProgressMonitor {
 public:
  ProgressMonitor(const Counters& c, uint64_t total_requests, uint64_t page_bytes, bool bar,
                  std::chrono::milliseconds sample_interval);
  ~ProgressMonitor();  // Stop()s
  void Start();
  // Ends the thread, takes a last sample and clears the bar line.
  void Stop();
  // Valid after Stop().
  const std::vector<Sample>& samples() const { return samples_; }
  // Wall-clock time of Start(), seconds since the epoch: lines the series up
  // with outside events (a node killed by a benchmark script).
  double start_unix_s() const { return start_unix_s_; }

 private:
  void Loop();
  void Draw(const Sample& s) const;
  double Elapsed() const;

  const Counters& c_;
  const uint64_t total_, page_bytes_;
  const bool bar_;
  const std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point start_;
  double start_unix_s_ = 0;
  absl::Notification done_;
  std::thread thread_;
  std::vector<Sample> samples_;  // written only by the thread until Stop() joins it
};

}  // namespace kvtier::stress
