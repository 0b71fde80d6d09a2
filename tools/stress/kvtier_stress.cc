// kvtier-stress: replays a request trace (Mooncake JSONL, Azure CSV or
// synthetic) against a running kvtierd through the client library, moving and
// checking real page bytes, and reports hit rates, bytes, latency and errors.
// Exit status: 0 clean, 1 errors or corrupt pages, 2 bad setup.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kvtier/byte_size.h"
#include "kvtier/cli.h"
#include "kvtier/status_macros.h"
#include "tools/stress/progress.h"
#include "tools/stress/replayer.h"
#include "tools/stress/report.h"

ABSL_FLAG(std::string, trace, "", "trace: PATH.jsonl (Mooncake), PATH.csv (Azure), mooncake:PATH, "
          "azure:PATH, or synthetic[:requests=N,seed=S,...]");
ABSL_FLAG(std::string, endpoint, "", "daemon endpoint (default: the default ipc socket)");
ABSL_FLAG(std::string, endpoints, "", "several daemons, comma-separated (instead of --endpoint): "
          "request i goes to endpoint i % N, each session connects to all");
ABSL_FLAG(std::string, tenant, "default", "tenant to authenticate as");
ABSL_FLAG(std::string, token, "", "the tenant's token");
ABSL_FLAG(int, concurrency, 1, "sessions, one thread each; they take requests in trace order");
ABSL_FLAG(std::string, page_bytes, "", "page size, e.g. 1MiB (layout {1 layer, fp16, heads x "
          "dims to fit}); empty: --layers x --kv_heads x --head_dim x --dtype");
ABSL_FLAG(uint32_t, layers, 4, "layers per page (with --kv_heads, --head_dim, --dtype)");
ABSL_FLAG(uint32_t, kv_heads, 2, "KV heads");
ABSL_FLAG(uint32_t, head_dim, 64, "head dimension");
ABSL_FLAG(std::string, dtype, "fp16", "fp32, fp16, bf16, fp8, int8");
ABSL_FLAG(uint32_t, pages_per_block, 1, "daemon pages per trace block (must divide its tokens)");
ABSL_FLAG(double, time_scale, 0, "replay time = trace time x this; 0: as fast as possible");
ABSL_FLAG(uint64_t, max_requests, 0, "replay only the first N requests (0: all)");
ABSL_FLAG(bool, stop_on_error, true, "stop at the first malformed trace line, failed request or "
          "corrupt page (false: skip the line, count the failure and go on to the end)");
ABSL_FLAG(bool, decode, true, "also PUT the pages each request's output completes");
ABSL_FLAG(uint32_t, batch_pages, 32, "pages per GET/PUT call (buffer slots per session)");
ABSL_FLAG(uint32_t, prefetch_ahead, 0, "before request i, send a PREFETCH hint for request i+N (a scheduler with N queued requests); 0: none");
ABSL_FLAG(uint64_t, timeout_ms, 60000, "per-call timeout");
ABSL_FLAG(uint64_t, azure_seed, 1, "Azure prefix model: seed");
ABSL_FLAG(uint32_t, azure_system_prompts, 8, "Azure prefix model: shared system prompts");
ABSL_FLAG(uint32_t, azure_system_prompt_tokens, 2048, "Azure prefix model: system prompt tokens");
ABSL_FLAG(double, azure_multi_turn, 0.5, "Azure prefix model: multi-turn probability");
ABSL_FLAG(std::string, json_out, "", "write the report as JSON here");
ABSL_FLAG(std::string, csv_out, "", "write the time series (cumulative counters) as CSV here");
ABSL_FLAG(uint64_t, csv_interval_ms, 0, "deprecated: --series_interval_ms (0: use that)");
ABSL_FLAG(uint64_t, series_interval_ms, 1000, "time series interval: the JSON report's series "
          "(and --csv_out, --series_csv) get one point per interval");
ABSL_FLAG(std::string, series_csv, "", "write the hit-rate series (per interval: t_s, requests, "
          "failed, pages, hit_rate, ...) as CSV here");
ABSL_FLAG(std::string, progress, "auto", "progress bar on stderr: auto (when a terminal), on, off");

namespace kvtier::stress {
namespace {

absl::StatusOr<StressOptions> OptionsFromFlags() {
  StressOptions o;
  o.trace = absl::GetFlag(FLAGS_trace);
  if (o.trace.empty()) return absl::InvalidArgumentError("--trace is required");
  if (const std::string eps = absl::GetFlag(FLAGS_endpoints); !eps.empty()) {
    if (!absl::GetFlag(FLAGS_endpoint).empty())
      return absl::InvalidArgumentError("give --endpoint or --endpoints, not both");
    o.endpoints = absl::StrSplit(eps, ',', absl::SkipWhitespace());
  } else {
    o.endpoints = {absl::GetFlag(FLAGS_endpoint)};
  }
  o.tenant = absl::GetFlag(FLAGS_tenant);
  o.token = absl::GetFlag(FLAGS_token);
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  if (!absl::GetFlag(FLAGS_page_bytes).empty()) {
    auto pb = ParseByteSize(absl::GetFlag(FLAGS_page_bytes));
    if (!pb.ok()) return absl::InvalidArgumentError(absl::StrCat("--page_bytes: ", pb.status().message()));
    o.page_bytes = *pb;
  }
  o.layers = absl::GetFlag(FLAGS_layers);
  o.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  o.head_dim = absl::GetFlag(FLAGS_head_dim);
  o.dtype = absl::GetFlag(FLAGS_dtype);
  o.pages_per_block = absl::GetFlag(FLAGS_pages_per_block);
  o.time_scale = absl::GetFlag(FLAGS_time_scale);
  o.max_requests = absl::GetFlag(FLAGS_max_requests);
  o.stop_on_error = absl::GetFlag(FLAGS_stop_on_error);
  o.decode = absl::GetFlag(FLAGS_decode);
  o.batch_pages = absl::GetFlag(FLAGS_batch_pages);
  o.prefetch_ahead = absl::GetFlag(FLAGS_prefetch_ahead);
  o.timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  o.azure.seed = absl::GetFlag(FLAGS_azure_seed);
  o.azure.system_prompts = absl::GetFlag(FLAGS_azure_system_prompts);
  o.azure.system_prompt_tokens = absl::GetFlag(FLAGS_azure_system_prompt_tokens);
  o.azure.multi_turn_probability = absl::GetFlag(FLAGS_azure_multi_turn);
  return o;
}

absl::StatusOr<trace::Trace> LoadTrace(const StressOptions& o) {
  const trace::ParseOptions po{.stop_on_error = o.stop_on_error, .max_requests = o.max_requests};
  const bool azure = o.trace.rfind("azure:", 0) == 0 ||
                     (o.trace.size() > 4 && o.trace.compare(o.trace.size() - 4, 4, ".csv") == 0);
  if (!azure) return trace::LoadTrace(o.trace, po);
  const std::string path = o.trace.rfind("azure:", 0) == 0 ? o.trace.substr(6) : o.trace;
  return trace::LoadAzureCsv(path, o.azure, po);
}

bool WantBar() {
  const std::string p = absl::GetFlag(FLAGS_progress);
  return p == "on" || (p == "auto" && isatty(STDERR_FILENO));
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "kvtier-stress: %s\n", std::string(st.message()).c_str());
  return 2;
}

std::chrono::milliseconds SeriesInterval() {
  const uint64_t csv = absl::GetFlag(FLAGS_csv_interval_ms);
  return std::chrono::milliseconds(csv > 0 ? csv : absl::GetFlag(FLAGS_series_interval_ms));
}

// The report files the flags ask for.
absl::Status WriteOutputs(const nlohmann::json& report, const std::vector<Sample>& samples) {
  if (const std::string p = absl::GetFlag(FLAGS_json_out); !p.empty())
    RETURN_IF_ERROR(WriteFile(p, report.dump(2) + "\n"));
  if (const std::string p = absl::GetFlag(FLAGS_csv_out); !p.empty())
    RETURN_IF_ERROR(WriteCsv(p, samples));
  if (const std::string p = absl::GetFlag(FLAGS_series_csv); !p.empty())
    RETURN_IF_ERROR(WriteSeriesCsv(p, samples));
  return absl::OkStatus();
}

int Main() {
  auto o = OptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  if (SeriesInterval().count() < 10)
    return Fail(absl::InvalidArgumentError("--series_interval_ms must be >= 10"));
  auto t = LoadTrace(*o);
  if (!t.ok()) return Fail(t.status());
  if (t->requests.empty()) return Fail(absl::InvalidArgumentError("the trace has no requests"));
  auto replayer = Replayer::Create(*o, *t);
  if (!replayer.ok()) return Fail(replayer.status());
  ProgressMonitor monitor((*replayer)->counters(), t->requests.size(), (*replayer)->page_bytes(),
                          WantBar(), SeriesInterval());
  monitor.Start();
  ReplayResult result = (*replayer)->Run();
  monitor.Stop();
  result.samples = monitor.samples();
  result.series_start_unix_s = monitor.start_unix_s();
  result.series_interval_ms = SeriesInterval().count();
  const nlohmann::json report = BuildReport(*o, *t, **replayer, result);
  std::cout << FormatReport(report) << std::flush;
  if (absl::Status st = WriteOutputs(report, result.samples); !st.ok()) return Fail(st);
  return report["ok"].get<bool>() ? 0 : 1;
}

}  // namespace
}  // namespace kvtier::stress

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "replays a request trace (Mooncake JSONL, Azure CSV or synthetic) against a running "
      "kvtierd, moving and verifying every page it reads back, and reports hit rates, bytes, "
      "latency and errors. Exit status: 0 clean, 1 errors or corrupt pages, 2 bad setup.\n"
      "  kvtier-stress --trace=tests/data/synthetic_trace.jsonl --endpoint=ipc:///path/kvtierd.sock\n"
      "  kvtier-stress --trace=... --endpoints=ipc:///a/kvtierd.sock,ipc:///b/kvtierd.sock "
      "--stop_on_error=false --series_csv=series.csv");
  return kvtier::stress::Main();
}
