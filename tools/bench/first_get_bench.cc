// `first_get`: what the first GET into a freshly registered buffer costs
// against a second GET of the same pages (issue 14, target <= 1.5x). Per
// buffer size and repeat: a fresh shm buffer the client has written (an
// engine's arena is), REGISTER, wait until STATS says the namespace has no
// warm-up pending (bounded), GET every page, GET them again; and a second
// fresh buffer GET at once after REGISTER (a client that does not wait).
// The same on --first_get_baseline_endpoint (--buffer_warmup=false).
#include "bench/first_get_bench.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/page_pattern.h"
#include "client/wire_calls.h"
#include "kvtier.pb.h"
#include "kvtier/status_macros.h"

namespace kvtier::bench {
namespace {

struct Samples {
  std::vector<double> wait_ms, first_ms, warm_ms, nowait_ms;
  int timeouts = 0;
};

std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

double Ms(Clock::time_point a, Clock::time_point b) { return Seconds(a, b) * 1e3; }

// Pending warm-up bytes of the client's own namespace.
absl::StatusOr<uint64_t> Pending(Client& c) {
  ASSIGN_OR_RETURN(wire::StatsReply st, WireStats(c));
  for (const auto& n : st.namespaces())
    if (n.name() == c.namespace_name()) return n.warmup().pending_bytes();
  return absl::NotFoundError("STATS lists no namespace '" + c.namespace_name() + "'");
}

// Waits until the daemon reports the namespace warm; ms waited, or -1 when
// it was still warming after `max_s`.
absl::StatusOr<double> WaitWarm(Client& c, double max_s) {
  const auto t0 = Clock::now();
  for (;;) {
    ASSIGN_OR_RETURN(uint64_t pending, Pending(c));
    if (pending == 0) return Ms(t0, Clock::now());
    if (Seconds(t0, Clock::now()) > max_s) return -1.0;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// A fresh buffer the client has touched, as an engine's KV arena is.
absl::StatusOr<std::unique_ptr<ShmBuffer>> FreshBuffer(uint64_t size) {
  ASSIGN_OR_RETURN(auto b, ShmBuffer::Create(size));
  std::memset(b->data(), 0, size);
  return b;
}

// GETs every key into `id`; ms taken. Every page must be there.
absl::StatusOr<double> TimeGet(Client& c, BufferId id, const std::vector<PageKey>& keys,
                               const std::vector<uint64_t>& offsets) {
  const auto t0 = Clock::now();
  ASSIGN_OR_RETURN(auto tiers, c.Get(keys, id, offsets));
  const double ms = Ms(t0, Clock::now());
  for (TierKind t : tiers)
    if (t == TierKind::kNone) return absl::NotFoundError("a stored page was missing");
  return ms;
}

absl::Status Verify(const ShmBuffer& b, const std::vector<PageKey>& keys, uint64_t page_bytes) {
  for (size_t i = 0; i < keys.size(); ++i)
    if (tools::CheckPattern(keys[i], b.data() + i * page_bytes, page_bytes) != page_bytes)
      return absl::DataLossError(absl::StrCat("page ", i, " came back wrong"));
  return absl::OkStatus();
}

absl::Status Store(Client& c, const std::vector<PageKey>& keys, uint64_t page_bytes,
                   const std::vector<uint64_t>& offsets) {
  ASSIGN_OR_RETURN(auto src, FreshBuffer(keys.size() * page_bytes));
  for (size_t i = 0; i < keys.size(); ++i)
    tools::FillPattern(keys[i], src->data() + offsets[i], page_bytes);
  ASSIGN_OR_RETURN(BufferId id, c.RegisterBuffer(*src));
  ASSIGN_OR_RETURN(PutResult put, c.Put(keys, PageKey::Zero(), id, offsets));
  RETURN_IF_ERROR(c.UnregisterBuffer(id));
  if (put.stored != keys.size())
    return absl::ResourceExhaustedError(absl::StrCat("stored ", put.stored, " of ", keys.size(),
                                                     " pages; give the daemon a larger host tier"));
  return absl::OkStatus();
}

// One repeat: register a fresh buffer, optionally wait until warm, GET twice.
absl::Status OneRepeat(Client& c, const std::vector<PageKey>& keys,
                       const std::vector<uint64_t>& offsets, uint64_t page_bytes, double max_wait_s,
                       Samples& s) {
  ASSIGN_OR_RETURN(auto buf, FreshBuffer(keys.size() * page_bytes));
  ASSIGN_OR_RETURN(BufferId id, c.RegisterBuffer(*buf));
  ASSIGN_OR_RETURN(double waited, WaitWarm(c, max_wait_s));
  if (waited < 0) ++s.timeouts;
  s.wait_ms.push_back(waited);
  ASSIGN_OR_RETURN(double first, TimeGet(c, id, keys, offsets));
  ASSIGN_OR_RETURN(double warm, TimeGet(c, id, keys, offsets));
  s.first_ms.push_back(first);
  s.warm_ms.push_back(warm);
  RETURN_IF_ERROR(Verify(*buf, keys, page_bytes));
  RETURN_IF_ERROR(c.UnregisterBuffer(id));
  // A client that GETs right after REGISTER, racing the warm-up.
  ASSIGN_OR_RETURN(auto now, FreshBuffer(keys.size() * page_bytes));
  ASSIGN_OR_RETURN(BufferId id2, c.RegisterBuffer(*now));
  ASSIGN_OR_RETURN(double nowait, TimeGet(c, id2, keys, offsets));
  s.nowait_ms.push_back(nowait);
  RETURN_IF_ERROR(Verify(*now, keys, page_bytes));
  return c.UnregisterBuffer(id2);
}

nlohmann::json Report(const Samples& s) {
  const double first = Summarize(s.first_ms).median, warm = Summarize(s.warm_ms).median;
  std::vector<double> ratios;
  for (size_t i = 0; i < s.first_ms.size(); ++i) ratios.push_back(s.first_ms[i] / s.warm_ms[i]);
  return {{"wait_ms", ToJson(Summarize(s.wait_ms))},
          {"first_ms", ToJson(Summarize(s.first_ms))},
          {"warm_ms", ToJson(Summarize(s.warm_ms))},
          {"nowait_first_ms", ToJson(Summarize(s.nowait_ms))},
          {"ratio_of_medians", first / warm},
          {"ratio", ToJson(Summarize(ratios))},
          {"nowait_ratio_of_medians", Summarize(s.nowait_ms).median / warm},
          {"wait_timeouts", s.timeouts}};
}

absl::StatusOr<nlohmann::json> MeasureDaemon(const BenchOptions& o, const FirstGetOptions& f,
                                             const std::string& endpoint, uint64_t size) {
  ASSIGN_OR_RETURN(Layout layout, LayoutForPageBytes(f.page_bytes));
  ClientOptions co{.endpoint = endpoint, .tenant = o.tenant, .token = o.token, .layout = layout,
                   .client_name = "kvtier-bench first_get",
                   .timeout = std::chrono::milliseconds(60000)};
  ASSIGN_OR_RETURN(auto c, Client::Connect(co));
  const size_t n = size / f.page_bytes;
  if (n == 0 || n > 4096)
    return absl::InvalidArgumentError(absl::StrCat("buffer of ", size, " bytes holds ", n,
                                                   " pages; use 1..4096 pages"));
  const auto keys = SyntheticChain(layout, RunNonce() ^ (size * 31) ^ std::hash<std::string>()(endpoint), n);
  std::vector<uint64_t> offsets(n);
  for (size_t i = 0; i < n; ++i) offsets[i] = i * f.page_bytes;
  RETURN_IF_ERROR(Store(*c, keys, f.page_bytes, offsets));
  Samples s;
  for (int r = 0; r < o.repeats; ++r)
    RETURN_IF_ERROR(OneRepeat(*c, keys, offsets, f.page_bytes, f.max_wait_s, s));
  (void)c->Delete(keys);
  return Report(s);
}

void Print(const char* label, const nlohmann::json& r) {
  std::printf("  %-9s wait %7.1f ms | first %7.2f ms  warm %7.2f ms  first/warm %5.2f "
              "(per-repeat median %5.2f) | no wait: first %7.2f ms (%5.2fx)%s\n",
              label, r["wait_ms"]["median"].get<double>(), r["first_ms"]["median"].get<double>(),
              r["warm_ms"]["median"].get<double>(), r["ratio_of_medians"].get<double>(),
              r["ratio"]["median"].get<double>(), r["nowait_first_ms"]["median"].get<double>(),
              r["nowait_ratio_of_medians"].get<double>(),
              r["wait_timeouts"].get<int>() > 0 ? "  (wait timed out)" : "");
}

}  // namespace

absl::StatusOr<nlohmann::json> RunFirstGet(const BenchOptions& o, const FirstGetOptions& f) {
  nlohmann::json out = {{"page_bytes", f.page_bytes}, {"repeats", o.repeats},
                        {"loadavg_before", LoadAverage()}};
  std::printf("first_get: first GET into a fresh registered buffer vs a warm GET, %s pages, "
              "medians of %d (load %s)\n",
              HumanBytes(f.page_bytes).c_str(), o.repeats, LoadAverage().c_str());
  for (uint64_t size : f.buffer_sizes) {
    std::printf(" %s buffer:\n", HumanBytes(size).c_str());
    nlohmann::json row = {{"buffer_bytes", size}};
    ASSIGN_OR_RETURN(row["warmup"], MeasureDaemon(o, f, o.endpoint, size));
    Print("warm-up", row["warmup"]);
    if (!f.baseline_endpoint.empty()) {
      ASSIGN_OR_RETURN(row["baseline"], MeasureDaemon(o, f, f.baseline_endpoint, size));
      Print("no warm-up", row["baseline"]);
    }
    out["sizes"].push_back(row);
  }
  out["loadavg_after"] = LoadAverage();
  return out;
}

}  // namespace kvtier::bench
