// The page-move primitive's vocabulary (page_move.cc): what kind of move,
// and the state one move carries from BeginMove (charge, allocate, copy,
// check) through PersistMoves (one sync for a batch) to FinishMove (one
// commit per kind, or the undo). Internal to tiers/store/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "tiers/store/internal/page_index.h"
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

}  // namespace kvtier::tiers
