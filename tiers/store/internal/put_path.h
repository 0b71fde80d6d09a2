// PutPath: the store's side of a PUT (put_reservations.cc) — the in-flight
// claim that makes a key's reservation unique, placement in a tier with room
// (making room only by dropping clean pages: no disk I/O on the request
// path), write-through copies, and publishing the filled page.
// Internal to tiers/store/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "tiers/store/internal/store_core.h"

namespace kvtier::tiers {

class Evictor;
class SlotAccounts;

class PutPath {
 public:
  PutPath(StoreCore &core, SlotAccounts &slots, Evictor &evictor)
      : core_(core), slots_(slots), evictor_(evictor) {}

  // Under the key's shard lock: dedup against a present key or a PUT of it
  // in flight, else enter the key in the in-flight table.
  enum class Claim { kClaimed, kPresent, kInFlight };
  // kInFlight: *other is the claiming PUT's handle.
  Claim ClaimKey(NamespaceId ns, const PageKey &key, std::shared_ptr<KeyInFlight> *other);
  void ReleaseClaim(NamespaceId ns, const PageKey &key);
  // A slot of tier t for a claimed key (charged and allocated); on failure
  // asks the evictor to clean.
  absl::StatusOr<Slot> ReserveIn(NamespaceId ns, size_t t, uint64_t bytes);
  // Write-through: a slot for a PUT's durable copy in the last tier, if it
  // is persistent. nullopt when there is no such tier (the page needs no
  // copy); ResourceExhausted when it has no room (the PUT fails: its reply
  // would promise durability it does not have).
  absl::StatusOr<std::optional<Slot>> ReserveBackup(NamespaceId ns, size_t t, uint64_t bytes);
  // Publishes a reserved page (the key is claimed by the caller, so no
  // entry for it can exist) and releases the claim.
  void Commit(NamespaceId ns, const PageKey &key, const PageKey &parent, size_t t, const Slot &slot,
              uint64_t checksum, const Slot *backup);

 private:
  StoreCore &core_;
  SlotAccounts &slots_;
  Evictor &evictor_;
};

}  // namespace kvtier::tiers
