// `nvme`: the cost of a RAM miss that hits NVMe, end to end through the
// daemon. Stores a working set larger than the host tier (the daemon runs
// with --promote_on_get=false so pages stay where they are), finds which
// pages sit in RAM and which on NVMe, and times GETs of each kind, and GETs
// of --batch_bytes of pages drawn at random from all those on NVMe.
// `fill`: stores --fill_pages pages of --fill_page_bytes and exits (for the
// restart-time measurement in scripts/bench_nvme_daemon.sh).
#include <algorithm>
#include <cstring>
#include <cstdio>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "common/page_pattern.h"
#include "kvtier.pb.h"
#include "kvtier/status_macros.h"

namespace kvtier::bench {
namespace {

// Tier of every key. One LOOKUP per key: a chain LOOKUP stops at the first
// miss, and we want to know where every page is.
absl::StatusOr<std::vector<TierKind>> TiersOf(Client& c, const std::vector<PageKey>& keys) {
  std::vector<TierKind> out(keys.size(), TierKind::kNone);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSIGN_OR_RETURN(auto r, c.Lookup(absl::MakeConstSpan(&keys[i], 1)));
    if (r.hits == 1) out[i] = r.tiers[0];
  }
  return out;
}

// GB/s of GETs of `idx` pages (batches of `batch`), medians over repeats,
// plus bytes verified once.
absl::StatusOr<Summary> TimeGets(Rig& rig, const std::vector<PageKey>& keys,
                                 const std::vector<size_t>& idx, size_t batch, int repeats) {
  std::vector<double> runs;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    for (size_t b = 0; b < idx.size(); b += batch) {
      const size_t n = std::min(batch, idx.size() - b);
      std::vector<PageKey> k;
      std::vector<uint64_t> off;
      for (size_t i = b; i < b + n; ++i) k.push_back(keys[idx[i]]), off.push_back(rig.offsets[idx[i]]);
      ASSIGN_OR_RETURN(auto tiers, rig.client->Get(k, rig.buffer, off));
      for (TierKind t : tiers)
        if (t == TierKind::kNone) return absl::NotFoundError("a page vanished during the run");
    }
    runs.push_back(idx.size() * rig.page_bytes / Seconds(t0, Clock::now()) / 1e9);
  }
  for (size_t i : idx)
    if (tools::CheckPattern(keys[i], rig.page(i), rig.page_bytes) != rig.page_bytes)
      return absl::DataLossError(absl::StrCat("page ", i, " came back wrong"));
  return Summarize(runs);
}

// GB/s of GETs of `batch` distinct pages drawn at random from `idx`, `gets`
// requests per repeat, medians over repeats; every page must come from NVMe
// and is verified after each repeat (outside the timing).
absl::StatusOr<Summary> TimeRandomGets(Rig& rig, const std::vector<PageKey>& keys,
                                       std::vector<size_t> idx, size_t batch, size_t gets,
                                       int repeats) {
  if (idx.size() < batch) return absl::FailedPreconditionError("fewer NVMe pages than one GET");
  std::mt19937_64 rng(0x646565702d726473);
  std::vector<double> runs;
  for (int r = 0; r < repeats; ++r) {
    std::vector<std::vector<size_t>> picks(gets);
    for (auto& p : picks) {
      std::shuffle(idx.begin(), idx.end(), rng);
      p.assign(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(batch));
      for (size_t i : p) std::memset(rig.page(i), 0, rig.page_bytes);
    }
    auto t0 = Clock::now();
    for (const auto& p : picks) {
      std::vector<PageKey> k;
      std::vector<uint64_t> off;
      for (size_t i : p) k.push_back(keys[i]), off.push_back(rig.offsets[i]);
      ASSIGN_OR_RETURN(auto tiers, rig.client->Get(k, rig.buffer, off));
      for (TierKind t : tiers)
        if (t != TierKind::kNvme) return absl::FailedPreconditionError("a page left NVMe");
    }
    runs.push_back(gets * batch * rig.page_bytes / Seconds(t0, Clock::now()) / 1e9);
    for (const auto& p : picks)
      for (size_t i : p)
        if (tools::CheckPattern(keys[i], rig.page(i), rig.page_bytes) != rig.page_bytes)
          return absl::DataLossError(absl::StrCat("page ", i, " came back wrong"));
  }
  return Summarize(runs);
}

}  // namespace

absl::StatusOr<nlohmann::json> RunNvme(const BenchOptions& o) {
  const uint64_t pb = o.page_sizes.empty() ? (1u << 20) : o.page_sizes[0];
  const uint64_t ws = o.working_set_bytes / pb * pb;
  ASSIGN_OR_RETURN(Rig rig, Rig::Create(o, o.endpoint, pb, ws, "kvtier-bench/nvme"));
  std::vector<PageKey> keys = SyntheticChain(rig.layout, RunNonce() ^ 0x6e766d65, rig.pages());
  rig.Fill(keys);
  const size_t batch = std::max<uint64_t>(1, o.batch_bytes / pb);
  RETURN_IF_ERROR(rig.PutAll(keys, batch));
  std::this_thread::sleep_for(std::chrono::seconds(2));  // let the evictor settle
  ASSIGN_OR_RETURN(auto tiers, TiersOf(*rig.client, keys));
  std::vector<size_t> host, nvme;
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i] == TierKind::kHost) host.push_back(i);
    if (tiers[i] == TierKind::kNvme) nvme.push_back(i);
  }
  if (host.empty() || nvme.empty())
    return absl::FailedPreconditionError(absl::StrCat(
        "need pages in both tiers (host ", host.size(), ", nvme ", nvme.size(),
        "): run the daemon with a host tier smaller than --working_set and --promote_on_get=false"));
  // Deep reads (issue 14): GETs of `batch` random pages out of all those on NVMe.
  const size_t gets = std::max<uint64_t>(1, o.working_set_bytes / (batch * pb));
  ASSIGN_OR_RETURN(Summary rnd, TimeRandomGets(rig, keys, nvme, batch, gets, o.repeats));
  const size_t nvme_total = nvme.size();
  const size_t n = std::min(host.size(), nvme.size());
  host.resize(n);
  nvme.resize(n);
  std::memset(rig.shm->data(), 0, rig.shm->size());
  ASSIGN_OR_RETURN(Summary h, TimeGets(rig, keys, host, batch, o.repeats));
  ASSIGN_OR_RETURN(Summary d, TimeGets(rig, keys, nvme, batch, o.repeats));
  std::printf("nvme: %zu pages of %s in each tier, %zu per GET:\n", n, HumanBytes(pb).c_str(), batch);
  std::printf("  GET from host: %6.2f GB/s [%.2f..%.2f]\n", h.median, h.min, h.max);
  std::printf("  GET from nvme: %6.2f GB/s [%.2f..%.2f]  (%.1fx slower than host)\n", d.median,
              d.min, d.max, h.median / d.median);
  std::printf("  GET of %zu random of %zu nvme pages: %6.2f GB/s [%.2f..%.2f]  (%zu GETs/repeat)\n",
              batch, nvme_total, rnd.median, rnd.min, rnd.max, gets);
  return nlohmann::json{{"page_bytes", pb}, {"pages_each", n}, {"batch_pages", batch},
                        {"host_gbps", ToJson(h)}, {"nvme_gbps", ToJson(d)},
                        {"nvme_random_gbps", ToJson(rnd)}, {"nvme_pages", nvme_total},
                        {"host_over_nvme", h.median / d.median}};
}

absl::StatusOr<nlohmann::json> RunFill(const BenchOptions& o, uint64_t pages, uint64_t pb) {
  const size_t chain = 4096;
  ASSIGN_OR_RETURN(Rig rig, Rig::Create(o, o.endpoint, pb, chain * pb, "kvtier-bench/fill"));
  auto t0 = Clock::now();
  for (uint64_t done = 0, c = 0; done < pages; ++c) {
    const size_t n = std::min<uint64_t>(chain, pages - done);
    std::vector<PageKey> keys = SyntheticChain(rig.layout, RunNonce() ^ (c * 7919 + 1), n);
    rig.Fill(keys);
    RETURN_IF_ERROR(rig.PutAll(keys, 512));
    done += n;
  }
  const double s = Seconds(t0, Clock::now());
  std::printf("fill: %lu pages of %s stored in %.1f s\n", (unsigned long)pages,
              HumanBytes(pb).c_str(), s);
  return nlohmann::json{{"pages", pages}, {"page_bytes", pb}, {"seconds", s}};
}

}  // namespace kvtier::bench
