// DataPath: GET and PUT between the store and client memory; see
// data_path.h. Device buffers take the GPU path (device_transfers.cc).
#include "daemon/data_path.h"

#include <atomic>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/device_transfers.h"
#include "spdlog/spdlog.h"

namespace kvtier::daemon {
namespace {

absl::Status BufferFault(absl::string_view op, const ClientBuffer& b) {
  return absl::FailedPreconditionError(absl::StrCat(
      op, ": buffer '", b.name(), "' could not be accessed during the copy (was the shm object "
      "truncated after REGISTER_BUFFER?); nothing was stored"));
}

// tiers::DemandReadHook over the prefetcher: while a GET reads the disk,
// prefetch starts no new work.
class PrefetchDemandHook final : public tiers::DemandReadHook {
 public:
  explicit PrefetchDemandHook(prefetch::Prefetcher* p) : p_(p) {}
  void BeginDemandRead() override {
    if (p_ != nullptr) scope_.emplace(p_);
  }
  void EndDemandRead() override { scope_.reset(); }

 private:
  prefetch::Prefetcher* p_;
  std::optional<prefetch::Prefetcher::DemandScope> scope_;
};

}  // namespace

void ReadPagesForGet(tiers::TierManager& store, prefetch::Prefetcher* pf,
                     absl::Span<tiers::PagePin> pins, tiers::PageReadFn on_page, int promote_to) {
  PrefetchDemandHook hook(pf);
  store.ReadPages(pins, tiers::ReadOptions{.promote_to = promote_to, .demand = &hook}, on_page);
}

tiers::LayerReadStats ReadLayersForGet(tiers::TierManager& store, prefetch::Prefetcher* pf,
                                       absl::Span<tiers::PagePin> pins, uint64_t layer_bytes,
                                       uint32_t layers, tiers::LayerSink& sink, int promote_to) {
  PrefetchDemandHook hook(pf);
  return store.ReadLayers(pins, layer_bytes, layers,
                          tiers::ReadOptions{.promote_to = promote_to, .demand = &hook}, sink);
}

std::shared_ptr<GetJob> DataPath::PlanGet(tiers::NamespaceId ns, absl::Span<const PageKey> keys,
                                          uint64_t page_bytes,
                                          std::shared_ptr<ClientBuffer> buffer,
                                          PagePlacement place) const {
  auto t = std::make_shared<GetJob>();
  t->ns = ns;
  t->keys.assign(keys.begin(), keys.end());
  t->buffer = std::move(buffer);
  t->place = std::move(place);
  t->page_bytes = page_bytes;
  t->tiers.assign(keys.size(), '\0');
  t->pins.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::optional<tiers::PagePin> pin = store_->PinForRead(ns, keys[i]);
    if (!pin || pin->bytes() != page_bytes) continue;  // absent, or another layout's page
    t->tiers[i] = static_cast<char>(pin->tier());
    t->pins[i] = *std::move(pin);
  }
  // The pages are pinned now: leases taken for them are no longer needed.
  if (prefetcher_ != nullptr) prefetcher_->OnDemandRead(ns, keys);
  return t;
}

void DataPath::CopyGet(GetJob& t, size_t begin, size_t end) const {
  if (t.buffer->on_device()) {
    absl::Status st = DeviceGet(*store_, hbm_, prefetcher_, *t.buffer, absl::MakeSpan(t.pins),
                                t.place.offsets(), t.tiers, begin, end);
    if (!st.ok()) t.error.Set(st);
    return;
  }
  // Every NVMe read of the part is in flight at once; RAM pages are copied
  // meanwhile, and each read page as soon as it is verified.
  auto copy = [&](size_t k, absl::StatusOr<const uint8_t*> src) {
    const size_t i = begin + k;
    if (absl::IsDataLoss(src.status())) {
      t.tiers[i] = 0;  // corrupt on disk: a miss, never wrong bytes
      return;
    }
    if (!src.ok()) {
      t.error.Set(src.status());
      return;
    }
    if (absl::Status late = t.place.CheckDeadline("GET"); !late.ok()) {
      t.tiers[i] = 0;  // the client gave up: its memory is its own again
      t.error.Set(late);
      return;
    }
    if (!t.place.Write(*t.buffer, i, 0, *src, t.page_bytes)) t.fault = true;
  };
  ReadPagesForGet(*store_, prefetcher_, absl::MakeSpan(t.pins).subspan(begin, end - begin), copy);
}

absl::Status DataPath::FinishGet(GetJob& t) const {
  t.pins.clear();
  if (t.fault) return BufferFault("GET", *t.buffer);
  return t.error.Get();
}

absl::StatusOr<std::shared_ptr<PutTransfer>> DataPath::PlanPut(
    tiers::NamespaceId ns, absl::Span<const PageKey> keys, const PageKey& parent,
    uint64_t page_bytes, std::shared_ptr<ClientBuffer> buffer, PagePlacement place,
    std::vector<const uint8_t*> pages) const {
  auto t = std::make_shared<PutTransfer>();
  t->buffer = std::move(buffer);
  t->place = std::move(place);
  t->pages = std::move(pages);
  t->page_bytes = page_bytes;
  t->status.assign(keys.size(), wire::PUT_PAGE_NO_ROOM);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto r = store_->Reserve(ns, keys[i], i == 0 ? parent : keys[i - 1], page_bytes);
    if (!r.ok()) {
      if (!absl::IsResourceExhausted(r.status())) return r.status();
      // A chain is useless past a missing page: stop here (the rest stay
      // PUT_PAGE_NO_ROOM).
      t->not_stored = static_cast<uint32_t>(keys.size() - i);
      t->not_stored_reason = std::string(r.status().message());
      break;
    }
    if (r->outcome == tiers::PutOutcome::kDeduplicated) {
      ++t->deduplicated;
      t->status[i] = wire::PUT_PAGE_DEDUPLICATED;
      if (r->in_flight != nullptr) {
        t->in_flight.push_back(std::move(r->in_flight));
        t->in_flight_index.push_back(i);
      }
      continue;
    }
    t->reservations.push_back(std::move(r->reservation));
    t->key_index.push_back(i);
  }
  if (t->reservations.empty() && t->not_stored > 0 && t->deduplicated == 0)
    return absl::ResourceExhaustedError(absl::StrCat("PUT: ", t->not_stored_reason));
  return t;
}

void DataPath::FillPut(PutTransfer& t, size_t begin, size_t end) const {
  if (t.buffer && t.buffer->on_device()) {
    absl::Status st = DevicePut(hbm_, *t.buffer, absl::MakeSpan(t.reservations), t.key_index,
                                t.place.offsets(), begin, end);
    if (!st.ok()) t.error.Set(st);
    return;
  }
  for (size_t r = begin; r < end; ++r) {
    const size_t key = t.key_index[r];
    tiers::Reservation& res = t.reservations[r];
    absl::Status st = t.buffer ? t.place.CheckDeadline("PUT") : absl::OkStatus();
    if (!st.ok()) {  // nothing more is read; FinishPut stores nothing
      t.error.Set(st);
      return;
    }
    if (const uint8_t* src = t.Source(key)) {
      if (!GuardedRun([&] { st = res.Fill(src); })) t.fault = true;
    } else if (uint8_t* slot = res.data(); slot != nullptr && !res.NeedsHostBytes()) {
      // A scattered page into a RAM slot: gathered straight into it (one copy).
      if (!GuardedRun([&] { t.place.Gather(*t.buffer, key, slot, t.page_bytes); }))
        t.fault = true;
      else
        st = res.MarkFilled();
    } else {
      // A page that also needs its bytes whole (a checksum, a second copy):
      // gathered once into this worker's page, then filled from there.
      thread_local std::vector<uint8_t> page;
      page.resize(t.page_bytes);
      if (!GuardedRun([&] { t.place.Gather(*t.buffer, key, page.data(), t.page_bytes); }))
        t.fault = true;
      else
        st = res.Fill(page.data());
    }
    if (!st.ok()) t.error.Set(st);
  }
}

namespace {

// Counts down the other PUTs a finished PUT was deduplicated against; the
// last to resolve completes the summary. One count is the finishing PUT's
// own, so a handle resolved during registration cannot complete it early.
class DedupSettlement {
 public:
  DedupSettlement(PutSummary out, size_t handles, DataPath::LaterPut later)
      : out_(std::move(out)), left_(handles + 1), later_(std::move(later)) {}

  // A handle resolved; `key` is its index in the request.
  void Resolved(size_t key, bool stored) {
    if (!stored) {
      absl::MutexLock lock(&mu_);
      failed_.push_back(key);
    }
    if (Arrive()) later_(Summary());
  }
  // The finishing PUT's own count: true when every handle had resolved.
  bool Arrive() { return left_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

  // After the last arrival: the summary, the failed dedups counted as not
  // stored.
  PutSummary Summary() {
    absl::MutexLock lock(&mu_);
    for (size_t key : failed_) {
      --out_.deduplicated;
      ++out_.not_stored;
      out_.page_status[key] = wire::PUT_PAGE_OTHER_PUT_FAILED;
      out_.not_stored_reason =
          "another PUT of the page, in flight at the same time, did not store it";
    }
    CountLeadingKept(out_);
    return std::move(out_);
  }

  static void CountLeadingKept(PutSummary& out) {
    out.leading_kept = 0;
    while (out.leading_kept < out.page_status.size() &&
           out.page_status[out.leading_kept] <= wire::PUT_PAGE_DEDUPLICATED)
      ++out.leading_kept;
  }

 private:
  absl::Mutex mu_;
  PutSummary out_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> failed_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> left_;
  const DataPath::LaterPut later_;
};

}  // namespace

std::optional<absl::StatusOr<PutSummary>> DataPath::FinishPut(
    const std::shared_ptr<PutTransfer>& tp, LaterPut later) const {
  PutTransfer& t = *tp;
  if (absl::Status error = t.error.Get(); t.fault || !error.ok()) {
    t.reservations.clear();  // frees the slots: nothing half-written is published
    return t.fault ? BufferFault("PUT", *t.buffer) : error;
  }
  // One sync for every durable copy; see CommitAll for the order. A page
  // whose copy could not be made durable is not stored, and says so.
  const tiers::CommitResult commit = tiers::Reservation::CommitAll(t.reservations);
  PutSummary out{static_cast<uint32_t>(commit.stored), t.deduplicated, t.not_stored,
                 t.not_stored_reason};
  out.page_status = std::move(t.status);
  for (size_t r = 0; r < t.key_index.size(); ++r)
    out.page_status[t.key_index[r]] =
        r < commit.stored_each.size() && commit.stored_each[r] ? wire::PUT_PAGE_STORED
                                                                : wire::PUT_PAGE_NOT_DURABLE;
  if (commit.not_stored > 0) {
    spdlog::warn("PUT: {} page(s) not stored: {}", commit.not_stored, commit.error.ToString());
    out.not_stored += static_cast<uint32_t>(commit.not_stored);
    out.not_stored_reason = std::string(commit.error.message());
  }
  if (t.in_flight.empty()) {
    DedupSettlement::CountLeadingKept(out);
    return absl::StatusOr<PutSummary>(std::move(out));
  }
  auto settle =
      std::make_shared<DedupSettlement>(std::move(out), t.in_flight.size(), std::move(later));
  for (size_t f = 0; f < t.in_flight.size(); ++f)
    t.in_flight[f]->OnResolved(
        [settle, key = t.in_flight_index[f]](bool stored) { settle->Resolved(key, stored); });
  t.in_flight.clear();
  if (settle->Arrive()) return absl::StatusOr<PutSummary>(settle->Summary());
  return std::nullopt;  // the last of the other PUTs calls `later`
}

}  // namespace kvtier::daemon
