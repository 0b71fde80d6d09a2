// TierManager::Impl: the store's parts, each behind its own internal header,
// so a file of tiers/store/ includes the parts it uses and no more
// (docs/ARCHITECTURE.md has the map). Only the core is held by value: the
// others are reached through their own headers. Internal to tiers/store/:
// tests/arch/check_includes.py fails on an include from anywhere else in the
// product (the store's own tests may include it).
#pragma once

#include <memory>
#include <vector>

#include "tiers/store/internal/store_core.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {

class Evictor;       // internal/evictor.h
class PageMover;     // internal/page_move.h
class PutPath;       // internal/put_path.h
class ReadChecks;    // internal/read_checks.h
class SlotAccounts;  // internal/slot_accounts.h

struct TierManager::Impl {
  Impl(const TierManagerConfig& c, std::vector<std::unique_ptr<Tier>> t);
  ~Impl();  // stops the evictor, then frees what is indexed

  StoreCore core;                       // state, index, entry bookkeeping
  std::unique_ptr<ReadChecks> checks;   // bytes read back: checked or dropped
  std::unique_ptr<SlotAccounts> slots;  // charges, reserves, freeing slots
  std::unique_ptr<PageMover> mover;     // demotion, promotion, cleaning, dropping
  std::unique_ptr<Evictor> evictor;     // victims, cleaning, the evictor thread
  std::unique_ptr<PutPath> puts;        // claims, reservations, commit
};

}  // namespace kvtier::tiers
