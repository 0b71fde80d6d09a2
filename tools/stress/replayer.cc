// Runs the sessions of a replay over the trace, in trace order (a shared
// cursor), request i on endpoint i % endpoints, paced by the trace's
// timestamps when time_scale > 0.
#include "client/wire_calls.h"
#include "tools/stress/replayer.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"
#include "tools/stress/session.h"

namespace kvtier::stress {

using Clock = std::chrono::steady_clock;

Replayer::Replayer(const StressOptions& o, const trace::Trace& t) : o_(o), trace_(t) {}
Replayer::~Replayer() = default;

absl::StatusOr<std::unique_ptr<Replayer>> Replayer::Create(const StressOptions& o,
                                                           const trace::Trace& t) {
  if (o.concurrency < 1 || o.concurrency > 256)
    return absl::InvalidArgumentError(
        absl::StrCat("--concurrency=", o.concurrency, " is not in [1, 256]"));
  if (o.batch_pages < 1 || o.batch_pages > 4096)
    return absl::InvalidArgumentError(
        absl::StrCat("--batch_pages=", o.batch_pages, " is not in [1, 4096]"));
  if (o.endpoints.empty() || o.endpoints.size() >= PutOwners::kUnknown)
    return absl::InvalidArgumentError(
        absl::StrCat(o.endpoints.size(), " endpoints: want 1 to ", PutOwners::kUnknown - 1));
  if (o.time_scale < 0)
    return absl::InvalidArgumentError(absl::StrCat("--time_scale=", o.time_scale, " is < 0"));
  std::unique_ptr<Replayer> r(new Replayer(o, t));
  ASSIGN_OR_RETURN(r->layout_, MakeLayout(o, t.block_tokens));
  r->mapping_.pages_per_block = o.pages_per_block;
  r->endpoint_counters_ = std::vector<Counters>(o.endpoints.size());
  if (o.endpoints.size() > 1) r->owners_ = std::make_unique<PutOwners>();
  const SessionContext ctx{.options = &r->o_, .mapping = &r->mapping_,
                           .block_tokens = t.block_tokens,
                           .key_salt = TraceSalt(t), .counters = &r->counters_,
                           .endpoint_counters = absl::MakeSpan(r->endpoint_counters_),
                           .owners = r->owners_.get(), .errors = &r->errors_, .stop = &r->stop_};
  for (int i = 0; i < o.concurrency; ++i) {
    auto s = Session::Create(ctx, r->layout_, i);
    if (!s.ok())
      return absl::Status(s.status().code(), absl::StrCat("session ", i, ": ",
                                                          s.status().message()));
    r->sessions_.push_back(std::move(*s));
  }
  return r;
}

std::optional<wire::StatsReply> Replayer::DaemonStats(const std::string& endpoint) {
  ClientOptions co{.endpoint = endpoint, .tenant = o_.tenant, .token = o_.token,
                   .client_name = "kvtier-stress/stats",
                   .timeout = std::chrono::milliseconds(o_.timeout_ms)};
  auto c = Client::Connect(co);
  if (!c.ok()) return std::nullopt;
  auto s = WireStats(**c);
  if (!s.ok()) return std::nullopt;
  return *std::move(s);
}

void Replayer::Work(Session& s, Clock::time_point start) {
  const size_t n = trace_.requests.size();
  for (;;) {
    if (stop_.load()) return;
    const size_t i = next_.fetch_add(1);
    if (i >= n) return;
    const trace::Request& r = trace_.requests[i];
    if (o_.time_scale > 0) {
      const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double, std::milli>(r.timestamp_ms *
                                                                             o_.time_scale));
      std::this_thread::sleep_until(due);
    }
    const size_t eps = o_.endpoints.size(), ep = i % eps;
    absl::Status st = absl::OkStatus();
    if (const size_t ahead = i + o_.prefetch_ahead; o_.prefetch_ahead > 0 && ahead < n)
      st = s.Hint(trace_.requests[ahead], ahead % eps);
    if (st.ok()) st = s.Replay(r, ep);
    const CounterPair c{&counters_, &endpoint_counters_[ep]};
    if (!st.ok()) {
      c.Add(&Counters::errors, 1);
      errors_.Record(absl::StrCat("request ", i, " (trace line ", r.line, ", endpoint ", ep,
                                  "): ", st.ToString()));
      if (o_.stop_on_error) stop_.store(true);
    }
    c.Add(&Counters::requests, 1);
  }
}

ReplayResult Replayer::Run() {
  ReplayResult res;
  for (const std::string& e : o_.endpoints) res.before.push_back(DaemonStats(e));
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (auto& s : sessions_) threads.emplace_back([this, &s, start] { Work(*s, start); });
  for (auto& t : threads) t.join();
  res.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  for (const std::string& e : o_.endpoints) res.after.push_back(DaemonStats(e));
  for (auto& s : sessions_) res.latencies.Merge(s->latencies());
  res.error_samples = errors_.Kept();
  res.stopped_early = stop_.load() && next_.load() < trace_.requests.size();
  return res;
}

}  // namespace kvtier::stress
