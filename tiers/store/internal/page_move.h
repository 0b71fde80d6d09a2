// The page-move primitive (page_move.cc, promotion.cc): what kind of move,
// the state one move carries from BeginMove (charge, allocate, copy, check)
// through PersistMoves (one sync for a batch) to FinishMove (one commit per
// kind, or the undo), and the PageMover that runs them — demotion, promotion
// and cleaning alike, and a page leaving the store. Internal to tiers/store/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "tiers/store/internal/page_index.h"
#include "tiers/store/internal/store_core.h"
#include "tiers/store/tier_manager.h"
#include "tiers/tier.h"

namespace kvtier::tiers {

enum class MoveKind : uint8_t {
  kDemote,   // e leaves `from` for `to` below (a clean page reuses its backup)
  kPromote,  // e leaves `from` for `to` above; a persistent source stays as its backup
  kClean,    // e stays; the copy in the last tier becomes its backup
};

// One move in flight. The mover holds a pin on `e` throughout.
struct PageMove {
  MoveKind kind = MoveKind::kDemote;
  EvictMode mode = EvictMode::kMayWrite;  // how the target tier may make room
  PageEntry* e = nullptr;
  IndexShard* shard = nullptr;
  size_t from = 0, to = 0;
  Slot old;
  absl::StatusOr<Slot> dst = absl::ResourceExhaustedError("no room in the target tier");
  bool copied = false;         // the bytes are in dst
  bool persisted = false;      // dst's record is written (persistent target)
  bool reuses_backup = false;  // demotion onto the page's own durable copy: no I/O
  bool corrupt = false;        // read back with the wrong checksum (dropped)
  bool detached = false;       // FinishMove found the page deleted
  bool reserve_claim = false;  // a tier-wide eviction holds a reserve claim on e
  uint64_t checksum = 0;
  PageMeta meta;
  bool NeedsPersist() const { return copied && !reuses_backup && !persisted; }
};

class ReadChecks;
class SlotAccounts;

// BeginMove charges the target tier, allocates there (making room as `mode`
// allows), copies the bytes and takes their checksum when they leave or come
// back from a persistent tier; the caller then persists (batched: one sync
// for many moves) when the target is persistent; FinishMove switches the
// entry over and uncharges the source, or undoes everything. The mover holds
// a pin on e throughout.
class PageMover {
 public:
  PageMover(StoreCore &core, SlotAccounts &slots, ReadChecks &checks)
      : core_(core), slots_(slots), checks_(checks) {}

  PageMove BeginMove(PageEntry *e, size_t to, MoveKind kind, EvictMode mode);
  // BeginMove in two halves around the copy, for a caller that copies
  // asynchronously (ReadPages): the move and its target slot (charged and
  // allocated), then the check of the bytes it copied (`sum` is their
  // xxh3-64; a corrupt page is dropped and the move marked so).
  PageMove PrepareMove(PageEntry *e, size_t to, MoveKind kind, EvictMode mode);
  void CheckMovedBytes(PageMove &m, uint64_t sum);
  // Persists every move of `moves` that needs it with one PersistBatch.
  void PersistMoves(std::vector<PageMove> &moves);
  // Returns true when the move took effect (or, for a demotion, when the
  // page left the tier anyway: deleted meanwhile, or given up). Does not
  // drop the mover's pin for kPromote (the caller's pin moves with the
  // page); drops it otherwise. One commit per kind of move, over one undo.
  bool FinishMove(PageMove &m);

  // PromoteTo in two halves around the move (promotion.cc): why e (pinned
  // once by the caller) cannot be promoted to tier `to` now, or nullopt when
  // it can; and the switch of a promotion whose bytes are in place (or its
  // undo).
  std::optional<PromoteOutcome> CheckPromotable(PageEntry *e, size_t to);
  PromoteOutcome FinishPromotion(PageMove &m);

  // Copies a page between tiers; with `sum`, also its xxh3-64.
  bool CopyBetweenTiers(size_t from, const Slot &src, size_t to, const Slot &dst,
                        uint64_t *sum = nullptr);
  // The page leaves the store from tier t (evicted from the last tier,
  // refused by the tier below, a demotion given up): out of the index, its
  // parent's count and, once unpinned, its slot. Returns 1.
  size_t DropAndUnlock(IndexShard &shard, PageEntry *e, size_t t) ABSL_UNLOCK_FUNCTION(shard.mu);

 private:
  // FinishMove's parts, each entered with m.shard->mu held and leaving it
  // released: whether the move may still take effect, the switch of each
  // kind, and the undo that gives the target slot back.
  bool MoveStillValidLocked(const PageMove &m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.shard->mu);
  void CommitDemotionAndUnlock(PageMove &m) ABSL_UNLOCK_FUNCTION(m.shard->mu);
  void CommitPromotionAndUnlock(PageMove &m) ABSL_UNLOCK_FUNCTION(m.shard->mu);
  void CommitCleanAndUnlock(PageMove &m) ABSL_UNLOCK_FUNCTION(m.shard->mu);
  bool UndoMoveAndUnlock(PageMove &m) ABSL_UNLOCK_FUNCTION(m.shard->mu);

  StoreCore &core_;
  SlotAccounts &slots_;
  ReadChecks &checks_;
};

}  // namespace kvtier::tiers
