// The replay engine of kvtier-stress: N sessions (one thread each) take the
// trace's requests in order, request i on endpoint i % endpoints (requests
// alternate between daemons), and, for each, LOOKUP the page chain, GET the
// leading hits into a registered shm buffer and check every byte, PUT the
// misses (chained by parent) and the pages the output completes. Talks to the
// daemon only through kvtier::Client.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "kvtier.pb.h"
#include "kvtier/client.h"
#include "kvtier/shm_buffer.h"
#include "tools/stress/stress_options.h"
#include "tools/stress/stress_stats.h"
#include "tools/trace/trace.h"

namespace kvtier::stress {

class Session;

struct ReplayResult {
  double wall_s = 0;
  Latencies latencies;            // merged over sessions
  std::vector<std::string> error_samples;
  bool stopped_early = false;     // stop_on_error cut the run short
  // The time series (cumulative samples) and when it started; filled in by
  // whoever sampled the counters during Run().
  std::vector<Sample> samples;
  double series_start_unix_s = 0;
  uint64_t series_interval_ms = 0;
  // Each endpoint's daemon STATS around the run (for bytes moved per tier
  // as the daemon saw them, including demotions to NVMe); an entry is absent
  // when STATS failed.
  std::vector<std::optional<wire::StatsReply>> before, after;
};

class Replayer {
 public:
  // Connects `o.concurrency` sessions and registers their buffers; fails
  // (naming the daemon's reason) when any cannot.
  static absl::StatusOr<std::unique_ptr<Replayer>> Create(const StressOptions& o,
                                                          const trace::Trace& t);
  ~Replayer();

  // Replays every request once; blocks until done. Thread-safe to read
  // counters() from another thread meanwhile.
  ReplayResult Run();

  const Counters& counters() const { return counters_; }
  // Endpoint e's share of counters() (e indexes StressOptions::endpoints).
  const Counters& endpoint_counters(size_t e) const { return endpoint_counters_[e]; }
  const Layout& layout() const { return layout_; }
  uint64_t page_bytes() const { return layout_.PageBytes(); }
  const trace::PageMapping& mapping() const { return mapping_; }

 private:
  Replayer(const StressOptions& o, const trace::Trace& t);
  std::optional<wire::StatsReply> DaemonStats(const std::string& endpoint);
  void Work(Session& s, std::chrono::steady_clock::time_point start);

  StressOptions o_;
  const trace::Trace& trace_;
  Layout layout_;
  trace::PageMapping mapping_;
  std::vector<std::unique_ptr<Session>> sessions_;
  Counters counters_;
  std::vector<Counters> endpoint_counters_;  // sized once in Create, never resized
  std::unique_ptr<PutOwners> owners_;        // with several endpoints only
  ErrorLog errors_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvtier::stress
