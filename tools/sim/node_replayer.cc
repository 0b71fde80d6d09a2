// NodeReplayer: one TierManager driven the way kvtierd's handlers drive it
// (daemon/handlers.cc, daemon/shared_handlers.cc, daemon/transfers.cc) for
// the sequence of calls kvtier-stress makes, single session, one request at
// a time.
#include "tools/sim/node_replayer.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"

namespace kvtier::sim {
namespace {

// The one namespace of the replay (kvtier-stress runs one session); the
// shared cache knows it by the same name, as kvtierd's tenants.
constexpr absl::string_view kNamespace = "sim";

// daemon/kvtierd.cc RemoteFromFlags.
void SetAdmission(RemoteAdmission a, tiers::TierManagerConfig& store) {
  using Admission = tiers::TierManagerConfig::Admission;
  switch (a) {
    case RemoteAdmission::kAll:
      store.shared_admission = Admission::kAll;
      break;
    case RemoteAdmission::kReused:
      store.shared_admission = Admission::kReusedOnly;
      break;
    case RemoteAdmission::kPut:
      store.shared_write_through = true;
      break;
  }
}

// What one request asked of the shared cache: the difference of its
// cluster-wide counters around the request (the replay is single-threaded
// and every call of the cache is answered before it returns).
RemoteCounters CommandsBetween(const tiers::SharedCacheCounters& a,
                               const tiers::SharedCacheCounters& b, bool write_through) {
  RemoteCounters c;
  c.reads = b.fetch_keys - a.fetch_keys;
  c.read_misses = b.fetch_misses - a.fetch_misses;
  c.writes = b.published - a.published;
  // With write-through evictions are not published: every record is a PUT's.
  c.write_through = write_through ? c.writes : 0;
  c.exists = b.lookup_keys - a.lookup_keys;
  c.deletes = b.forgotten - a.forgotten;
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeReplayer>> NodeReplayer::Create(
    const ReplayConfig& config, tiers::shared_cache::MemorySharedCache* cache) {
  if (config.remote && cache == nullptr)
    return absl::InvalidArgumentError("a shared cache is configured but none was given");
  std::unique_ptr<NodeReplayer> r(new NodeReplayer(config));
  std::vector<std::unique_ptr<tiers::Tier>> owned;
  RETURN_IF_ERROR(r->AddTiers(owned));
  tiers::TierManagerConfig store = config.store;
  store.start_evictor_thread = false;
  if (config.remote) {
    SetAdmission(config.remote->admission, store);
    r->cache_ = cache;
  }
  for (const auto& t : owned) {
    // Same arithmetic as TierManager::Impl's watermarks.
    const double cap = static_cast<double>(t->capacity_bytes());
    r->tiers_.push_back(TierView{t.get(), static_cast<uint64_t>(cap * store.high_watermark),
                                 static_cast<uint64_t>(cap * store.low_watermark)});
  }
  ASSIGN_OR_RETURN(r->mgr_, tiers::TierManager::Create(store, std::move(owned), r->cache_));
  ASSIGN_OR_RETURN(r->ns_,
                   r->mgr_->AddNamespace(tiers::NamespaceConfig{std::string(kNamespace), {}}));
  return r;
}

absl::Status NodeReplayer::AddTiers(std::vector<std::unique_ptr<tiers::Tier>>& owned) {
  ASSIGN_OR_RETURN(auto host, AccountingTier::Create(tiers::TierKind::kHost, config_.host));
  accounting_.push_back(host.get());
  owned.push_back(std::move(host));
  if (config_.nvme.has_value()) {
    ASSIGN_OR_RETURN(auto nvme, AccountingTier::Create(tiers::TierKind::kNvme, *config_.nvme));
    accounting_.push_back(nvme.get());
    owned.push_back(std::move(nvme));
  }
  return absl::OkStatus();
}

SimResult NodeReplayer::NewResult() const {
  SimResult out;
  auto p = config_.store.eviction.find(tiers::TierKind::kHost);
  out.policy = std::string(
      tiers::EvictionPolicyName(p == config_.store.eviction.end() ? tiers::EvictionPolicy::kLru
                                                                  : p->second));
  out.capacity_pages = config_.host.slots + (config_.nvme ? config_.nvme->slots : 0);
  out.tier_hits.push_back(TierHits{"host", 0});
  if (config_.nvme) out.tier_hits.push_back(TierHits{"nvme", 0});
  if (cache_ != nullptr) out.tier_hits.push_back(TierHits{"remote", 0});
  return out;
}

void NodeReplayer::DriveEvictor() {
  for (size_t t = 0; t < tiers_.size(); ++t) {
    if (tiers_[t].tier->used_bytes() > tiers_[t].high_bytes) mgr_->EvictTo(t, tiers_[t].low_bytes);
  }
}

tiers::LookupResult NodeReplayer::Lookup(absl::Span<const PageKey> keys) {
  tiers::LookupResult found = mgr_->Lookup(ns_, keys);
  if (cache_ == nullptr || found.hits == keys.size()) return found;
  // The rest of the chain may be pages another node (or this one, before
  // they left its store) published. Answered before Contains returns.
  uint32_t more = 0;
  cache_->Contains(kNamespace, std::vector<PageKey>(keys.begin() + found.hits, keys.end()),
                   [&more](std::vector<bool> present) {
                     while (more < present.size() && present[more]) ++more;
                   });
  found.tiers.insert(found.tiers.end(), more, tiers::TierKind::kRemote);
  found.hits += more;
  return found;
}

absl::Status NodeReplayer::FetchMissing(absl::Span<const PageKey> keys, SimResult& out) {
  if (cache_ == nullptr) return absl::OkStatus();
  // A probe (no recency, no counts): the GET itself counts its hits.
  std::vector<PageKey> missing;
  for (const PageKey& k : keys)
    if (mgr_->Locate(ns_, k) < 0) missing.push_back(k);
  if (missing.empty()) return absl::OkStatus();
  std::vector<tiers::FetchedPage> pages;
  cache_->Fetch(kNamespace, missing, kSimPageBytes,
                [&pages](std::vector<tiers::FetchedPage> got) { pages = std::move(got); });
  if (pages.size() != missing.size())
    return absl::InternalError("the shared cache did not answer a fetch at once");
  // Each fetched page becomes an ordinary PUT; one that finds no room is
  // simply not there (the GET misses it), as in the daemon.
  std::vector<tiers::Reservation> rs;
  for (size_t i = 0; i < pages.size(); ++i) {
    if (!pages[i].status.ok()) continue;
    absl::StatusOr<tiers::ReserveResult> r =
        mgr_->Reserve(ns_, missing[i], pages[i].parent, kSimPageBytes);
    if (!r.ok()) {
      if (!absl::IsResourceExhausted(r.status())) return r.status();
      continue;
    }
    MaybeEvictPerPage();
    if (r->outcome != tiers::PutOutcome::kReserved) continue;
    RETURN_IF_ERROR(r->reservation.FillFetched(pages[i].bytes.get()));
    rs.push_back(std::move(r->reservation));
  }
  if (!rs.empty()) out.remote.adopted += tiers::Reservation::CommitAll(rs).stored;
  return absl::OkStatus();
}

size_t NodeReplayer::ReadBatch(std::vector<tiers::PagePin>& pins) {
  // Each page below host memory is moved up to host before it is copied
  // out (daemon/transfers.cc SubmitGet, CopyGetRange); failing that, it is
  // read where it is, which an accounting tier never fails.
  for (tiers::PagePin& pin : pins) {
    if (pin.data() != nullptr) continue;
    mgr_->Promote(pin);
    MaybeEvictPerPage();
  }
  size_t served = 0;
  while (served < pins.size() && pins[served].valid()) ++served;
  return served;
}

absl::StatusOr<uint32_t> NodeReplayer::LookupAndGet(absl::Span<const PageKey> keys,
                                                    SimResult& out) {
  const tiers::LookupResult found = Lookup(keys);
  const size_t batch = config_.batch_pages == 0 ? keys.size() : config_.batch_pages;
  uint32_t got = 0;
  for (size_t b = 0; b < found.hits && got == b; b += batch) {
    // One GET: what is missing here fetched first, then every page pinned,
    // then read.
    const size_t n = std::min<size_t>(batch, found.hits - b);
    RETURN_IF_ERROR(FetchMissing(keys.subspan(b, n), out));
    std::vector<tiers::PagePin> pins;
    pins.reserve(n);
    for (size_t i = b; i < b + n; ++i) {
      std::optional<tiers::PagePin> pin = mgr_->PinForRead(ns_, keys[i]);
      if (!pin) break;  // evicted since the LOOKUP, or not fetched: a miss from here on
      pins.push_back(*std::move(pin));
    }
    got += static_cast<uint32_t>(ReadBatch(pins));
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

absl::StatusOr<size_t> NodeReplayer::PutBatch(absl::Span<const PageKey> keys,
                                              const PageKey& parent) {
  // daemon/transfers.cc SubmitPut: reserve the batch (stopping at the first
  // page that finds no room), fill (under admission put, Fill publishes the
  // page to the shared cache), then commit tail-first.
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

absl::Status NodeReplayer::Put(absl::Span<const PageKey> keys, const PageKey& parent,
                               SimResult& out) {
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

absl::Status NodeReplayer::Run(const SimRequest& r, SimResult& out) {
  std::vector<PageKey> keys;
  keys.reserve(r.pages.size());
  for (uint64_t id : r.pages) keys.push_back(KeyForPage(id));
  const tiers::SharedCacheCounters before =
      cache_ != nullptr ? cache_->counters() : tiers::SharedCacheCounters{};
  ASSIGN_OR_RETURN(const uint32_t hits, LookupAndGet(keys, out));
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
  if (cache_ != nullptr) {
    out.remote.Add(CommandsBetween(before, cache_->counters(),
                                   config_.remote->admission == RemoteAdmission::kPut));
  }
  return absl::OkStatus();
}

absl::Status NodeReplayer::Finish(SimResult& out) const {
  const tiers::StoreSnapshot snap = mgr_->Snapshot();
  for (const tiers::TierSnapshot& t : snap.tiers) {
    out.evictions += t.evictions;
    out.demotions += t.demotions;
    out.promotions += t.promotions;
    out.dropped += t.dropped;
  }
  for (const AccountingTier* t : accounting_) {
    if (t->bad_frees() != 0) {
      return absl::InternalError(absl::StrCat(std::string(tiers::TierName(t->kind())), " tier saw ",
                                              t->bad_frees(), " frees of unallocated slots"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier::sim
