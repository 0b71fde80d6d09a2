// kvtier-scale-bench: the store at scale. Grows one TierManager of small host
// pages over N namespaces (Zipf traffic) through page-count checkpoints and
// measures, at each, LOOKUP latency, eviction throughput and RSS per indexed
// page; scripts/bench_scale.sh runs it over 1..1,000 namespaces and 1M..10M
// pages and plots the CSV. Links tiers/ directly: it measures the store.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "kvtier/cli.h"
#include "tiers/store/bench/memory_floor.h"
#include "tiers/store/bench/scale_store.h"

ABSL_FLAG(uint32_t, namespaces, 1000, "namespaces (tenants), Zipf-weighted");
ABSL_FLAG(std::string, pages, "1M", "page-count checkpoints, ascending (k/M: x1000/x1e6)");
ABSL_FLAG(uint32_t, ref_namespaces, 0,
          "also build a reference store of this many namespaces (0: none) and measure it in "
          "alternation with the store under test, for ratios under the same load");
ABSL_FLAG(std::string, ref_pages, "1M", "pages of the reference store");
ABSL_FLAG(uint32_t, chain_pages, 32, "pages per chain (one PUT, one LOOKUP)");
ABSL_FLAG(uint32_t, page_bytes, 16, "bytes per page (small: memory goes to the index)");
ABSL_FLAG(double, zipf, 1.0, "Zipf exponent of namespace popularity");
ABSL_FLAG(uint32_t, shards, 16, "index shards");
ABSL_FLAG(std::string, eviction, "lru",
          "the host tier's eviction policy (lru, 2q, arc, s3fifo, prefix)");
ABSL_FLAG(uint32_t, lookups, 5000, "LOOKUPs per round and store");
ABSL_FLAG(int, lookup_rounds, 20, "LOOKUP rounds; medians of the rounds' p50/p99 are reported");
ABSL_FLAG(std::string, evict_pages, "50k", "pages evicted per eviction repeat");
ABSL_FLAG(int, repeats, 5, "eviction and full-tier PUT repeats; the median is reported");
ABSL_FLAG(bool, evict_every_point, true,
          "measure eviction at every checkpoint; false: at the last only, so the LOOKUPs of "
          "every checkpoint find whole chains (eviction leaves holes in the oldest)");
ABSL_FLAG(bool, memory_floor, true,
          "with a reference store: after the last checkpoint, measure LOOKUP's access pattern "
          "alone (a random line, then the line it names, per key) over arrays the size of each "
          "store's index, in alternation, and print its ratio beside LOOKUP's");
ABSL_FLAG(std::string, label, "current", "label of this run's rows (e.g. the build measured)");
ABSL_FLAG(std::string, csv, "", "append rows to this CSV (header written when new)");
ABSL_FLAG(uint64_t, seed, 1, "workload seed");
ABSL_FLAG(bool, mutex_deadlock_detection, false,
          "leave Abseil's Mutex deadlock detection on as Debian's build ships it (a graph update "
          "on every lock, behind one global spinlock); default off, as a release kvtierd runs");

namespace {

namespace bench = kvtier::tiers::bench;
using Clock = std::chrono::steady_clock;

// One store's figures at a checkpoint (medians over rounds / repeats).
struct Figures {
  bench::LookupStats lookup;
  double evict_rate = 0;     // pages/s by EvictTo
  double full_put_rate = 0;  // pages/s PUT into a full tier (last checkpoint only)
};

struct Row {
  uint32_t namespaces = 0;
  uint64_t pages = 0;
  double grow_rate = 0;                 // pages/s PUT while growing to this point
  double rss = 0, anon = 0, shmem = 0;  // bytes per indexed page
  Figures main, ref;                    // the store under test, the reference
};

uint64_t ParseCount(absl::string_view s) {
  double mult = 1;
  if (!s.empty() && (s.back() == 'k' || s.back() == 'K')) mult = 1e3;
  if (!s.empty() && (s.back() == 'm' || s.back() == 'M')) mult = 1e6;
  if (mult != 1) s.remove_suffix(1);
  double v = 0;
  if (!absl::SimpleAtod(s, &v) || v <= 0) {
    std::cerr << "kvtier-scale-bench: bad count '" << s << "'\n";
    std::exit(2);
  }
  return static_cast<uint64_t>(v * mult);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void Die(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::cerr << "kvtier-scale-bench: " << what << ": " << s << "\n";
  std::exit(1);
}

// The stores measured together: the store under test and, optionally, the
// reference. Each measurement alternates between them (in turns that swap
// who goes first), so a ratio of the two compares the same machine load.
struct Pair {
  bench::ScaleStore* main = nullptr;
  bench::ScaleStore* ref = nullptr;
  template <typename F>
  void Each(int round, Row& row, F&& f) const {
    if (ref != nullptr && round % 2 == 1) f(*ref, row.ref);
    f(*main, row.main);
    if (ref != nullptr && round % 2 == 0) f(*ref, row.ref);
  }
};

void MeasureLookups(const Pair& stores, std::mt19937_64& rng, Row& row) {
  std::vector<double> p50[2], p99[2], hit[2];
  for (int r = 0; r < absl::GetFlag(FLAGS_lookup_rounds); ++r) {
    stores.Each(r, row, [&](bench::ScaleStore& s, Figures& f) {
      const int i = &f == &row.main ? 0 : 1;
      const bench::LookupStats st = s.MeasureLookups(absl::GetFlag(FLAGS_lookups), rng);
      p50[i].push_back(st.p50_us);
      p99[i].push_back(st.p99_us);
      hit[i].push_back(st.hit_rate);
    });
  }
  row.main.lookup = {Median(p50[0]), Median(p99[0]), Median(hit[0])};
  row.ref.lookup = {Median(p50[1]), Median(p99[1]), Median(hit[1])};
}

void MeasureEvictions(const Pair& stores, Row& row) {
  const uint64_t pages = ParseCount(absl::GetFlag(FLAGS_evict_pages));
  std::vector<double> rates[2];
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    stores.Each(r, row, [&](bench::ScaleStore& s, Figures& f) {
      rates[&f == &row.main ? 0 : 1].push_back(s.MeasureEviction(pages));
      Die(s.PutChains(pages), "refilling after eviction");  // back to this size
    });
  }
  row.main.evict_rate = Median(rates[0]);
  row.ref.evict_rate = Median(rates[1]);
}

void MeasureFullPuts(const Pair& stores, Row& row) {
  const uint64_t pages = ParseCount(absl::GetFlag(FLAGS_evict_pages));
  std::vector<double> rates[2];
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    stores.Each(r, row, [&](bench::ScaleStore& s, Figures& f) {
      auto rate = s.MeasureFullPuts(pages);
      Die(rate.status(), "PUTs into the full tier");
      rates[&f == &row.main ? 0 : 1].push_back(*rate);
    });
  }
  row.main.full_put_rate = Median(rates[0]);
  row.ref.full_put_rate = Median(rates[1]);
}

void PrintRow(const Row& r) {
  std::printf(
      "%6u %10llu %10.0f %8.1f %8.1f %8.1f %9.2f %9.2f %6.3f %11.0f %11.0f | %9.2f %11.0f\n",
      r.namespaces, (unsigned long long)r.pages, r.grow_rate, r.rss, r.anon, r.shmem,
      r.main.lookup.p50_us, r.main.lookup.p99_us, r.main.lookup.hit_rate, r.main.evict_rate,
      r.main.full_put_rate, r.ref.lookup.p50_us, r.ref.evict_rate);
  std::fflush(stdout);
}

void AppendCsv(const std::string& path, const std::string& label, const Row& r) {
  if (path.empty()) return;
  const bool fresh = !std::filesystem::exists(path);
  std::ofstream out(path, std::ios::app);
  if (fresh) {
    out << "label,namespaces,pages,grow_pages_per_s,rss_bytes_per_page,anon_bytes_per_page,"
           "shmem_bytes_per_page,lookup_p50_us,lookup_p99_us,lookup_hit_rate,"
           "evict_pages_per_s,full_put_pages_per_s,ref_namespaces,ref_pages,ref_lookup_p50_us,"
           "ref_lookup_p99_us,ref_evict_pages_per_s,ref_full_put_pages_per_s\n";
  }
  const bool ref = absl::GetFlag(FLAGS_ref_namespaces) != 0;
  out << label << ',' << r.namespaces << ',' << r.pages << ',' << r.grow_rate << ',' << r.rss << ','
      << r.anon << ',' << r.shmem << ',' << r.main.lookup.p50_us << ',' << r.main.lookup.p99_us
      << ',' << r.main.lookup.hit_rate << ',' << r.main.evict_rate << ',' << r.main.full_put_rate
      << ',' << absl::GetFlag(FLAGS_ref_namespaces) << ','
      << (ref ? ParseCount(absl::GetFlag(FLAGS_ref_pages)) : 0) << ',' << r.ref.lookup.p50_us << ','
      << r.ref.lookup.p99_us << ',' << r.ref.evict_rate << ',' << r.ref.full_put_rate << '\n';
}

std::vector<uint64_t> Checkpoints() {
  std::vector<uint64_t> out;
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_pages), ',', absl::SkipEmpty())) {
    out.push_back(ParseCount(p));
  }
  if (out.empty() || !std::is_sorted(out.begin(), out.end())) {
    std::cerr << "kvtier-scale-bench: --pages must be ascending counts\n";
    std::exit(2);
  }
  return out;
}

bench::ScaleConfig ConfigFor(uint32_t namespaces, uint64_t capacity_pages, uint64_t seed) {
  bench::ScaleConfig c;
  c.namespaces = namespaces;
  c.chain_pages = absl::GetFlag(FLAGS_chain_pages);
  c.page_bytes = absl::GetFlag(FLAGS_page_bytes);
  c.zipf_s = absl::GetFlag(FLAGS_zipf);
  c.index_shards = absl::GetFlag(FLAGS_shards);
  c.seed = seed;
  c.capacity_pages = capacity_pages;
  auto policy = kvtier::tiers::ParseEvictionPolicy(absl::GetFlag(FLAGS_eviction));
  if (!policy.ok()) {
    std::cerr << "kvtier-scale-bench: --eviction: " << policy.status().message() << "\n";
    std::exit(2);
  }
  c.eviction = *policy;
  return c;
}

// The reference store, grown to its size before anything is measured.
std::unique_ptr<bench::ScaleStore> MakeReference() {
  const uint32_t n = absl::GetFlag(FLAGS_ref_namespaces);
  if (n == 0) return nullptr;
  const uint64_t pages = ParseCount(absl::GetFlag(FLAGS_ref_pages));
  auto ref = bench::ScaleStore::Create(ConfigFor(n, pages, absl::GetFlag(FLAGS_seed) + 1000));
  Die(ref.status(), "creating the reference store");
  Die((*ref)->GrowTo(pages), "growing the reference store");
  return *std::move(ref);
}

// The memory floor at both stores' index footprints (memory_floor.h), in
// alternation, beside the LOOKUP p50 ratio of the same run.
void PrintMemoryFloor(const Row& row, std::mt19937_64& rng) {
  const uint64_t ref_pages = ParseCount(absl::GetFlag(FLAGS_ref_pages));
  const uint64_t bytes[2] = {uint64_t(row.anon * double(row.pages)),
                             uint64_t(row.anon * double(ref_pages))};
  bench::MemoryFloor main(bytes[0], 1), ref(bytes[1], 2);
  std::vector<double> p50[2];
  const uint32_t keys = absl::GetFlag(FLAGS_chain_pages), ops = absl::GetFlag(FLAGS_lookups);
  for (int r = 0; r < absl::GetFlag(FLAGS_lookup_rounds); ++r) {
    if (r % 2 == 1) p50[1].push_back(ref.MeasureP50Us(keys, ops, rng));
    p50[0].push_back(main.MeasureP50Us(keys, ops, rng));
    if (r % 2 == 0) p50[1].push_back(ref.MeasureP50Us(keys, ops, rng));
  }
  const double m = Median(p50[0]), f = Median(p50[1]);
  const double lookup =
      row.ref.lookup.p50_us > 0 ? row.main.lookup.p50_us / row.ref.lookup.p50_us : 0;
  std::printf(
      "memory floor (%u keys an op: a random line, then the line it names): %.0f MiB p50 %.2f us, "
      "%.0f MiB %.2f us: ratio %.2f (difference %.2f us); LOOKUP p50 ratio %.2f (difference "
      "%.2f us)\n",
      keys, double(bytes[0]) / 1048576, m, double(bytes[1]) / 1048576, f, f > 0 ? m / f : 0, m - f,
      lookup, row.main.lookup.p50_us - row.ref.lookup.p50_us);
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "the store at scale: LOOKUP latency, eviction throughput and RSS per indexed page of a "
      "TierManager of small host pages as it grows through --pages checkpoints over "
      "--namespaces tenants with Zipf traffic, each figure measured in alternation with an "
      "optional reference store. scripts/bench_scale.sh runs the sweeps.\n"
      "  kvtier-scale-bench [--namespaces=1000] [--pages=1M,2M,5M,10M] [--ref_namespaces=1] "
      "[--csv=out.csv]");
  if (!absl::GetFlag(FLAGS_mutex_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  const std::vector<uint64_t> points = Checkpoints();
  const uint32_t namespaces = absl::GetFlag(FLAGS_namespaces);
  std::unique_ptr<bench::ScaleStore> ref = MakeReference();
  const bench::ProcMemory base0 = bench::ReadProcMemory();
  auto store =
      bench::ScaleStore::Create(ConfigFor(namespaces, points.back(), absl::GetFlag(FLAGS_seed)));
  Die(store.status(), "creating the store");
  const bench::ProcMemory base = bench::ReadProcMemory();
  std::printf(
      "kvtier-scale-bench: %u namespaces, %u-page chains of %u B pages, %u shards "
      "(store created: RSS %+.1f MiB); reference: %u namespaces\n",
      namespaces, absl::GetFlag(FLAGS_chain_pages), absl::GetFlag(FLAGS_page_bytes),
      absl::GetFlag(FLAGS_shards), (double(base.rss) - double(base0.rss)) / 1048576,
      absl::GetFlag(FLAGS_ref_namespaces));
  std::printf("%6s %10s %10s %8s %8s %8s %9s %9s %6s %11s %11s | %9s %11s\n", "ns", "pages",
              "grow/s", "rss B/p", "anon B/p", "shm B/p", "lkp p50us", "lkp p99us", "hit",
              "evict/s", "fullput/s", "ref p50us", "ref evict/s");
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed) * 7919);
  const Pair stores{store->get(), ref.get()};
  for (size_t i = 0; i < points.size(); ++i) {
    Row row;
    row.namespaces = namespaces;
    const uint64_t before = (*store)->IndexPages();
    const auto t0 = Clock::now();
    Die((*store)->GrowTo(points[i]), "growing the index");
    const double grow_s = std::chrono::duration<double>(Clock::now() - t0).count();
    row.pages = (*store)->IndexPages();
    row.grow_rate = grow_s > 0 ? double(row.pages - before) / grow_s : 0;
    const bench::ProcMemory now = bench::ReadProcMemory();
    row.rss = (double(now.rss) - double(base.rss)) / double(row.pages);
    row.anon = (double(now.anon) - double(base.anon)) / double(row.pages);
    row.shmem = (double(now.shmem) - double(base.shmem)) / double(row.pages);
    MeasureLookups(stores, rng, row);
    const bool last = i + 1 == points.size();
    if (last || absl::GetFlag(FLAGS_evict_every_point)) MeasureEvictions(stores, row);
    if (last) MeasureFullPuts(stores, row);
    PrintRow(row);
    AppendCsv(absl::GetFlag(FLAGS_csv), absl::GetFlag(FLAGS_label), row);
    if (last && ref != nullptr && absl::GetFlag(FLAGS_memory_floor)) PrintMemoryFloor(row, rng);
  }
  return 0;
}
