// RemoteTier's class, private to tiers/remote/: slots, staging and the
// evictor's stores (remote_tier.cc), pipelined and synchronous reads
// (remote_reads.cc), write-through publishing (remote_publish.cc).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "tiers/remote/batch_queue.h"
#include "tiers/remote/cluster_link.h"
#include "tiers/remote/remote_tier.h"
#include "tiers/shared_tier.h"

namespace kvtier::tiers::remote {

class RemoteTier final : public Tier, public SharedTier {
 public:
  explicit RemoteTier(const RemoteTierConfig& config);
  ~RemoteTier() override;

  TierKind kind() const override { return TierKind::kRemote; }
  std::string backing() const override;
  uint64_t capacity_bytes() const override { return config_.capacity_bytes; }
  uint64_t used_bytes() const override { return used_.load(std::memory_order_relaxed); }
  uint64_t max_slot_bytes() const override { return config_.max_page_bytes; }
  bool persistent() const override { return true; }
  // Reads queued together are fetched together: let a batch put a GET's
  // worth of pages in flight.
  uint32_t queue_depth() const override { return 64; }

  absl::StatusOr<Slot> Allocate(uint64_t bytes) override;
  // Frees the slot; a record this node owns stays in the cluster (other
  // nodes may adopt it; the cluster's eviction reclaims it) unless it was
  // Unpersisted first.
  void Free(const Slot& slot) override;
  uint8_t* Address(const Slot&) override { return nullptr; }
  absl::Status Write(const Slot& slot, uint64_t offset, const void* src, uint64_t n) override;
  absl::Status Read(const Slot& slot, uint64_t offset, void* dst, uint64_t n) override;
  // Queued for the readers (batch_queue.h); `done` runs on a reader thread.
  void ReadAsync(const Slot& slot, void* dst, uint64_t dst_room, ReadDone done) override;
  TierCounters counters() const override;
  absl::Status PersistBatch(const std::vector<Slot>& slots, const std::vector<PageMeta>& metas,
                            std::vector<bool>* written) override;
  void Unpersist(const Slot& slot, const PageMeta& meta) override;
  std::vector<std::optional<Slot>> AdoptShared(absl::string_view ns, absl::Span<const PageKey> keys,
                                               uint64_t bytes) override;
  bool Publish(absl::string_view ns, const PageKey& key, const PageKey& parent, const void* bytes,
               uint64_t n) override;

 private:
  using Counter = std::atomic<uint64_t>;
  // A slot: staged bytes until stored, then the name of its record.
  struct Handle {
    std::string staged;  // the page bytes (slot.bytes), before PersistBatch
    bool stored = false;
    bool bad = false;    // found missing or corrupt: later reads miss at once
    std::string redis_key, ns;
    PageKey key;
  };
  // What a read needs once it left the lock: the record's name and checks.
  struct Target {
    Slot slot;
    std::string redis_key, ns;
    PageKey key;
  };
  // One queued ReadAsync.
  struct ReadJob {
    Target target;
    uint8_t* dst = nullptr;
    ReadDone done;
    uint64_t bytes = 0;  // for BatchQueue
  };
  // One queued write-through copy: the whole record.
  struct PublishJob {
    ClusterLink* link = nullptr;  // its namespace's
    std::string redis_key, value;
    uint64_t bytes = 0;  // for BatchQueue
  };

  Handle* Find(const Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = handles_.find(slot.offset);
    return it == handles_.end() ? nullptr : it->second.get();
  }
  // The target of a read of `slot`, or the read's outcome when it needs no
  // network: staged bytes copied (OK), a free slot or a known-bad record.
  std::optional<absl::Status> Resolve(const Slot& slot, uint64_t offset, void* dst, uint64_t n,
                                      Target* target) ABSL_LOCKS_EXCLUDED(mu_);
  // Checks one fetched value as target's record and copies bytes
  // [offset, offset + n) of its page to dst; DataLoss (a miss, counted) on
  // any fault.
  absl::Status Deliver(const Target& target,
                       const absl::StatusOr<std::optional<absl::string_view>>& value,
                       uint64_t offset, uint8_t* dst, uint64_t n);
  // Reader `worker`'s batch: one VisitGet, then each job's `done`.
  void RunReads(size_t worker, std::vector<ReadJob>& batch);
  void RunPublish(std::vector<PublishJob>& batch);
  // The link namespace `ns` uses: its own ACL user's, or the default.
  ClusterLink& LinkFor(absl::string_view ns) const;
  // Positions 0..n-1 grouped by the link of namespace ns_of(i), each group
  // in order: one batch per link (an ACL user's connections are its own).
  template <typename NsOf>
  std::vector<std::pair<ClusterLink*, std::vector<size_t>>> GroupByLink(size_t n,
                                                                        NsOf ns_of) const {
    std::vector<std::pair<ClusterLink*, std::vector<size_t>>> groups;
    for (size_t i = 0; i < n; ++i) {
      ClusterLink* link = &LinkFor(ns_of(i));
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return g.first == link; });
      if (it == groups.end()) it = groups.insert(groups.end(), {link, {}});
      it->second.push_back(i);
    }
    return groups;
  }
  // Reports to `link` what a batch on its `client` found.
  void ReportBatch(ClusterLink& link, RedisCluster* client, uint64_t refresh_failures_before,
                   size_t unavailable, size_t keys);
  void MarkBad(const Slot& slot) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs one batch of SETs on `link`'s `channel` client and reports
  // reachability.
  std::vector<absl::Status> Store(ClusterLink& link, size_t channel,
                                  absl::Span<const KeyValue> kvs);

  const RemoteTierConfig config_;
  // Fixed at construction (no lock): the default link and the tenants' own.
  std::unique_ptr<ClusterLink> default_link_;
  absl::flat_hash_map<std::string, std::unique_ptr<ClusterLink>> ns_links_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Handle>> handles_ ABSL_GUARDED_BY(mu_);
  // Redis key -> the handle whose record it is now: a late Unpersist of an
  // older copy of the key must not delete a newer one.
  absl::flat_hash_map<std::string, uint64_t> owner_ ABSL_GUARDED_BY(mu_);
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  Counter used_{0}, bytes_written_{0}, bytes_read_{0}, alloc_failures_{0}, io_errors_{0};
  Counter corrupt_reads_{0}, missing_reads_{0}, published_{0}, publish_drops_{0};
  // Last: their workers use everything above, and stop (draining) first.
  std::unique_ptr<BatchQueue<ReadJob>> reads_;
  std::unique_ptr<BatchQueue<PublishJob>> publishes_;
};

absl::Status Miss(absl::string_view why, const Slot& slot);

}  // namespace kvtier::tiers::remote
