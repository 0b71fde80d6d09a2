// One kvtier-stress session: a kvtier::Client per endpoint (daemon), one shm
// buffer of `batch_pages` slots registered with each, replaying requests one
// at a time on the endpoint the replayer picks. Not thread-safe: each worker
// thread owns one Session.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvtier/client.h"
#include "kvtier/shm_buffer.h"
#include "tools/stress/stress_options.h"
#include "tools/stress/stress_stats.h"
#include "tools/trace/trace.h"

namespace kvtier::stress {

// What the sessions of a run share; all pointees outlive the sessions.
struct SessionContext {
  const StressOptions* options = nullptr;
  const trace::PageMapping* mapping = nullptr;
  uint32_t block_tokens = 512;
  uint64_t key_salt = 0;  // TraceSalt()
  Counters* counters = nullptr;             // the run's totals
  absl::Span<Counters> endpoint_counters;   // one per options->endpoints
  PutOwners* owners = nullptr;              // nullptr with one endpoint
  ErrorLog* errors = nullptr;
  std::atomic<bool>* stop = nullptr;  // set on a corrupt page under stop_on_error
};

class Session {
 public:
  static absl::StatusOr<std::unique_ptr<Session>> Create(const SessionContext& ctx,
                                                         const Layout& layout, int index);
  // LOOKUP, GET + verify, PUT misses, PUT decode pages, all on endpoint
  // `ep`. An error status means a call failed (the caller counts it);
  // corrupt pages are counted here.
  absl::Status Replay(const trace::Request& r, size_t ep);
  // PREFETCH hint, on endpoint `ep`, for a request that will be served
  // there soon (its whole chain; the daemon skips what is missing or
  // already in RAM).
  absl::Status Hint(const trace::Request& r, size_t ep);
  Latencies& latencies() { return lat_; }

 private:
  struct Endpoint {
    std::unique_ptr<Client> client;
    BufferId buffer = 0;
  };
  Session(const SessionContext& ctx) : ctx_(ctx) {}
  Client& client() { return *endpoints_[ep_].client; }
  CounterPair sink() const { return {ctx_.counters, &ctx_.endpoint_counters[ep_]}; }
  std::vector<PageKey> Keys(absl::Span<const uint64_t> page_ids) const;
  // LOOKUP in requests of at most kMaxKeys; stops at the first miss.
  absl::StatusOr<LookupResult> Lookup(absl::Span<const PageKey> keys);
  // GETs the first `hits` keys; returns how many leading pages were served.
  absl::StatusOr<uint32_t> GetAndVerify(const trace::Request& r, absl::Span<const PageKey> keys,
                                        uint32_t hits);
  void Verify(const trace::Request& r, const PageKey& key, size_t slot, TierKind tier);
  // Counts a hit by LOOKUP's tier (GET's may be higher: LOOKUP lookahead
  // promotes), and remote hits on pages another endpoint PUT.
  void CountHit(const PageKey& key, TierKind tier);
  // PUTs `keys` as a chain below `parent`; stops where the daemon cut it.
  absl::Status PutChain(absl::Span<const PageKey> keys, const PageKey& parent);

  SessionContext ctx_;
  std::vector<Endpoint> endpoints_;  // parallel to options->endpoints
  size_t ep_ = 0;                    // the endpoint of the request in progress
  std::unique_ptr<ShmBuffer> shm_;
  uint64_t page_bytes_ = 0;
  uint64_t layout_id_ = 0;
  std::vector<uint64_t> offsets_;      // slot i at i * page_bytes
  std::vector<PageKey> slot_key_;      // whose pattern slot i holds (zero: none)
  Latencies lat_;
};

}  // namespace kvtier::stress
