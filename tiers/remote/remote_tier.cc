// RemoteTier (remote_tier.h). Handles map local slots to staged bytes until
// PersistBatch stores them, then to the record's Redis key. No lock is held
// over network I/O; each call's network work is one pipelined batch.
#include "tiers/remote/remote_tier.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "kvtier/status_macros.h"
#include "tiers/remote/cluster_link.h"
#include "tiers/remote/remote_record.h"
#include "tiers/shared_tier.h"

namespace kvtier::tiers::remote {
namespace {

using Counter = std::atomic<uint64_t>;

absl::Status Miss(absl::string_view why, const Slot& slot) {
  return absl::DataLossError(absl::StrCat("remote page (slot ", slot.offset, "): ", why));
}

class RemoteTier final : public Tier, public SharedTier {
 public:
  explicit RemoteTier(const RemoteTierConfig& config) : config_(config), link_(config) {
    // Connect now, so the first requests do not pay for it; a cluster
    // that does not answer leaves the tier down (retried with backoff).
    if (link_.Acquire(ClusterLink::Role::kRead) != nullptr) link_.Acquire(ClusterLink::Role::kWrite);
  }

  TierKind kind() const override { return TierKind::kRemote; }
  std::string backing() const override {
    return absl::StrCat("redis cluster ", absl::StrJoin(config_.cluster.seeds, ","));
  }
  uint64_t capacity_bytes() const override { return config_.capacity_bytes; }
  uint64_t used_bytes() const override { return used_.load(std::memory_order_relaxed); }
  uint64_t max_slot_bytes() const override { return config_.max_page_bytes; }
  bool persistent() const override { return true; }

  absl::StatusOr<Slot> Allocate(uint64_t bytes) override;
  void Free(const Slot& slot) override;
  uint8_t* Address(const Slot&) override { return nullptr; }
  absl::Status Write(const Slot& slot, uint64_t offset, const void* src, uint64_t n) override;
  absl::Status Read(const Slot& slot, uint64_t offset, void* dst, uint64_t n) override;
  TierCounters counters() const override;
  absl::Status PersistBatch(const std::vector<Slot>& slots, const std::vector<PageMeta>& metas,
                            std::vector<bool>* written) override;
  void Unpersist(const Slot& slot, const PageMeta& meta) override;
  std::vector<std::optional<Slot>> AdoptShared(absl::string_view ns, absl::Span<const PageKey> keys,
                                               uint64_t bytes) override;

 private:
  // A slot: staged bytes until stored, then the name of its record.
  struct Handle {
    std::string staged;  // the page bytes (slot.bytes), before PersistBatch
    bool stored = false;
    bool bad = false;    // found missing or corrupt: later reads miss at once
    std::string redis_key, ns;
    PageKey key;
  };
  Handle* Find(const Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = handles_.find(slot.offset);
    return it == handles_.end() ? nullptr : it->second.get();
  }
  // GET of one record, verified as (ns, key, bytes); DataLoss on any miss.
  absl::StatusOr<std::string> Fetch(const Slot& slot, const std::string& redis_key,
                                    const std::string& ns, const PageKey& key);
  void MarkBad(const Slot& slot) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs one batch on the write client and reports reachability.
  std::vector<absl::Status> Store(absl::Span<const KeyValue> kvs);

  const RemoteTierConfig config_;
  ClusterLink link_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Handle>> handles_ ABSL_GUARDED_BY(mu_);
  // Redis key -> the handle whose record it is now: a late Unpersist of an
  // older copy of the key must not delete a newer one.
  absl::flat_hash_map<std::string, uint64_t> owner_ ABSL_GUARDED_BY(mu_);
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  Counter used_{0}, bytes_written_{0}, bytes_read_{0}, alloc_failures_{0}, io_errors_{0};
  Counter corrupt_reads_{0}, missing_reads_{0};
};

absl::StatusOr<Slot> RemoteTier::Allocate(uint64_t bytes) {
  if (bytes == 0 || bytes > config_.max_page_bytes)
    return absl::InvalidArgumentError(
        absl::StrCat("remote tier: a page of ", bytes, " bytes (max ", config_.max_page_bytes, ")"));
  absl::MutexLock lock(&mu_);
  if (used_.load(std::memory_order_relaxed) + bytes > config_.capacity_bytes) {
    alloc_failures_.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError("remote tier: capacity reached");
  }
  auto h = std::make_unique<Handle>();
  h->staged.resize(bytes);
  const uint64_t id = next_handle_++;
  handles_[id] = std::move(h);
  used_.fetch_add(bytes, std::memory_order_relaxed);
  return Slot{.offset = id, .bytes = static_cast<uint32_t>(bytes), .cls = 0};
}

void RemoteTier::Free(const Slot& slot) {
  absl::MutexLock lock(&mu_);
  if (handles_.erase(slot.offset) > 0) used_.fetch_sub(slot.bytes, std::memory_order_relaxed);
}

absl::Status RemoteTier::Write(const Slot& slot, uint64_t offset, const void* src, uint64_t n) {
  if (offset > slot.bytes || n > slot.bytes - offset)
    return absl::OutOfRangeError("remote tier: write past the slot");
  absl::MutexLock lock(&mu_);
  Handle* h = Find(slot);
  if (h == nullptr || h->stored)
    return absl::FailedPreconditionError("remote tier: write to a free or stored slot");
  std::memcpy(h->staged.data() + offset, src, n);
  bytes_written_.fetch_add(n, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status RemoteTier::Read(const Slot& slot, uint64_t offset, void* dst, uint64_t n) {
  if (offset > slot.bytes || n > slot.bytes - offset)
    return absl::OutOfRangeError("remote tier: read past the slot");
  std::string redis_key, ns;
  PageKey key;
  {
    absl::MutexLock lock(&mu_);
    Handle* h = Find(slot);
    if (h == nullptr) return absl::FailedPreconditionError("remote tier: read of a free slot");
    if (!h->stored) {  // not in the cluster yet: the staged bytes are the page
      std::memcpy(dst, h->staged.data() + offset, n);
      return absl::OkStatus();
    }
    if (h->bad) return Miss("found missing or corrupt before", slot);
    redis_key = h->redis_key;
    ns = h->ns;
    key = h->key;
  }
  absl::StatusOr<std::string> value = Fetch(slot, redis_key, ns, key);
  if (!value.ok()) return value.status();
  std::memcpy(dst, value->data() + (value->size() - slot.bytes) + offset, n);
  bytes_read_.fetch_add(n, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<std::string> RemoteTier::Fetch(const Slot& slot, const std::string& redis_key,
                                              const std::string& ns, const PageKey& key) {
  RedisCluster* client = link_.Acquire(ClusterLink::Role::kRead);
  if (client == nullptr) return Miss("the cluster is down", slot);
  const uint64_t before = client->stats().refresh_failures;
  auto got = client->MultiGet(absl::MakeConstSpan(&redis_key, 1));
  if (!got[0].ok()) {
    io_errors_.fetch_add(1, std::memory_order_relaxed);
    link_.Report(!ClusterUnreachable(absl::IsUnavailable(got[0].status()) ? 1 : 0, 1, before,
                                     client->stats().refresh_failures));
    return Miss(got[0].status().message(), slot);
  }
  link_.Report(true);
  if (!got[0]->has_value()) {
    missing_reads_.fetch_add(1, std::memory_order_relaxed);
    MarkBad(slot);
    return Miss("no longer in the cluster", slot);
  }
  std::string value = **std::move(got[0]);
  absl::StatusOr<ParsedRecord> rec = ParseExpected(value, ns, key, slot.bytes);
  if (!rec.ok()) {
    corrupt_reads_.fetch_add(1, std::memory_order_relaxed);
    MarkBad(slot);
    return Miss(rec.status().message(), slot);
  }
  return value;  // the body is its last slot.bytes bytes
}

void RemoteTier::MarkBad(const Slot& slot) {
  absl::MutexLock lock(&mu_);
  if (Handle* h = Find(slot)) h->bad = true;
}

std::vector<absl::Status> RemoteTier::Store(absl::Span<const KeyValue> kvs) {
  RedisCluster* client = link_.Acquire(ClusterLink::Role::kWrite);
  if (client == nullptr)
    return std::vector<absl::Status>(kvs.size(), absl::UnavailableError("remote tier down"));
  const uint64_t before = client->stats().refresh_failures;
  std::vector<absl::Status> st = client->MultiSet(kvs);
  size_t unavailable = 0;
  for (const absl::Status& s : st) {
    if (s.ok()) continue;
    io_errors_.fetch_add(1, std::memory_order_relaxed);
    if (absl::IsUnavailable(s)) ++unavailable;
  }
  link_.Report(!ClusterUnreachable(unavailable, st.size(), before, client->stats().refresh_failures));
  return st;
}

absl::Status RemoteTier::PersistBatch(const std::vector<Slot>& slots,
                                      const std::vector<PageMeta>& metas,
                                      std::vector<bool>* written) {
  std::vector<bool> ok(slots.size(), false);
  std::vector<std::string> keys(slots.size()), values(slots.size());
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < slots.size(); ++i) {
      Handle* h = Find(slots[i]);
      if (h == nullptr || h->stored) continue;
      const std::string& body = h->staged;
      RecordInfo info{.ns = metas[i].ns_name, .key = metas[i].key, .parent = metas[i].parent,
                      .checksum = XXH3_64bits(body.data(), body.size())};
      keys[i] = RecordKey(metas[i].ns_name, metas[i].key);
      values[i] = EncodeHeader(info, body.size());
      values[i].append(body);
    }
  }
  std::vector<KeyValue> kvs;
  std::vector<size_t> index;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (values[i].empty()) continue;
    kvs.push_back(KeyValue{keys[i], values[i]});
    index.push_back(i);
  }
  std::vector<absl::Status> st = Store(kvs);
  absl::MutexLock lock(&mu_);
  for (size_t j = 0; j < index.size(); ++j) {
    const size_t i = index[j];
    Handle* h = Find(slots[i]);
    if (!st[j].ok() || h == nullptr) continue;
    ok[i] = true;
    h->stored = true;
    h->redis_key = keys[i];
    h->ns = std::string(metas[i].ns_name);
    h->key = metas[i].key;
    std::string().swap(h->staged);
    owner_[keys[i]] = slots[i].offset;
  }
  if (written != nullptr) *written = ok;
  return link_.down() ? absl::UnavailableError("remote tier: the cluster is down")
                      : absl::OkStatus();
}

void RemoteTier::Unpersist(const Slot& slot, const PageMeta& meta) {
  std::string redis_key;
  {
    absl::MutexLock lock(&mu_);
    Handle* h = Find(slot);
    if (h == nullptr || !h->stored) return;
    auto it = owner_.find(h->redis_key);
    if (it == owner_.end() || it->second != slot.offset) return;  // a newer copy owns it
    owner_.erase(it);
    redis_key = h->redis_key;
    h->bad = true;  // the record is going: a late reader misses
  }
  // Best effort: a key left behind (cluster down) is replaced by the next
  // copy of the page or dropped by the cluster's own eviction.
  RedisCluster* client = link_.Acquire(ClusterLink::Role::kWrite);
  if (client == nullptr) return;
  if (!client->MultiDelete(absl::MakeConstSpan(&redis_key, 1))[0].ok())
    io_errors_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<std::optional<Slot>> RemoteTier::AdoptShared(absl::string_view ns,
                                                         absl::Span<const PageKey> keys,
                                                         uint64_t bytes) {
  std::vector<std::optional<Slot>> out(keys.size());
  if (bytes == 0 || bytes > config_.max_page_bytes || keys.empty()) return out;
  std::vector<std::string> names;
  names.reserve(keys.size());
  for (const PageKey& k : keys) names.push_back(RecordKey(ns, k));
  RedisCluster* client = link_.Acquire(ClusterLink::Role::kRead);
  if (client == nullptr) return out;  // down: nothing found
  const uint64_t before = client->stats().refresh_failures;
  std::vector<absl::StatusOr<bool>> found = client->MultiExists(names);
  size_t unavailable = 0;
  for (const auto& f : found) unavailable += !f.ok() && absl::IsUnavailable(f.status()) ? 1 : 0;
  link_.Report(!ClusterUnreachable(unavailable, found.size(), before,
                                   client->stats().refresh_failures));
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!found[i].ok() || !*found[i]) continue;
    if (used_.load(std::memory_order_relaxed) + bytes > config_.capacity_bytes) break;
    // Stored, not owned (no owner_ entry): freeing it never deletes the
    // other node's record.
    auto h = std::make_unique<Handle>();
    h->stored = true;
    h->redis_key = std::move(names[i]);
    h->ns = std::string(ns);
    h->key = keys[i];
    const uint64_t id = next_handle_++;
    handles_[id] = std::move(h);
    used_.fetch_add(bytes, std::memory_order_relaxed);
    out[i] = Slot{.offset = id, .bytes = static_cast<uint32_t>(bytes), .cls = 0};
  }
  return out;
}

TierCounters RemoteTier::counters() const {
  TierCounters c;
  c.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  c.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  c.alloc_failures = alloc_failures_.load(std::memory_order_relaxed);
  c.io_errors = io_errors_.load(std::memory_order_relaxed);
  c.down = link_.down() ? 1 : 0;
  c.down_events = link_.down_events();
  c.corrupt_reads = corrupt_reads_.load(std::memory_order_relaxed);
  c.missing_reads = missing_reads_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace

absl::Status RemoteTierConfig::Validate() const {
  RETURN_IF_ERROR(cluster.Validate());
  if (capacity_bytes == 0) return absl::InvalidArgumentError("remote tier: capacity 0");
  if (max_page_bytes == 0 || max_page_bytes > (1ull << 31))
    return absl::InvalidArgumentError("remote tier: max page bytes must be in (0, 2 GiB]");
  if (min_backoff <= absl::ZeroDuration() || max_backoff < min_backoff)
    return absl::InvalidArgumentError("remote tier: want 0 < min_backoff <= max_backoff");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tier>> CreateRemoteTier(const RemoteTierConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  return std::unique_ptr<Tier>(new RemoteTier(config));
}

}  // namespace kvtier::tiers::remote
