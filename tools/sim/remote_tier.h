// RemoteAccountingTier: one node's remote tier in kvtier-sim, over the
// SharedBacking all nodes share. It follows tiers/remote/remote_tier.cc
// call for call (handles, record ownership: Unpersist deletes what this node
// wrote last, Free lets go of it; AdoptShared with EXISTS; Publish) with
// record names in place of bytes, so the real TierManager sees the same
// outcomes as in kvtierd. Reads and publishes are synchronous here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tiers/shared_tier.h"
#include "tiers/tier.h"
#include "tools/sim/shared_backing.h"
#include "tools/sim/sim.h"

namespace kvtier::sim {

// kvtierd's --remote_admission: NVMe evictions stored in the cluster (all,
// or reused ones), or put: every PUT's page is written through when filled
// (SharedTier::Publish) and NVMe evictions are dropped.
enum class RemoteAdmission { kAll, kReused, kPut };
absl::StatusOr<RemoteAdmission> ParseRemoteAdmission(absl::string_view name);
absl::string_view RemoteAdmissionName(RemoteAdmission a);

// Not thread-safe (SharedTier asks for it; the replay is single-threaded).
class RemoteAccountingTier final : public tiers::Tier, public tiers::SharedTier {
 public:
  // `capacity_pages`: what this node keeps in the cluster by its own
  // accounting (kvtierd --remote_bytes); the backing outlives the tier.
  static absl::StatusOr<std::unique_ptr<RemoteAccountingTier>> Create(SharedBacking* backing,
                                                                      uint64_t capacity_pages);

  tiers::TierKind kind() const override { return tiers::TierKind::kRemote; }
  std::string backing() const override;
  uint64_t capacity_bytes() const override;
  uint64_t used_bytes() const override;
  uint64_t max_slot_bytes() const override;
  bool persistent() const override { return true; }

  absl::StatusOr<tiers::Slot> Allocate(uint64_t bytes) override;
  // A record this node still owns stays in the cluster, unowned.
  void Free(const tiers::Slot& slot) override;
  uint8_t* Address(const tiers::Slot&) override { return nullptr; }
  absl::Status Write(const tiers::Slot& slot, uint64_t offset, const void* src,
                     uint64_t n) override;
  // A stored page: a GET; a record gone is DataLoss (a miss), and every
  // later read of the slot misses without a GET, as RemoteTier marks it bad.
  absl::Status Read(const tiers::Slot& slot, uint64_t offset, void* dst, uint64_t n) override;
  tiers::TierCounters counters() const override;
  absl::Status PersistBatch(const std::vector<tiers::Slot>& slots,
                            const std::vector<tiers::PageMeta>& metas,
                            std::vector<bool>* written) override;
  void Unpersist(const tiers::Slot& slot, const tiers::PageMeta& meta) override;
  std::vector<std::optional<tiers::Slot>> AdoptShared(absl::string_view ns,
                                                      absl::Span<const PageKey> keys,
                                                      uint64_t bytes) override;

  // Write-through (admission put): one SET of a record this node does not
  // own. Always queued (true).
  bool Publish(absl::string_view ns, const PageKey& key, const PageKey& parent, const void* bytes,
               uint64_t n) override;
  // Its commands so far (adopted is the caller's to count: the store
  // decides which found pages it adopts).
  const RemoteCounters& remote_counters() const { return rc_; }

 private:
  RemoteAccountingTier(SharedBacking* backing, uint64_t capacity_pages)
      : shared_(backing), capacity_pages_(capacity_pages) {}
  struct Handle {
    bool stored = false;  // SET (or adopted); before that the page is staged
    bool bad = false;     // found missing, or its record deleted by us
    std::string name;     // the record's name once stored
  };
  Handle* Find(const tiers::Slot& slot);
  uint64_t NewHandle(Handle h);

  SharedBacking* const shared_;
  const uint64_t capacity_pages_;
  absl::flat_hash_map<uint64_t, Handle> handles_;
  // Record name -> the handle whose SET wrote it last (from this node: a
  // node never learns that another one replaced the record since).
  absl::flat_hash_map<std::string, uint64_t> owner_;
  uint64_t next_handle_ = 1;
  uint64_t alloc_failures_ = 0;
  RemoteCounters rc_;
};

}  // namespace kvtier::sim
