// The page-move primitive and the bookkeeping it owns: an entry changes tier
// in one place (SwitchTierLocked), gains or loses its durable copy in one
// place (Set/ClearBackupLocked), and a slot is given back in one place
// (ReleaseSlot: record first, then the slot, then the quota bytes). Demotion,
// promotion and cleaning are BeginMove → (PersistMoves) → FinishMove.
#define XXH_STATIC_LINKING_ONLY
#include "tiers/store/internal/page_move.h"

#include <xxhash.h>

#include <algorithm>
#include <vector>

#include "kvtier/test_hooks.h"
#include "tiers/common/io_guard.h"
#include "tiers/store/internal/read_checks.h"
#include "tiers/store/internal/slot_accounts.h"
#include "tiers/store/internal/store_core.h"

namespace kvtier::tiers {
namespace {

constexpr uint64_t kCopyChunk = 1 << 20;

}  // namespace

bool PageMover::CopyBetweenTiers(size_t from, const Slot &src, size_t to, const Slot &dst,
                                 uint64_t *sum) {
  Tier &a = *core_.tiers[from]->tier;
  Tier &b = *core_.tiers[to]->tier;
  const uint64_t n = src.bytes;
  // The side reached through Address() is counted here; Read/Write count
  // the other.
  if (const uint8_t* p = a.Address(src)) {
    if (sum != nullptr) *sum = XXH3_64bits(p, n);
    if (!b.Write(dst, 0, p, n).ok()) return false;
    core_.CountOut(from, n);
    return true;
  }
  if (uint8_t* q = b.Address(dst)) {
    if (!a.Read(src, 0, q, n).ok()) return false;
    core_.CountIn(to, n);
    if (sum != nullptr) *sum = XXH3_64bits(q, n);
    return true;
  }
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  std::vector<uint8_t> buf(std::min(n, kCopyChunk));
  for (uint64_t off = 0; off < n; off += buf.size()) {
    const uint64_t len = std::min<uint64_t>(buf.size(), n - off);
    if (!a.Read(src, off, buf.data(), len).ok() || !b.Write(dst, off, buf.data(), len).ok()) {
      return false;
    }
    XXH3_64bits_update(&state, buf.data(), len);
  }
  if (sum != nullptr) *sum = XXH3_64bits_digest(&state);
  return true;
}

PageMove PageMover::PrepareMove(PageEntry *e, size_t to, MoveKind kind, EvictMode mode) {
  PageMove m;
  m.kind = kind;
  m.mode = mode;
  m.e = e;
  m.shard = &core_.index.ShardFor(e->ns, e->key);
  // Pinned by us: slot and tier cannot change until we unpin.
  m.from = e->tier;
  m.to = to;
  m.old = e->slot;
  bool clean;
  Slot backup;
  {
    absl::MutexLock lock(&m.shard->mu);
    clean = e->clean();
    backup = e->backup;
  }
  if (kind == MoveKind::kDemote && clean && core_.IsBackupTier(to)) {
    m.dst = backup;  // the durable copy becomes the page: nothing to write
    m.copied = m.reuses_backup = true;
    return m;
  }
  m.dst = slots_.ChargeAndAllocate(e->ns, to, m.old.bytes, mode);
  return m;
}

void PageMover::CheckMovedBytes(PageMove &m, uint64_t sum) {
  if (!m.copied || !core_.tiers[m.from]->tier->persistent()) return;
  if (!checks_.VerifySum(m.e, m.from, sum).ok()) {  // dropped: a miss, never wrong bytes
    m.copied = false;
    m.corrupt = true;
  }
}

PageMove PageMover::BeginMove(PageEntry *e, size_t to, MoveKind kind, EvictMode mode) {
  PageMove m = PrepareMove(e, to, kind, mode);
  if (!m.dst.ok() || m.reuses_backup) return m;
  const bool from_disk = core_.tiers[m.from]->tier->persistent();
  const bool to_disk = core_.tiers[to]->tier->persistent();
  uint64_t sum = 0;
  m.copied = CopyBetweenTiers(m.from, m.old, to, *m.dst, from_disk || to_disk ? &sum : nullptr);
  CheckMovedBytes(m, sum);
  if (m.copied && to_disk) {
    m.checksum = sum;
    absl::MutexLock lock(&m.shard->mu);
    m.meta = core_.MetaOf(e);
    m.meta.checksum = sum;
    m.meta.create_only = true;
  }
  return m;
}

void PageMover::PersistMoves(std::vector<PageMove> &moves) {
  std::vector<Slot> slots;
  std::vector<PageMeta> metas;
  Tier* target = nullptr;
  for (const PageMove& m : moves) {
    if (!m.NeedsPersist() || !core_.tiers[m.to]->tier->persistent()) continue;
    target = core_.tiers[m.to]->tier.get();
    slots.push_back(*m.dst);
    metas.push_back(m.meta);
  }
  if (slots.empty()) return;
  std::vector<bool> written;
  const bool ok = target->durable()->PersistBatch(slots, metas, &written).ok();
  if (ok) KVTIER_KILL_POINT("demote.after_persist");
  size_t i = 0;
  for (PageMove& m : moves) {
    if (!m.NeedsPersist() || core_.tiers[m.to]->tier.get() != target) continue;
    // Not written: the batch failed, or a newer PUT of the key owns its
    // record (this page was deleted meanwhile). A copy that is not durable
    // is no copy.
    m.persisted = m.copied = ok && written[i];
    ++i;
  }
}

bool PageMover::MoveStillValidLocked(const PageMove &m) const {
  const PageEntry* e = m.e;
  const bool to_disk = core_.tiers[m.to]->tier->persistent();
  if (!m.copied || e->detached() || e->tier != m.from) return false;
  if (to_disk && !m.persisted && !m.reuses_backup) return false;
  // Cleaning leaves the page where it is; it only needs the page still dirty.
  if (m.kind == MoveKind::kClean) return !e->clean();
  // A demotion or promotion: the mover's pin is the only reader. A promotion
  // may also pass holds (leases), which keep the page but read no slot.
  const uint32_t others = m.kind == MoveKind::kPromote ? e->holds : 0;
  return e->pins - others == 1;
}

bool PageMover::FinishMove(PageMove &m) {
  // Tests stop here to race a DELETE, a reader or a PUT against the switch.
  KVTIER_SYNC_POINT_CALLBACK("move.before_switch", const_cast<PageKey*>(&m.e->key));
  m.shard->mu.Lock();
  m.detached = m.e->detached();
  if (!MoveStillValidLocked(m)) return UndoMoveAndUnlock(m);
  switch (m.kind) {
    case MoveKind::kDemote:
      CommitDemotionAndUnlock(m);
      break;
    case MoveKind::kPromote:
      CommitPromotionAndUnlock(m);
      break;
    case MoveKind::kClean:
      CommitCleanAndUnlock(m);
      break;
  }
  slots_.room().KickEvictorIfHigh(m.to);
  return true;
}

void PageMover::CommitDemotionAndUnlock(PageMove &m) {
  PageEntry* e = m.e;
  const NamespaceId ns = e->ns;
  core_.UnpinLocked(e);  // the mover's pin; no reader holds another (checked)
  // Onto its own durable copy the page is no longer "clean in RAM": the
  // copy became the page.
  core_.SwitchTierLocked(*m.shard, e, m.to, *m.dst,
                         /*keep_backup=*/!m.reuses_backup);
  if (m.checksum != 0) e->checksum = m.checksum;
  m.shard->mu.Unlock();
  slots_.ReleaseSlot(m.from, ns, m.old, PageMeta{});  // a RAM slot: no record to delete
  TierState &from = *core_.tiers[m.from];
  from.evictions.fetch_add(1, std::memory_order_relaxed);
  from.demotions.fetch_add(1, std::memory_order_relaxed);
}

void PageMover::CommitPromotionAndUnlock(PageMove &m) {
  PageEntry* e = m.e;
  const NamespaceId ns = e->ns;
  // Inclusive NVMe: a page promoted from the backup tier keeps its copy
  // there, clean, so it survives a restart and its next demotion writes
  // nothing. The caller's pin moves with the page.
  const bool keep_source = core_.IsBackupTier(m.from);
  core_.SwitchTierLocked(*m.shard, e, m.to, *m.dst, /*keep_backup=*/true);
  if (keep_source) core_.SetBackupLocked(*m.shard, e, m.old);
  m.shard->mu.Unlock();
  if (!keep_source) slots_.ReleaseSlot(m.from, ns, m.old, PageMeta{});
  core_.tiers[m.to]->promotions.fetch_add(1, std::memory_order_relaxed);
}

void PageMover::CommitCleanAndUnlock(PageMove &m) {
  PageEntry* e = m.e;
  core_.SetBackupLocked(*m.shard, e,
                        *m.dst);  // the page stays; the copy is its backup
  e->checksum = m.checksum;
  core_.UnpinLocked(e);
  m.shard->mu.Unlock();
  core_.tiers[m.from]->cleaned.fetch_add(1, std::memory_order_relaxed);
}

bool PageMover::UndoMoveAndUnlock(PageMove &m) {
  PageEntry* e = m.e;
  const NamespaceId ns = e->ns;
  // A promotion's pin is the caller's; demotion and cleaning drop their own.
  const bool free_entry = m.kind != MoveKind::kPromote && core_.UnpinLocked(e);
  const bool give_up_page = m.kind == MoveKind::kDemote && !m.detached && e->pins == 0 &&
                            m.mode == EvictMode::kMayWrite;
  if (give_up_page) {
    // The lower tier cannot take it even with writes (full, or the write
    // failed): it leaves the store, so RAM keeps taking new pages. The
    // request path (kCleanOnly) never gives a page up this way.
    DropAndUnlock(*m.shard, e, m.from);
  } else {
    m.shard->mu.Unlock();
    if (free_entry) slots_.FreeEntry(e);
  }
  // The target slot goes back (with its record, if one was written); a
  // reused backup stays the page's.
  if (m.dst.ok() && !m.reuses_backup) {
    if (m.persisted) {
      slots_.ReleaseSlot(m.to, ns, *m.dst, m.meta);
    } else {
      slots_.FreeSlot(m.to, ns, *m.dst);
    }
  }
  // A demoted page that was deleted meanwhile has left the tier anyway.
  return m.kind == MoveKind::kDemote && (m.detached || give_up_page);
}

size_t PageMover::DropAndUnlock(IndexShard &shard, PageEntry *e, size_t t) {
  shard.RememberEvictedLocked(e);
  core_.DetachEntryLocked(shard, e);
  const bool free_now = e->pins == 0;
  const bool counted = e->flags & PageEntry::kCountedInParent;
  const NamespaceId ns = e->ns;
  const PageKey parent = e->parent;
  shard.mu.Unlock();
  core_.tiers[t]->evictions.fetch_add(1, std::memory_order_relaxed);
  core_.tiers[t]->dropped.fetch_add(1, std::memory_order_relaxed);
  if (counted) core_.DetachFromParent(ns, parent);
  if (free_now) slots_.FreeEntry(e);
  return 1;
}

}  // namespace kvtier::tiers
