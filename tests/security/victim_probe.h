// Measurement side of the attack suite: a victim tenant that PINGs the
// daemon every ~2 ms over its own session while an attack runs, and readers
// of the daemon's memory figures in /proc.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/client.h"

namespace kvtier::security {

struct LatencySummary {
  size_t n = 0;
  size_t errors = 0;  // PINGs that failed (counted with the time they took)
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
};

// Percentiles of `ms` (nearest rank); zeros when empty.
LatencySummary Summarize(std::vector<double> ms);

class VictimProbe {
 public:
  // Connects its own session (no layout) as `tenant` and starts pinging.
  VictimProbe(const std::string& endpoint, const std::string& tenant, const std::string& token,
              std::chrono::milliseconds period = std::chrono::milliseconds(2));
  ~VictimProbe();  // Stop()s if still running

  bool connected() const { return client_ != nullptr; }
  // Stops the thread and prints
  //   SECURITY_PING attack=<attack> n=.. p50_ms=.. p99_ms=.. max_ms=.. errors=..
  LatencySummary Stop(const std::string& attack);

 private:
  void Loop();
  std::unique_ptr<Client> client_;
  std::chrono::milliseconds period_;
  std::atomic<bool> stop_{false};
  std::vector<double> ms_;
  size_t errors_ = 0;
  std::thread thread_;
  bool stopped_ = false;
};

// A field of /proc/<pid>/status in bytes ("RssAnon", "VmRSS", "RssShmem"),
// or 0 when the process or field is gone.
uint64_t ProcStatusBytes(pid_t pid, const std::string& field);

// Samples a /proc/<pid>/status field every ~2 ms on its own thread and keeps
// the largest value seen.
class PeakSampler {
 public:
  PeakSampler(pid_t pid, std::string field);
  ~PeakSampler();
  uint64_t Stop();  // the peak, in bytes
  uint64_t peak() const { return peak_.load(); }

 private:
  pid_t pid_;
  std::string field_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> peak_{0};
  std::thread thread_;
};

}  // namespace kvtier::security
