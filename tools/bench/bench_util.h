// Shared pieces of kvtier-bench: options, timing, medians and percentiles,
// page-size layouts, synthetic key chains, and batched GET/PUT/DELETE helpers
// through a registered shm buffer. Every figure is a median over repeats.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvtier/client.h"
#include "kvtier/shm_buffer.h"
#include "nlohmann/json.hpp"

namespace kvtier::bench {

struct BenchOptions {
  std::string endpoint;         // daemon for throughput, lookup, redis
  std::string memory_endpoint;  // a fresh daemon for `memory` (default: endpoint)
  std::string tenant = "default";
  std::string token;
  int repeats = 7;
  uint64_t batch_bytes = 32ull << 20;        // bytes of pages per batched request
  uint64_t working_set_bytes = 256ull << 20;  // bytes moved per timed repeat
  std::vector<uint64_t> page_sizes;
  int lookup_chain = 64;
  int lookup_calls = 21000;
  int lookup_threads = 4;
  double lookup_seconds = 0.5;  // per repeat of the multi-thread run
  int batch_chains = 256;       // lookup_batch: chains per batched LOOKUP
  int batch_keys = 64;          // lookup_batch: keys per chain
  int batch_calls = 200;        // lookup_batch: batched LOOKUPs per repeat
  uint64_t memory_pages = 250000;
  int memory_chain = 64;
  std::string redis;  // host:port
};

using Clock = std::chrono::steady_clock;
inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Median and spread of repeated measurements.
struct Summary {
  double median = 0, min = 0, max = 0;
};
Summary Summarize(std::vector<double> v);
// p in [0, 100]; nearest-rank on a sorted copy.
double Percentile(std::vector<double> v, double p);
nlohmann::json ToJson(const Summary& s);

// A layout whose pages are exactly `page_bytes` ({1 layer, 1 head, 128 dim,
// page_bytes/512 tokens, fp16}); page_bytes must be a multiple of 512.
absl::StatusOr<Layout> LayoutForPageBytes(uint64_t page_bytes);
// `pages` keys of one prompt whose tokens are a function of `seed`, so
// distinct seeds give distinct keys (no dedup: the first two tokens are 64
// bits mixed from the seed) and equal seeds equal keys.
std::vector<PageKey> SyntheticChain(const Layout& layout, uint64_t seed, size_t pages);
// A per-process nonce mixed into seeds, so a rerun against a daemon that kept
// an earlier run's pages still stores fresh pages.
uint64_t RunNonce();
std::string HumanBytes(uint64_t bytes);
uint64_t ParseBytes(const std::string& s, bool* ok);

// One session with a page layout and a registered, pre-touched shm buffer of
// `buffer_bytes`; page i of a key list lives at offset i * page_bytes.
struct Rig {
  std::unique_ptr<Client> client;
  std::unique_ptr<ShmBuffer> shm;
  BufferId buffer = 0;
  Layout layout;
  uint64_t page_bytes = 0;
  std::vector<uint64_t> offsets;

  static absl::StatusOr<Rig> Create(const BenchOptions& o, const std::string& endpoint,
                                    uint64_t page_bytes, uint64_t buffer_bytes,
                                    const std::string& name);
  size_t pages() const { return offsets.size(); }
  uint8_t* page(size_t i) const { return shm->data() + offsets[i]; }
  // Writes each key's pattern into its slot (keys.size() <= pages()).
  void Fill(absl::Span<const PageKey> keys);
  // Number of slots whose bytes are not their key's pattern.
  size_t CountBad(absl::Span<const PageKey> keys) const;
  // All keys in requests of `batch` pages; fails on any miss.
  absl::Status GetAll(absl::Span<const PageKey> keys, size_t batch);
  // All keys as one chain, `batch` pages per request; fails unless every page
  // was really stored (a dedup would make the PUT a no-op).
  absl::Status PutAll(absl::Span<const PageKey> keys, size_t batch);
  absl::Status DeleteAll(absl::Span<const PageKey> keys);
};

// Sections of the report. Each prints human-readable lines as it goes and
// returns its figures; `kvtier` (may be null) is the throughput section the
// Redis comparison divides by.
absl::StatusOr<nlohmann::json> RunThroughput(const BenchOptions& o);
absl::StatusOr<nlohmann::json> RunLookup(const BenchOptions& o);
absl::StatusOr<nlohmann::json> RunLookupBatch(const BenchOptions& o);
absl::StatusOr<nlohmann::json> RunRedis(const BenchOptions& o, const nlohmann::json& kvtier);
absl::StatusOr<nlohmann::json> RunMemory(const BenchOptions& o);
absl::StatusOr<nlohmann::json> RunNvme(const BenchOptions& o);
absl::StatusOr<nlohmann::json> RunFill(const BenchOptions& o, uint64_t pages, uint64_t page_bytes);

}  // namespace kvtier::bench
