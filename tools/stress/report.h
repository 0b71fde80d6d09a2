// The kvtier-stress report: one JSON document (--json_out) from which the
// text report is printed, so both always say the same; and the CSV time
// series (--csv_out: cumulative counters; --series_csv: per interval).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "tools/stress/replayer.h"
#include "tools/stress/stress_options.h"
#include "tools/trace/trace.h"

namespace kvtier::stress {

nlohmann::json BuildReport(const StressOptions& o, const trace::Trace& t,
                           const Replayer& replayer, ReplayResult& result);
std::string FormatReport(const nlohmann::json& report);
// Columns: elapsed_s, requests, pages, hit_pages, hit_rate, get_bytes,
// put_bytes, errors, corrupt_pages (cumulative).
absl::Status WriteCsv(const std::string& path, const std::vector<Sample>& samples);
// The hit-rate time series, one row per interval (report_parts.h).
absl::Status WriteSeriesCsv(const std::string& path, const std::vector<Sample>& samples);
// Writes `text` to `path`, naming the path in any error.
absl::Status WriteFile(const std::string& path, const std::string& text);

}  // namespace kvtier::stress
