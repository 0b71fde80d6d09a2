// Pieces of the kvtier-stress JSON report shared by the total and the
// per-endpoint sections: counter figures, the daemons' own tier counters over
// the run, and the hit-rate time series.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kvtier.pb.h"
#include "nlohmann/json.hpp"
#include "tools/stress/stress_stats.h"

namespace kvtier::stress {

// requests, failed_requests, corrupt_pages, pages, hit rates and GET bytes
// by tier (LOOKUP's tier for hits, GET's for bytes), the remote tier's share
// of hits and of GET bytes, remote hits on pages another endpoint PUT.
nlohmann::json CountersJson(const Counters& c, uint64_t page_bytes);

// Per-tier changes of one daemon's counters over the run (gauges as after);
// an empty array when either STATS is missing.
nlohmann::json DaemonTiersJson(const std::optional<wire::StatsReply>& before,
                               const std::optional<wire::StatsReply>& after);
// Sums tier entries of several daemons by tier name ("down" is or-ed).
nlohmann::json SumDaemonTiers(const std::vector<nlohmann::json>& per_daemon);

// {interval_ms, start_unix_s, points: [{t_s, requests, failed, corrupt_pages,
// interval_requests, interval_failed, pages, hit_pages, hit_rate (null when
// no page was looked up in the interval)}]}.
nlohmann::json SeriesJson(const std::vector<Sample>& samples, uint64_t interval_ms,
                          double start_unix_s);
// The same points as CSV (hit_rate empty when null).
std::string SeriesCsv(const std::vector<Sample>& samples);

}  // namespace kvtier::stress
