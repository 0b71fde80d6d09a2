// kvtier-sim's output: the hit-rate-vs-capacity table, the two-tier and
// remote-tier runs, its JSON form, and the PNG plot (gnuplot, fed a generated script on stdin).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "tools/sim/cluster_study.h"
#include "tools/sim/sim.h"

namespace kvtier::sim {

struct CapacityRow {
  std::string label;            // as given, e.g. "4k" or "4GiB"
  uint64_t capacity_pages = 0;  // pages the tier holds
  SimResult lru, belady;
  std::vector<SimResult> others;  // the store under each other --eviction policy
};

struct TwoTierRun {
  std::string host_label, nvme_label;
  uint64_t host_pages = 0, nvme_pages = 0;
  SimResult lru;     // tier_hits: host, nvme
  SimResult belady;  // one cache of host + nvme pages
  std::vector<SimResult> others;  // the store under each other --eviction policy
};

struct SimReport {
  std::string trace;         // source spec
  std::string prefix_model;  // how prefix sharing was obtained
  std::string mapping;       // block -> page mapping
  std::string policy;        // TierManager settings, in words
  uint64_t requests = 0, refs = 0, unique_pages = 0, decode_pages = 0;
  SimResult infinite;
  std::vector<CapacityRow> rows;
  std::optional<TwoTierRun> two_tier;
  std::optional<ClusterStudy> cluster;  // --remote_pages
  double wall_seconds = 0;
};

// One result as JSON (hits by tier and store counters for LRU runs, the
// remote tier's commands when it had one).
nlohmann::json ResultJson(const SimResult& r);

std::string FormatReport(const SimReport& report);
nlohmann::json ReportJson(const SimReport& report);
absl::Status WriteJson(const SimReport& report, const std::string& path);

// The gnuplot script for the plot (data inline), exposed for tests.
std::string PlotScript(const SimReport& report, const std::string& png_path);
// Renders the plot with gnuplot. FailedPrecondition when gnuplot is not on
// PATH (the message says how to install it), Internal when it fails.
absl::Status WritePlot(const SimReport& report, const std::string& png_path);

}  // namespace kvtier::sim
