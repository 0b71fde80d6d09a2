// `lookup`: LOOKUP of a present 64-key chain over the daemon's endpoint —
// single-client latency percentiles, then LOOKUPs/s with several client
// threads, each with its own Client (a Client is one session, not shareable).
#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/zmq_floor.h"
#include "kvtier/status_macros.h"

namespace kvtier::bench {
namespace {

absl::Status CheckHits(const absl::StatusOr<LookupResult>& r, size_t want) {
  if (!r.ok()) return r.status();
  if (r->hits != want)
    return absl::InternalError(absl::StrCat("LOOKUP found ", r->hits, " of ", want, " pages"));
  return absl::OkStatus();
}

// LOOKUPs/s of `threads` clients hammering for `seconds`; connections are
// made before the clock starts.
absl::StatusOr<double> MultiThreadRate(const BenchOptions& o, const std::vector<PageKey>& keys) {
  std::vector<std::unique_ptr<Client>> clients;
  for (int t = 0; t < o.lookup_threads; ++t) {
    ClientOptions co{.endpoint = o.endpoint, .tenant = o.tenant, .token = o.token,
                     .client_name = absl::StrCat("kvtier-bench/lookup-", t)};
    ASSIGN_OR_RETURN(auto c, Client::Connect(co));
    clients.push_back(std::move(c));
  }
  std::atomic<bool> go{false}, stop{false};
  std::vector<uint64_t> counts(clients.size(), 0);
  std::vector<absl::Status> errors(clients.size());
  std::vector<std::thread> threads;
  for (size_t t = 0; t < clients.size(); ++t) {
    threads.emplace_back([&, t] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      while (!stop.load(std::memory_order_relaxed)) {
        if (absl::Status st = CheckHits(clients[t]->Lookup(keys), keys.size()); !st.ok()) {
          errors[t] = st;
          return;
        }
        ++counts[t];
      }
    });
  }
  auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.lookup_seconds));
  stop.store(true);
  for (auto& th : threads) th.join();
  const double secs = Seconds(t0, Clock::now());
  uint64_t total = 0;
  for (size_t t = 0; t < clients.size(); ++t) {
    RETURN_IF_ERROR(errors[t]);
    total += counts[t];
  }
  return total / secs;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunLookup(const BenchOptions& o) {
  const size_t n = o.lookup_chain;
  ASSIGN_OR_RETURN(Rig rig, Rig::Create(o, o.endpoint, 1024, n * 1024, "kvtier-bench/lookup"));
  std::vector<PageKey> keys = SyntheticChain(rig.layout, RunNonce() ^ 0x10000c, n);
  rig.Fill(keys);
  RETURN_IF_ERROR(rig.PutAll(keys, n));

  for (int i = 0; i < 1000; ++i) RETURN_IF_ERROR(CheckHits(rig.client->Lookup(keys), n));
  std::vector<double> us;
  us.reserve(o.lookup_calls);
  for (int i = 0; i < o.lookup_calls; ++i) {
    auto t0 = Clock::now();
    auto r = rig.client->Lookup(keys);
    auto t1 = Clock::now();
    RETURN_IF_ERROR(CheckHits(r, n));
    us.push_back(Seconds(t0, t1) * 1e6);
  }
  // Per-chunk p99s show how much the pooled p99 moves between repeats.
  std::vector<double> chunk_p99;
  const size_t chunk = us.size() / std::max(1, o.repeats);
  for (int r = 0; r < o.repeats && chunk > 0; ++r)
    chunk_p99.push_back(Percentile({us.begin() + r * chunk, us.begin() + (r + 1) * chunk}, 99));
  Summary p99s = Summarize(chunk_p99);

  std::vector<double> rates;
  for (int r = 0; r < o.repeats; ++r) {
    ASSIGN_OR_RETURN(double rate, MultiThreadRate(o, keys));
    rates.push_back(rate);
  }
  Summary rate = Summarize(rates);
  RETURN_IF_ERROR(rig.DeleteAll(keys));
  ASSIGN_OR_RETURN(nlohmann::json floor, RunZmqFloor(o, o.lookup_calls));

  const double p50 = Percentile(us, 50), p99 = Percentile(us, 99), p999 = Percentile(us, 99.9);
  const double mx = Percentile(us, 100);
  std::printf("lookup %zu-key chain, %s, 1 client, %zu calls: p50 %.1f us, p99 %.1f us "
              "(per-%zu-call p99 %.1f..%.1f), p99.9 %.1f us, max %.1f us\n",
              n, o.endpoint.c_str(), us.size(), p50, p99, chunk, p99s.min, p99s.max, p999, mx);
  std::printf("lookup %d clients (threads), %.2f s x %d repeats: %.0f LOOKUPs/s [%.0f..%.0f]\n",
              o.lookup_threads, o.lookup_seconds, o.repeats, rate.median, rate.min, rate.max);
  std::fflush(stdout);
  return nlohmann::json{{"chain_pages", n},
                        {"endpoint", o.endpoint},
                        {"calls", us.size()},
                        {"latency_us", {{"p50", p50}, {"p99", p99}, {"p999", p999}, {"max", mx}}},
                        {"p99_per_chunk_us", ToJson(p99s)},
                        {"threads", o.lookup_threads},
                        {"seconds_per_repeat", o.lookup_seconds},
                        {"lookups_per_s", ToJson(rate)},
                        {"zmq_floor", floor}};
}

}  // namespace kvtier::bench
