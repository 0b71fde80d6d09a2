// TierManager: construction (the store's parts wired together: store_impl.h),
// namespaces, and the metadata paths (GET pin, DELETE, STATS). LOOKUP is in
// lookup.cc, the PUT path in put_reservations.cc, eviction and demotion in
// eviction.cc, entry bookkeeping in store_core.cc; docs/ARCHITECTURE.md has
// the whole map.
#include "tiers/store/tier_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tiers/store/internal/evictor.h"
#include "tiers/store/internal/page_move.h"
#include "tiers/store/internal/put_path.h"
#include "tiers/store/internal/read_checks.h"
#include "tiers/store/internal/slot_accounts.h"
#include "tiers/store/internal/store_core.h"
#include "tiers/store/internal/store_impl.h"

namespace kvtier::tiers {
namespace {

NamespaceSnapshot SnapshotNamespace(NamespaceId id, const NamespaceState& ns,
                                    const std::vector<std::unique_ptr<TierState>>& tiers) {
  NamespaceSnapshot s;
  s.id = id;
  s.name = ns.name;
  s.pages = ns.pages.load(std::memory_order_relaxed);
  s.lookup_hits = ns.lookup_hits.load(std::memory_order_relaxed);
  s.lookup_misses = ns.lookup_misses.load(std::memory_order_relaxed);
  s.get_hits = ns.get_hits.load(std::memory_order_relaxed);
  s.get_misses = ns.get_misses.load(std::memory_order_relaxed);
  s.puts = ns.puts.load(std::memory_order_relaxed);
  s.dedup_puts = ns.dedup_puts.load(std::memory_order_relaxed);
  s.quota_evictions = ns.quota_evictions.load(std::memory_order_relaxed);
  for (size_t t = 0; t < tiers.size(); ++t) {
    const TierKind kind = tiers[t]->tier->kind();
    const uint64_t bytes = ns.tier_bytes[t].load(std::memory_order_relaxed);
    s.bytes += bytes;
    s.tier_bytes[kind] += bytes;
    if (ns.quota[t] != 0) s.tier_quota_bytes[kind] = ns.quota[t];
    if (ns.reserve[t] != 0) s.tier_reserved_bytes[kind] = ns.reserve[t];
  }
  return s;
}

}  // namespace

absl::Status TierManagerConfig::Validate() const {
  if (!(low_watermark > 0 && low_watermark < high_watermark && high_watermark <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("watermarks need 0 < low (", low_watermark,
                                                   ") < high (", high_watermark, ") <= 1"));
  }
  if (index_shards == 0 || (index_shards & (index_shards - 1)) != 0 || index_shards > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("index_shards ", index_shards, " must be a power of two in [1, 4096]"));
  }
  if (eviction_batch == 0) return absl::InvalidArgumentError("eviction_batch must be > 0");
  if (!(clean_fraction >= 0 && clean_fraction < low_watermark)) {
    return absl::InvalidArgumentError(absl::StrCat("clean_fraction ", clean_fraction,
                                                   " must be in [0, low watermark)"));
  }
  if (leaf_scan_limit == 0) return absl::InvalidArgumentError("leaf_scan_limit must be > 0");
  if (!(max_reserved_fraction >= 0 && max_reserved_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_reserved_fraction ", max_reserved_fraction, " must be in [0, 1]"));
  }
  return absl::OkStatus();
}

TierManager::Impl::Impl(const TierManagerConfig& c, std::vector<std::unique_ptr<Tier>> t)
    : core(c, std::move(t)),
      checks(std::make_unique<ReadChecks>(core)),
      slots(std::make_unique<SlotAccounts>(core)),
      mover(std::make_unique<PageMover>(core, *slots, *checks)),
      evictor(std::make_unique<Evictor>(core, *slots, *mover, *checks)),
      puts(std::make_unique<PutPath>(core, *slots, *evictor)) {
  slots->SetRoomMaker(evictor.get());
}

TierManager::Impl::~Impl() {
  evictor->Stop();
  slots->DrainPendingUnpersist();
  // Pins and reservations are gone by contract; what is left is indexed.
  for (uint32_t i = 0; i < core.index.num_shards(); ++i) {
    IndexShard& shard = core.index.shard(i);
    absl::MutexLock lock(&shard.mu);
    for (PageEntry* e : shard.DrainLocked()) {
      core.tiers[e->tier]->tier->Free(e->slot);
      core.entries.Delete(e);
    }
  }
}

absl::StatusOr<std::unique_ptr<TierManager>> TierManager::Create(
    const TierManagerConfig& config, std::vector<std::unique_ptr<Tier>> tiers,
    SharedCache* shared) {
  if (auto s = config.Validate(); !s.ok()) return s;
  if (tiers.empty() || tiers.size() > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("TierManager needs 1 to 8 tiers, got ", tiers.size()));
  }
  for (const auto& t : tiers) {
    if (t == nullptr) return absl::InvalidArgumentError("null tier");
  }
  for (const auto& named : config.eviction) {
    const TierKind kind = named.first;  // (clang: no lambda capture of a structured binding)
    if (std::none_of(tiers.begin(), tiers.end(), [&](const auto& t) { return t->kind() == kind; })) {
      return absl::InvalidArgumentError(absl::StrCat("eviction policy ",
                                                     EvictionPolicyName(named.second), " for tier ",
                                                     std::string(TierName(kind)),
                                                     ", which the store does not have"));
    }
  }
  auto impl = std::make_unique<Impl>(config, std::move(tiers));
  impl->core.shared = shared;  // before the evictor, which publishes to it
  if (config.start_evictor_thread) impl->evictor->Start();
  return std::unique_ptr<TierManager>(new TierManager(std::move(impl)));
}

TierManager::TierManager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TierManager::~TierManager() = default;

const TierManagerConfig& TierManager::config() const { return impl_->core.config; }

absl::StatusOr<NamespaceId> TierManager::AddNamespace(const NamespaceConfig& config) {
  if (config.name.empty()) return absl::InvalidArgumentError("namespace name is empty");
  absl::MutexLock lock(&impl_->core.ns_mu);
  if (auto it = impl_->core.ns_by_name.find(config.name); it != impl_->core.ns_by_name.end()) {
    return it->second;
  }
  const NamespaceId id = static_cast<NamespaceId>(impl_->core.ns_owned.size() + 1);  // 0 = none
  if (id >= StoreCore::kMaxNamespaces) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many namespaces (max ", StoreCore::kMaxNamespaces - 1, ")"));
  }
  auto ns = std::make_unique<NamespaceState>(config.name, impl_->core.tiers.size());
  for (size_t t = 0; t < impl_->core.tiers.size(); ++t) {
    const TierKind kind = impl_->core.tiers[t]->tier->kind();
    if (auto q = config.quota_bytes.find(kind); q != config.quota_bytes.end()) {
      ns->quota[t] = q->second;
    }
    if (auto r = config.reserved_bytes.find(kind); r != config.reserved_bytes.end()) {
      ns->reserve[t] = r->second;
    }
  }
  if (auto s = ValidateReserves(impl_->core, config, *ns); !s.ok()) return s;
  // Before the namespace is visible, so it has reserves before it has pages
  // (and its pages there are indexed outside the tier list: page_index.h).
  for (size_t t = 0; t < impl_->core.tiers.size(); ++t) {
    if (ns->reserve[t] == 0) continue;
    impl_->core.index.MarkReserved(static_cast<uint8_t>(t), id);
    impl_->core.tiers[t]->has_reserves.store(true);
  }
  impl_->core.ns_table[id].store(ns.get(), std::memory_order_release);
  impl_->core.ns_owned.push_back(std::move(ns));
  impl_->core.ns_by_name[config.name] = id;
  return id;
}

absl::StatusOr<NamespaceId> TierManager::FindNamespace(std::string_view name) const {
  absl::MutexLock lock(&impl_->core.ns_mu);
  auto it = impl_->core.ns_by_name.find(std::string(name));
  if (it == impl_->core.ns_by_name.end()) {
    return absl::NotFoundError(absl::StrCat("no namespace '", std::string(name), "'"));
  }
  return it->second;
}

std::optional<PagePin> TierManager::PinForRead(NamespaceId ns, const PageKey& key) {
  NamespaceState* state = impl_->core.Ns(ns);
  if (state == nullptr) return std::nullopt;
  IndexShard& shard = impl_->core.index.ShardFor(ns, key);
  PageEntry* e = nullptr;
  size_t found_tier = 0;
  {
    absl::MutexLock lock(&shard.mu);
    e = shard.FindLocked(ns, key);
    if (e != nullptr) {
      impl_->core.PinLocked(e);
      e->flags |= PageEntry::kReused;
      shard.TouchLocked(e, impl_->core.NextStamp(), /*reused=*/true);
      found_tier = e->tier;
    }
  }
  // Every tier above the one that served it (all of them on a miss) missed.
  const size_t missed = e == nullptr ? impl_->core.tiers.size() : found_tier;
  for (size_t t = 0; t < missed; ++t) impl_->core.tiers[t]->misses.fetch_add(1);
  if (e == nullptr) {
    state->get_misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  impl_->core.tiers[found_tier]->hits.fetch_add(1, std::memory_order_relaxed);
  state->get_hits.fetch_add(1, std::memory_order_relaxed);
  return PagePin(this, e);
}

bool TierManager::Delete(NamespaceId ns, const PageKey& key) {
  if (impl_->core.Ns(ns) == nullptr) return false;
  IndexShard& shard = impl_->core.index.ShardFor(ns, key);
  PageEntry* e;
  bool free_now, counted;
  PageKey parent;
  {
    absl::MutexLock lock(&shard.mu);
    e = shard.FindLocked(ns, key);
    if (e == nullptr) return false;
    impl_->core.DetachEntryLocked(shard, e);
    free_now = e->pins == 0;
    // Once unlocked, a pinned entry may be freed by its last unpin.
    counted = e->flags & PageEntry::kCountedInParent;
    parent = e->parent;
  }
  if (counted) impl_->core.DetachFromParent(ns, parent);
  if (free_now) impl_->slots->FreeEntry(e);
  return true;
}

size_t TierManager::EvictTo(size_t tier_index, uint64_t target_bytes) {
  if (tier_index >= impl_->core.tiers.size()) return 0;
  return impl_->evictor->EvictTo(tier_index, target_bytes);
}

size_t TierManager::Clean(size_t tier_index) {
  if (tier_index >= impl_->core.tiers.size()) return 0;
  size_t total = 0;
  for (;;) {
    const size_t n =
        impl_->evictor->CleanTier(tier_index, 0, impl_->core.tiers[tier_index]->clean_bytes);
    total += n;
    if (n == 0) return total;
  }
}

uint64_t TierManager::MaxPageBytes() const {
  uint64_t best = 0;
  for (const auto& t : impl_->core.tiers) {
    best = std::max(best, std::min<uint64_t>(t->tier->max_slot_bytes(), UINT32_MAX));
  }
  return best;
}

StoreSnapshot TierManager::Snapshot() const {
  StoreSnapshot snap;
  for (size_t i = 0; i < impl_->core.tiers.size(); ++i) {
    const auto& t = impl_->core.tiers[i];
    TierSnapshot ts;
    auto policy = impl_->core.config.eviction.find(t->tier->kind());
    ts.eviction =
        policy == impl_->core.config.eviction.end() ? EvictionPolicy::kLru : policy->second;
    if (ts.eviction != EvictionPolicy::kLru) {
      for (uint32_t s = 0; s < impl_->core.index.num_shards(); ++s) {
        IndexShard& shard = impl_->core.index.shard(s);
        absl::MutexLock lock(&shard.mu);
        ts.protected_pages += shard.ProtectedLocked(static_cast<uint8_t>(i));
        ts.ghost_entries += shard.GhostLocked(static_cast<uint8_t>(i));
      }
    }
    ts.kind = t->tier->kind();
    ts.backing = t->tier->backing();
    ts.capacity_bytes = t->tier->capacity_bytes();
    ts.used_bytes = t->tier->used_bytes();
    ts.pages = t->pages.load(std::memory_order_relaxed);
    ts.pinned_pages = t->pinned_pages.load(std::memory_order_relaxed);
    ts.hits = t->hits.load(std::memory_order_relaxed);
    ts.misses = t->misses.load(std::memory_order_relaxed);
    ts.evictions = t->evictions.load(std::memory_order_relaxed);
    ts.demotions = t->demotions.load(std::memory_order_relaxed);
    ts.promotions = t->promotions.load(std::memory_order_relaxed);
    ts.dropped = t->dropped.load(std::memory_order_relaxed);
    ts.admission_drops = t->admission_drops.load(std::memory_order_relaxed);
    ts.checksum_errors = t->checksum_errors.load(std::memory_order_relaxed);
    ts.clean_pages = t->clean_pages.load(std::memory_order_relaxed);
    ts.cleaned = t->cleaned.load(std::memory_order_relaxed);
    ts.durability_failures = t->durability_failures.load(std::memory_order_relaxed);
    const IoCounters c = t->tier->io_counters();
    ts.io = c;
    if (const DurableIndex* index = t->tier->durable()) ts.durable = index->durable_counters();
    ts.alloc_failures = t->tier->alloc_failures();
    ts.bytes_in = c.bytes_written + t->direct_in.load(std::memory_order_relaxed);
    ts.bytes_out = c.bytes_read + t->direct_out.load(std::memory_order_relaxed);
    snap.index_pages += ts.pages;
    snap.tiers.push_back(std::move(ts));
  }
  absl::MutexLock lock(&impl_->core.ns_mu);
  for (size_t i = 0; i < impl_->core.ns_owned.size(); ++i) {
    snap.namespaces.push_back(SnapshotNamespace(static_cast<NamespaceId>(i + 1),
                                                *impl_->core.ns_owned[i], impl_->core.tiers));
  }
  return snap;
}

}  // namespace kvtier::tiers
