// `lookup_batch`: what a scheduler's per-step LOOKUP costs. (a) chains/s of
// batched LOOKUPs — a waiting queue of --batch_chains requests of
// --batch_keys present pages each — from one client; (b) single-chain
// LOOKUP latency against the bare ZeroMQ echo (zmq_floor.h), the two
// interleaved in blocks so both see the same machine noise.
#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/zmq_floor.h"
#include "client/wire_calls.h"
#include "kvtier.pb.h"
#include "kvtier/status_macros.h"

namespace kvtier::bench {
namespace {

absl::Status CheckAll(const absl::StatusOr<std::vector<LookupResult>>& r, size_t chains,
                      size_t keys) {
  if (!r.ok()) return r.status();
  if (r->size() != chains)
    return absl::InternalError(absl::StrCat("batched LOOKUP answered ", r->size(), " of ", chains,
                                            " chains"));
  for (size_t i = 0; i < chains; ++i)
    if ((*r)[i].hits != keys)
      return absl::InternalError(absl::StrCat("batched LOOKUP found ", (*r)[i].hits, " of ",
                                              keys, " pages of chain ", i));
  return absl::OkStatus();
}

// The daemon's own count and total time of LOOKUPs so far, receipt to reply
// (STATS latency; admin sessions only, else zeros).
std::pair<uint64_t, double> DaemonLookupTime(Client& client) {
  auto s = WireStats(client);
  if (!s.ok()) return {0, 0};
  for (const auto& l : s->latency())
    if (l.request() == "LOOKUP") return {l.count(), l.count() * l.mean_us()};
  return {0, 0};
}

// (a): o.repeats runs of o.batch_calls batched LOOKUPs each.
absl::StatusOr<nlohmann::json> BatchRate(const BenchOptions& o, Client& client,
                                         absl::Span<const absl::Span<const PageKey>> queue,
                                         size_t keys) {
  for (int i = 0; i < 10; ++i) RETURN_IF_ERROR(CheckAll(client.LookupBatch(queue), queue.size(), keys));
  const auto [count0, total0] = DaemonLookupTime(client);
  std::vector<double> rates, us;
  for (int r = 0; r < o.repeats; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < o.batch_calls; ++i) {
      const auto c0 = Clock::now();
      auto got = client.LookupBatch(queue);
      us.push_back(Seconds(c0, Clock::now()) * 1e6);
      RETURN_IF_ERROR(CheckAll(got, queue.size(), keys));
    }
    rates.push_back(o.batch_calls * queue.size() / Seconds(t0, Clock::now()));
  }
  const auto [count1, total1] = DaemonLookupTime(client);
  // Where a call's time goes: in the daemon (receipt to reply, mean) or in
  // the client and the transport (the rest of the mean call).
  const double daemon_us = count1 > count0 ? (total1 - total0) / (count1 - count0) : 0;
  double mean_us = 0;
  for (double u : us) mean_us += u / us.size();
  const Summary rate = Summarize(rates);
  const double p50 = Percentile(us, 50), p99 = Percentile(us, 99);
  std::printf("lookup_batch %zu chains x %zu keys, 1 client, %d x %d calls: %.0f chains/s "
              "[%.0f..%.0f]; per call p50 %.0f us, p99 %.0f us, mean %.0f us of which %.0f us "
              "in the daemon\n",
              queue.size(), keys, o.repeats, o.batch_calls, rate.median, rate.min, rate.max, p50,
              p99, mean_us, daemon_us);
  std::fflush(stdout);
  return nlohmann::json{{"chains", queue.size()},
                        {"keys_per_chain", keys},
                        {"calls_per_repeat", o.batch_calls},
                        {"chains_per_s", ToJson(rate)},
                        {"call_latency_us", {{"p50", p50}, {"p99", p99}, {"mean", mean_us}}},
                        {"daemon_mean_us", daemon_us}};
}

struct Pair {
  std::vector<double> kvtier, echo;
};

// (b): blocks of single LOOKUPs and echo round trips, alternating which goes
// first; o.repeats groups of blocks, each judged on its own.
absl::StatusOr<nlohmann::json> VersusFloor(const BenchOptions& o, Client& client,
                                           absl::Span<const PageKey> chain) {
  ASSIGN_OR_RETURN(std::unique_ptr<ZmqEcho> echo, ZmqEcho::Start());
  constexpr int kBlock = 500;
  auto lookups = [&](int n, std::vector<double>* out) -> absl::Status {
    for (int i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      auto r = client.Lookup(chain);
      const auto t1 = Clock::now();
      if (!r.ok()) return r.status();
      if (r->hits != chain.size()) return absl::InternalError("LOOKUP missed a stored page");
      if (out) out->push_back(Seconds(t0, t1) * 1e6);
    }
    return absl::OkStatus();
  };
  auto echoes = [&](int n, std::vector<double>* out) -> absl::Status {
    for (int i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      if (!echo->RoundTrip()) return absl::UnavailableError("zmq echo did not answer");
      if (out) out->push_back(Seconds(t0, Clock::now()) * 1e6);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(lookups(1000, nullptr));
  RETURN_IF_ERROR(echoes(1000, nullptr));
  const auto [count0, total0] = DaemonLookupTime(client);
  const int blocks = std::max(1, o.lookup_calls / kBlock / o.repeats);
  std::vector<Pair> groups(o.repeats);
  Pair all;
  for (int r = 0; r < o.repeats; ++r)
    for (int b = 0; b < blocks; ++b) {
      Pair& g = groups[r];
      const bool kvtier_first = b % 2 == 0;
      RETURN_IF_ERROR(kvtier_first ? lookups(kBlock, &g.kvtier) : echoes(kBlock, &g.echo));
      RETURN_IF_ERROR(kvtier_first ? echoes(kBlock, &g.echo) : lookups(kBlock, &g.kvtier));
    }
  const auto [count1, total1] = DaemonLookupTime(client);
  const double daemon_us = count1 > count0 ? (total1 - total0) / (count1 - count0) : 0;
  std::vector<double> r50, r99;
  for (const Pair& g : groups) {
    r50.push_back(Percentile(g.kvtier, 50) / Percentile(g.echo, 50));
    r99.push_back(Percentile(g.kvtier, 99) / Percentile(g.echo, 99));
    all.kvtier.insert(all.kvtier.end(), g.kvtier.begin(), g.kvtier.end());
    all.echo.insert(all.echo.end(), g.echo.begin(), g.echo.end());
  }
  const Summary s50 = Summarize(r50), s99 = Summarize(r99);
  const double k50 = Percentile(all.kvtier, 50), k99 = Percentile(all.kvtier, 99);
  const double e50 = Percentile(all.echo, 50), e99 = Percentile(all.echo, 99);
  std::printf("lookup %zu-key chain vs zmq echo, interleaved in blocks of %d, %zu calls each: "
              "LOOKUP p50 %.1f us p99 %.1f us, echo p50 %.1f us p99 %.1f us; ratio p50 %.2fx "
              "[%.2f..%.2f], p99 %.2fx [%.2f..%.2f] (median of %d groups); %.1f us mean in the "
              "daemon\n",
              chain.size(), kBlock, all.kvtier.size(), k50, k99, e50, e99, s50.median, s50.min,
              s50.max, s99.median, s99.min, s99.max, o.repeats, daemon_us);
  std::fflush(stdout);
  return nlohmann::json{{"chain_pages", chain.size()},
                        {"block", kBlock},
                        {"calls_each", all.kvtier.size()},
                        {"lookup_latency_us", {{"p50", k50}, {"p99", k99}}},
                        {"echo_latency_us", {{"p50", e50}, {"p99", e99}}},
                        {"ratio_p50", ToJson(s50)},
                        {"ratio_p99", ToJson(s99)},
                        {"daemon_mean_us", daemon_us}};
}

}  // namespace

absl::StatusOr<nlohmann::json> RunLookupBatch(const BenchOptions& o) {
  const size_t chains = o.batch_chains, keys = o.batch_keys;
  ASSIGN_OR_RETURN(Rig rig, Rig::Create(o, o.endpoint, 1024, keys * 1024,
                                        "kvtier-bench/lookup_batch"));
  std::vector<std::vector<PageKey>> queue(chains);
  for (size_t c = 0; c < chains; ++c) {
    queue[c] = SyntheticChain(rig.layout, RunNonce() ^ (0x1b0000000ull + c), keys);
    rig.Fill(queue[c]);
    RETURN_IF_ERROR(rig.PutAll(queue[c], keys));
  }
  const std::vector<absl::Span<const PageKey>> spans(queue.begin(), queue.end());
  ASSIGN_OR_RETURN(nlohmann::json batch, BatchRate(o, *rig.client, spans, keys));
  ASSIGN_OR_RETURN(nlohmann::json single, VersusFloor(o, *rig.client, queue[0]));
  for (const auto& chain : queue) RETURN_IF_ERROR(rig.DeleteAll(chain));
  return nlohmann::json{{"endpoint", o.endpoint}, {"batch", batch}, {"single_vs_floor", single}};
}

}  // namespace kvtier::bench
