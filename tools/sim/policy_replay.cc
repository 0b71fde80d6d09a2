// ReplayTierManager: one TierManager per run, driven the way kvtierd's
// handlers drive it (daemon/handlers.cc, daemon/transfers.cc) for the
// sequence of calls kvtier-stress makes, single session, one request at a
// time.
#include "tools/sim/policy_replay.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kvtier/status_macros.h"

namespace kvtier::sim {
namespace {

class Replayer {
 public:
  static absl::StatusOr<std::unique_ptr<Replayer>> Create(const ReplayConfig& config);
  absl::Status Run(const SimRequest& r, SimResult& out);
  absl::Status Finish(SimResult& out) const;

 private:
  explicit Replayer(const ReplayConfig& config) : config_(config), zero_(kSimPageBytes, 0) {}
  uint32_t LookupAndGet(absl::Span<const PageKey> keys, SimResult& out);
  // Returns how many pages at the batch's end the store could not take.
  absl::StatusOr<size_t> PutBatch(absl::Span<const PageKey> keys, const PageKey& parent);
  absl::Status Put(absl::Span<const PageKey> keys, const PageKey& parent, SimResult& out);
  // What the daemon's evictor thread does when kicked: each tier above its
  // high watermark is brought down to its low one, top tier first.
  void DriveEvictor();
  void MaybeEvictPerPage() {
    if (config_.evict_at == ReplayConfig::EvictAt::kPage) DriveEvictor();
  }

  const ReplayConfig config_;
  const std::vector<uint8_t> zero_;  // the bytes every PUT "writes"
  std::unique_ptr<tiers::TierManager> mgr_;
  tiers::NamespaceId ns_ = 0;
  struct TierView {
    const AccountingTier* tier;  // owned by mgr_
    uint64_t high_bytes, low_bytes;
  };
  std::vector<TierView> tiers_;
};

absl::StatusOr<std::unique_ptr<Replayer>> Replayer::Create(const ReplayConfig& config) {
  std::unique_ptr<Replayer> r(new Replayer(config));
  std::vector<std::unique_ptr<tiers::Tier>> owned;
  ASSIGN_OR_RETURN(auto host, AccountingTier::Create(tiers::TierKind::kHost, config.host));
  owned.push_back(std::move(host));
  if (config.nvme.has_value()) {
    ASSIGN_OR_RETURN(auto nvme, AccountingTier::Create(tiers::TierKind::kNvme, *config.nvme));
    owned.push_back(std::move(nvme));
  }
  tiers::TierManagerConfig store = config.store;
  store.start_evictor_thread = false;
  for (const auto& t : owned) {
    // Same arithmetic as TierManager::Impl's watermarks.
    const double cap = static_cast<double>(t->capacity_bytes());
    r->tiers_.push_back(TierView{static_cast<const AccountingTier*>(t.get()),
                                 static_cast<uint64_t>(cap * store.high_watermark),
                                 static_cast<uint64_t>(cap * store.low_watermark)});
  }
  ASSIGN_OR_RETURN(r->mgr_, tiers::TierManager::Create(store, std::move(owned)));
  ASSIGN_OR_RETURN(r->ns_, r->mgr_->AddNamespace(tiers::NamespaceConfig{"sim", {}}));
  return r;
}

void Replayer::DriveEvictor() {
  for (size_t t = 0; t < tiers_.size(); ++t) {
    if (tiers_[t].tier->used_bytes() > tiers_[t].high_bytes) mgr_->EvictTo(t, tiers_[t].low_bytes);
  }
}

uint32_t Replayer::LookupAndGet(absl::Span<const PageKey> keys, SimResult& out) {
  const tiers::LookupResult found = mgr_->Lookup(ns_, keys);
  const size_t batch = config_.batch_pages == 0 ? keys.size() : config_.batch_pages;
  uint32_t got = 0;
  for (size_t b = 0; b < found.hits && got == b; b += batch) {
    // One GET: every page pinned first, then each NVMe page moved up to host
    // before it is copied out (daemon/transfers.cc SubmitGet, CopyGetRange).
    const size_t n = std::min<size_t>(batch, found.hits - b);
    std::vector<tiers::PagePin> pins;
    pins.reserve(n);
    for (size_t i = b; i < b + n; ++i) {
      std::optional<tiers::PagePin> pin = mgr_->PinForRead(ns_, keys[i]);
      if (!pin) break;  // evicted since the LOOKUP: a miss from here on
      pins.push_back(*std::move(pin));
    }
    for (tiers::PagePin& pin : pins) {
      if (pin.data() == nullptr) {
        mgr_->Promote(pin);
        MaybeEvictPerPage();
      }
    }
    got += static_cast<uint32_t>(pins.size());
    pins.clear();
    DriveEvictor();
  }
  // Hits count by the tier LOOKUP named, as kvtier-stress counts them.
  for (uint32_t i = 0; i < got; ++i) {
    const std::string name(tiers::TierName(found.tiers[i]));
    for (TierHits& th : out.tier_hits) th.hits += th.tier == name ? 1 : 0;
  }
  return got;
}

absl::StatusOr<size_t> Replayer::PutBatch(absl::Span<const PageKey> keys, const PageKey& parent) {
  // daemon/transfers.cc SubmitPut: reserve the batch (stopping at the first
  // page that finds no room), fill, then commit tail-first.
  std::vector<tiers::Reservation> rs;
  size_t not_stored = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StatusOr<tiers::ReserveResult> r =
        mgr_->Reserve(ns_, keys[i], i == 0 ? parent : keys[i - 1], kSimPageBytes);
    if (!r.ok()) {
      if (!absl::IsResourceExhausted(r.status())) return r.status();
      not_stored = keys.size() - i;
      break;
    }
    MaybeEvictPerPage();
    if (r->outcome == tiers::PutOutcome::kDeduplicated) continue;
    RETURN_IF_ERROR(r->reservation.Fill(zero_.data()));
    rs.push_back(std::move(r->reservation));
  }
  const size_t reserved = rs.size();
  const size_t stored = tiers::Reservation::CommitAll(rs).stored;
  if (stored != reserved) {
    return absl::InternalError(absl::StrCat("single-threaded replay lost ", reserved - stored,
                                            " of ", reserved, " commits"));
  }
  DriveEvictor();
  return not_stored;
}

absl::Status Replayer::Put(absl::Span<const PageKey> keys, const PageKey& parent, SimResult& out) {
  // kvtier-stress PutChain: batches in order, each parented by the page
  // before it; a chain cut by a full store is not continued (a suffix
  // without its prefix is useless).
  const size_t batch = config_.batch_pages == 0 ? keys.size() : config_.batch_pages;
  for (size_t b = 0; b < keys.size(); b += batch) {
    const size_t n = std::min(batch, keys.size() - b);
    ASSIGN_OR_RETURN(size_t cut, PutBatch(keys.subspan(b, n), b == 0 ? parent : keys[b - 1]));
    if (cut > 0) {
      out.not_stored += cut + (keys.size() - b - n);
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status Replayer::Run(const SimRequest& r, SimResult& out) {
  std::vector<PageKey> keys;
  keys.reserve(r.pages.size());
  for (uint64_t id : r.pages) keys.push_back(KeyForPage(id));
  const uint32_t hits = LookupAndGet(keys, out);
  ++out.requests;
  out.refs += keys.size();
  out.hits += hits;
  if (hits < keys.size()) {
    const PageKey parent = hits == 0 ? PageKey::Zero() : keys[hits - 1];
    RETURN_IF_ERROR(Put(absl::MakeConstSpan(keys).subspan(hits), parent, out));
  }
  if (config_.decode && !r.decode.empty()) {
    std::vector<PageKey> decode;
    decode.reserve(r.decode.size());
    for (uint64_t id : r.decode) decode.push_back(KeyForPage(id));
    RETURN_IF_ERROR(Put(decode, keys.empty() ? PageKey::Zero() : keys.back(), out));
  }
  return absl::OkStatus();
}

absl::Status Replayer::Finish(SimResult& out) const {
  const tiers::StoreSnapshot snap = mgr_->Snapshot();
  for (const tiers::TierSnapshot& t : snap.tiers) {
    out.evictions += t.evictions;
    out.demotions += t.demotions;
    out.promotions += t.promotions;
    out.dropped += t.dropped;
  }
  for (const TierView& v : tiers_) {
    if (v.tier->bad_frees() != 0) {
      return absl::InternalError(absl::StrCat(std::string(tiers::TierName(v.tier->kind())),
                                              " tier saw ", v.tier->bad_frees(),
                                              " frees of unallocated slots"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SimResult> ReplayTierManager(absl::Span<const SimRequest> requests,
                                            const ReplayConfig& config) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(std::unique_ptr<Replayer> replayer, Replayer::Create(config));
  SimResult out;
  out.policy = "lru";
  out.capacity_pages = config.host.slots + (config.nvme ? config.nvme->slots : 0);
  out.tier_hits.push_back(TierHits{"host", 0});
  if (config.nvme) out.tier_hits.push_back(TierHits{"nvme", 0});
  for (const SimRequest& r : requests) RETURN_IF_ERROR(replayer->Run(r, out));
  RETURN_IF_ERROR(replayer->Finish(out));
  out.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return out;
}

}  // namespace kvtier::sim
