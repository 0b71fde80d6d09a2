// ScaleStore: builds and measures the scale benchmark's store. Keys are a
// hash of (namespace rank, chain, position), recomputed when needed, so the
// benchmark keeps nothing per page and every byte of RSS growth is the store's.
#include "tiers/store/bench/scale_store.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"
#include "tiers/common/slab_arena.h"
#include "tiers/host/host_tier.h"

namespace kvtier::tiers::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kSlabBytes = 16ull << 20;

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * v.size()));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

}  // namespace

Zipf::Zipf(size_t n, double s) : cdf_(n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) cdf_[i] = sum += 1.0 / std::pow(double(i + 1), s);
  for (double& c : cdf_) c /= sum;
}

size_t Zipf::operator()(std::mt19937_64& rng) const {
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  const size_t i = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
  return std::min(i, cdf_.size() - 1);
}

ProcMemory ReadProcMemory() {
  ProcMemory m;
  std::ifstream in("/proc/self/status");
  std::string line;
  auto field = [&line](const char* name, uint64_t* out) {
    const size_t n = std::strlen(name);
    if (line.compare(0, n, name) != 0) return;
    uint64_t kb = 0;
    std::string rest = line.substr(n);
    rest.erase(rest.find_last_not_of(" kB\t") + 1);
    rest.erase(0, rest.find_first_not_of(" \t"));
    if (absl::SimpleAtoi(rest, &kb)) *out = kb * 1024;
  };
  while (std::getline(in, line)) {
    field("VmRSS:", &m.rss);
    field("RssAnon:", &m.anon);
    field("RssShmem:", &m.shmem);
  }
  return m;
}

ScaleStore::ScaleStore(const ScaleConfig& config)
    : config_(config),
      chains_(config.namespaces, 0),
      zipf_(config.namespaces, config.zipf_s),
      rng_(config.seed),
      keys_(config.chain_pages),
      page_(config.page_bytes, 0x5a) {}

absl::StatusOr<std::unique_ptr<ScaleStore>> ScaleStore::Create(const ScaleConfig& config) {
  if (config.namespaces == 0 || config.chain_pages == 0 || config.page_bytes == 0) {
    return absl::InvalidArgumentError("namespaces, chain_pages and page_bytes must be > 0");
  }
  std::unique_ptr<ScaleStore> s(new ScaleStore(config));
  HostTierConfig hc;
  const uint64_t slot = SlabArena::RoundToSlot(config.page_bytes);
  hc.slab_bytes = kSlabBytes;
  hc.capacity_bytes = (config.capacity_pages * slot + kSlabBytes - 1) / kSlabBytes * kSlabBytes;
  hc.hugepages = HugepageMode::kOff;  // exact RssShmem figures
  hc.prefault = false;                // RssShmem follows the slots used
  ASSIGN_OR_RETURN(std::unique_ptr<Tier> host, CreateHostTier(hc));
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::move(host));
  TierManagerConfig tc;
  tc.index_shards = config.index_shards;
  tc.start_evictor_thread = false;  // the benchmark runs EvictTo itself, timed
  tc.eviction[TierKind::kHost] = config.eviction;
  ASSIGN_OR_RETURN(s->mgr_, TierManager::Create(tc, std::move(tiers)));
  for (uint32_t i = 0; i < config.namespaces; ++i) {
    NamespaceConfig nc;
    nc.name = absl::StrCat("tenant-", i);
    ASSIGN_OR_RETURN(NamespaceId id, s->mgr_->AddNamespace(nc));
    s->ids_.push_back(id);
  }
  return s;
}

PageKey ScaleStore::KeyOf(size_t ns_rank, uint64_t chain, uint32_t pos) const {
  const uint64_t c = Mix(config_.seed ^ (uint64_t(ns_rank) << 44) ^ chain);
  const uint64_t lo = Mix(c + pos);
  const uint64_t hi = Mix(lo ^ 0x6A09E667F3BCC908ull);
  PageKey k;
  std::memcpy(k.bytes.data(), &lo, 8);
  std::memcpy(k.bytes.data() + 8, &hi, 8);
  return k;
}

absl::Status ScaleStore::PutChain(size_t ns_rank) {
  const uint64_t chain = chains_[ns_rank]++;
  const NamespaceId ns = ids_[ns_rank];
  std::vector<Reservation> rs;
  rs.reserve(config_.chain_pages);
  PageKey parent = PageKey::Zero();
  for (uint32_t pos = 0; pos < config_.chain_pages; ++pos) {
    const PageKey key = KeyOf(ns_rank, chain, pos);
    ASSIGN_OR_RETURN(ReserveResult r, mgr_->Reserve(ns, key, parent, config_.page_bytes));
    parent = key;
    if (r.outcome != PutOutcome::kReserved) continue;
    RETURN_IF_ERROR(r.reservation.Fill(page_.data()));
    rs.push_back(std::move(r.reservation));
  }
  const CommitResult c = Reservation::CommitAll(rs);
  return c.error;
}

absl::Status ScaleStore::GrowTo(uint64_t pages) {
  // Every namespace holds a chain first, so all of them have pages in the
  // index (and lists in every shard they hash to) from the start.
  for (size_t r = 0; r < ids_.size(); ++r) {
    if (chains_[r] == 0) RETURN_IF_ERROR(PutChain(r));
  }
  while (IndexPages() < pages) RETURN_IF_ERROR(PutChain(zipf_(rng_)));
  return absl::OkStatus();
}

absl::Status ScaleStore::PutChains(uint64_t pages) {
  for (uint64_t put = 0; put < pages; put += config_.chain_pages) {
    RETURN_IF_ERROR(PutChain(zipf_(rng_)));
  }
  return absl::OkStatus();
}

uint64_t ScaleStore::IndexPages() const {
  uint64_t n = 0;
  for (NamespaceId id : ids_) n += mgr_->NamespacePages(id);
  return n;
}

uint64_t ScaleStore::UsedBytes() const { return mgr_->Snapshot().tiers[0].used_bytes; }

LookupStats ScaleStore::MeasureLookups(size_t n, std::mt19937_64& rng) {
  std::vector<double> us;
  us.reserve(n);
  uint64_t hits = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t r = zipf_(rng);
    const uint64_t chain = std::uniform_int_distribution<uint64_t>(0, chains_[r] - 1)(rng);
    for (uint32_t pos = 0; pos < config_.chain_pages; ++pos) keys_[pos] = KeyOf(r, chain, pos);
    const auto t0 = Clock::now();
    const LookupResult res = mgr_->Lookup(ids_[r], keys_);
    us.push_back(Seconds(t0, Clock::now()) * 1e6);
    hits += res.hits;
  }
  LookupStats s;
  s.hit_rate = n == 0 ? 0 : double(hits) / double(n * config_.chain_pages);
  s.p99_us = Percentile(us, 99);
  s.p50_us = Percentile(us, 50);
  return s;
}

double ScaleStore::MeasureEviction(uint64_t pages) {
  const uint64_t slot = SlabArena::RoundToSlot(config_.page_bytes);
  const uint64_t used = UsedBytes();
  const uint64_t target = used > pages * slot ? used - pages * slot : 0;
  const auto t0 = Clock::now();
  const size_t evicted = mgr_->EvictTo(0, target);
  const double s = Seconds(t0, Clock::now());
  return s > 0 ? double(evicted) / s : 0;
}

absl::StatusOr<double> ScaleStore::MeasureFullPuts(uint64_t pages) {
  // Fill the tier first (untimed), so every timed page makes its room.
  const TierSnapshot tier = mgr_->Snapshot().tiers[0];
  const uint64_t slot = SlabArena::RoundToSlot(config_.page_bytes);
  RETURN_IF_ERROR(PutChains((tier.capacity_bytes - tier.used_bytes) / slot + config_.chain_pages));
  const auto t0 = Clock::now();
  uint64_t put = 0;
  for (; put < pages; put += config_.chain_pages) RETURN_IF_ERROR(PutChain(zipf_(rng_)));
  const double s = Seconds(t0, Clock::now());
  return s > 0 ? double(put) / s : 0;
}

}  // namespace kvtier::tiers::bench
