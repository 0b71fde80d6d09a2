// The data path of GET and PUT between the store and client memory: what a
// decoded, checked request does, with no sockets in it (unit-tested alone in
// tests/unit/data_path_test.cc). A transfer is planned on the frontend (pins
// or reservations; never disk I/O), its parts run on copy workers (reads,
// verification, copies, fills), and the worker that runs the last part
// finishes it (commit) into what the reply says. daemon/transfers.cc wires
// it to the copy engine and the sockets.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "daemon/client_buffer.h"
#include "daemon/copy_engine.h"
#include "daemon/get_timer.h"
#include "daemon/page_placement.h"
#include "kvtier.pb.h"
#include "kvtier/page_key.h"
#include "prefetch/prefetcher.h"
#include "tiers/hbm/hbm_tier.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::daemon {

// A GET from request to reply, whichever way it goes: into a registered shm
// or device buffer (PlanGet, CopyGet, FinishGet), with a policy or layer by
// layer (daemon/prefetch_handlers.cc), or inline as reply frames
// (daemon/handlers.cc). The frontend plans it (pins; never disk I/O), copy
// workers fill it, and the worker that finishes the last part replies from
// it. One type, so the buffer, placement, pins, tiers, fault and error of a
// GET are checked and released the same way on every path.
struct GetJob {
  // The request.
  uint64_t request_id = 0;
  std::string routing_id;
  tiers::NamespaceId ns = 0;
  std::vector<PageKey> keys;
  uint64_t page_bytes = 0;
  // Where the pages go: a registered buffer at `place`; null for an inline
  // GET, whose pages leave as the reply's frames.
  std::shared_ptr<ClientBuffer> buffer;
  PagePlacement place;
  // Policy GETs (best_effort, timeout, waiting for promotions in flight).
  wire::GetPolicy policy = wire::GET_WAIT_COMPLETE;
  uint32_t prefetch_waits = 0;
  // Layer-wise delivery: each copy part delivers every layer of its pages;
  // the counter at progress_offset in the buffer moves to l+1 once every
  // part has delivered l.
  bool layerwise = false;
  uint64_t layer_bytes = 0, progress_offset = 0;
  uint32_t layers = 0, parts = 1;
  absl::Mutex progress_mu;
  std::vector<uint32_t> parts_done ABSL_GUARDED_BY(progress_mu);  // per layer
  uint32_t published ABSL_GUARDED_BY(progress_mu) = 0;           // the counter's value
  // Filled as the GET runs.
  std::vector<tiers::PagePin> pins;          // invalid where the key missed
  std::string tiers;                         // the reply: each key's tier, 0 for a miss
  std::vector<const uint8_t*> src;           // inline: the readable bytes of each hit
  std::vector<std::vector<uint8_t>> bounce;  // inline: copies of pages read from disk
  std::atomic<bool> fault{false};            // the buffer could not be touched (SIGBUS)
  FirstError error;
  std::shared_ptr<GetTimer> timer = std::make_shared<GetTimer>();
  void Fail(absl::Status st) { error.Set(std::move(st)); }
};

// A PUT from a registered buffer or from inline pages.
struct PutTransfer {
  std::shared_ptr<ClientBuffer> buffer;  // null: `pages` holds the bytes
  PagePlacement place;                   // where each key's page is in `buffer`
  std::vector<const uint8_t*> pages;     // per key, inline (owned by the caller)
  uint64_t page_bytes = 0;
  std::vector<tiers::Reservation> reservations;
  std::vector<size_t> key_index;  // key of each reservation
  uint32_t deduplicated = 0, not_stored = 0;
  std::string not_stored_reason;
  // Keys deduplicated against another PUT still storing them: counted as
  // deduplicated only once that PUT has (FinishPut's continuation).
  std::vector<std::shared_ptr<tiers::KeyInFlight>> in_flight;
  std::vector<size_t> in_flight_index;  // key of each in_flight entry
  // Per key, what became of it (wire::PutPageStatus); reserved keys are
  // settled by FinishPut.
  std::vector<uint8_t> status;
  std::atomic<bool> fault{false};
  FirstError error;
  // Key's bytes in one piece: inline, or a contiguous page of the buffer;
  // nullptr for a scattered page (FillPut gathers it).
  const uint8_t* Source(size_t key) const {
    return buffer ? place.Contiguous(*buffer, key) : pages[key];
  }
};

// What a finished PUT stored (PutReply).
struct PutSummary {
  uint32_t stored = 0, deduplicated = 0, not_stored = 0;
  std::string not_stored_reason;
  std::vector<uint8_t> page_status;  // per key, wire::PutPageStatus
  uint32_t leading_kept = 0;         // leading keys stored or deduplicated
};

class DataPath {
 public:
  // `hbm` (device buffers) and `prefetcher` (which yields to demand reads
  // and drops leases of pinned pages) may be null.
  DataPath(tiers::TierManager* store, tiers::HbmTier* hbm, prefetch::Prefetcher* prefetcher)
      : store_(store), hbm_(hbm), prefetcher_(prefetcher) {}

  // Frontend: pins every present page of `page_bytes` (a page of another
  // layout is a miss). The placement is checked by the caller.
  std::shared_ptr<GetJob> PlanGet(tiers::NamespaceId ns, absl::Span<const PageKey> keys,
                                       uint64_t page_bytes, std::shared_ptr<ClientBuffer> buffer,
                                       PagePlacement place) const;
  // Copy worker: pages [begin, end) into the buffer (reads and verifies
  // pages below RAM; a page that fails its checksum becomes a miss).
  void CopyGet(GetJob& t, size_t begin, size_t end) const;
  // After the last part: the error to reply with, if any. Releases the pins.
  absl::Status FinishGet(GetJob& t) const;

  // Frontend: reserves the chain's pages (dedup, in-flight claims, quota;
  // never disk I/O), stopping at the first page with no room. Exactly one of
  // `buffer` (+ placement) and `pages` is given. ResourceExhausted when
  // nothing at all could be stored or deduplicated.
  absl::StatusOr<std::shared_ptr<PutTransfer>> PlanPut(
      tiers::NamespaceId ns, absl::Span<const PageKey> keys, const PageKey& parent,
      uint64_t page_bytes, std::shared_ptr<ClientBuffer> buffer, PagePlacement place,
      std::vector<const uint8_t*> pages) const;
  // Copy worker: fills reservations [begin, end).
  void FillPut(PutTransfer& t, size_t begin, size_t end) const;
  // After the last part: commits (one sync for every durable copy), or
  // frees everything on a copy error, which it returns. The keys this PUT
  // was deduplicated against another PUT still in flight are settled by that
  // PUT, never waited for: when all are settled now, returns the summary;
  // else returns nullopt, and `later` gets the summary once the last of
  // those PUTs resolves, on the thread that resolves it, with no lock held
  // (it must only queue the reply). A key one of them gave up is not_stored,
  // never a dedup. So no copy worker waits on another job, in any order.
  using LaterPut = std::function<void(PutSummary)>;
  std::optional<absl::StatusOr<PutSummary>> FinishPut(const std::shared_ptr<PutTransfer>& t,
                                                      LaterPut later) const;

 private:
  tiers::TierManager* store_;
  tiers::HbmTier* hbm_;
  prefetch::Prefetcher* prefetcher_;
};

// The ways the daemon reads pinned pages for a GET, on copy workers, with
// the prefetcher as the demand hook (prefetch yields to the read). DataLoss:
// a miss (the pin is reset).
// A range of pages (shm and GPU buffers, policy and inline GETs), every read below
// RAM in flight at once: tiers::TierManager::ReadPages, whose `on_page` gets
// each page's bytes (valid during the call) as soon as they are readable.
void ReadPagesForGet(tiers::TierManager& store, prefetch::Prefetcher* pf,
                     absl::Span<tiers::PagePin> pins, tiers::PageReadFn on_page,
                     int promote_to = -1);
// A layer-wise GET: tiers::TierManager::ReadLayers, whose sink gets each
// layer of each page once verified, layer 0 of every page first.
tiers::LayerReadStats ReadLayersForGet(tiers::TierManager& store, prefetch::Prefetcher* pf,
                                       absl::Span<tiers::PagePin> pins, uint64_t layer_bytes,
                                       uint32_t layers, tiers::LayerSink& sink,
                                       int promote_to = -1);

}  // namespace kvtier::daemon
