// RemoteTier (remote_tier_impl.h): slots, the evictor's stores, adoption.
// Handles map local slots to staged bytes until PersistBatch stores them,
// then to the record's Redis key. No lock is held over network I/O; each
// call's network work is one pipelined batch.
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
#include "tiers/remote/remote_record.h"
#include "tiers/remote/remote_tier_impl.h"

namespace kvtier::tiers::remote {

absl::Status Miss(absl::string_view why, const Slot& slot) {
  return absl::DataLossError(absl::StrCat("remote page (slot ", slot.offset, "): ", why));
}

RemoteTier::RemoteTier(const RemoteTierConfig& config) : config_(config) {
  const size_t channels = ClusterLink::kFirstReader + config.readers;
  default_link_ = std::make_unique<ClusterLink>(config, channels);
  for (const auto& [ns, credentials] : config.ns_credentials) {
    RemoteTierConfig own = config;
    own.cluster.user = credentials.user;
    own.cluster.password = credentials.password;
    ns_links_[ns] = std::make_unique<ClusterLink>(own, channels);
  }
  // Connect now, so the first requests do not pay for it; a cluster
  // that does not answer leaves the tier down (retried with backoff).
  // Tenants' own links connect on their first use.
  if (default_link_->Acquire(ClusterLink::kRead) != nullptr)
    default_link_->Acquire(ClusterLink::kWrite);
  reads_ = std::make_unique<BatchQueue<ReadJob>>(
      config.readers, config.max_read_batch_bytes, /*max_queued_bytes=*/0,
      [this](size_t worker, std::vector<ReadJob>& batch) { RunReads(worker, batch); });
  publishes_ = std::make_unique<BatchQueue<PublishJob>>(
      1, config.max_read_batch_bytes, config.max_publish_queue_bytes,
      [this](size_t, std::vector<PublishJob>& batch) { RunPublish(batch); });
}

RemoteTier::~RemoteTier() {
  publishes_.reset();  // stores what is queued
  reads_.reset();      // answers every queued read
}

ClusterLink& RemoteTier::LinkFor(absl::string_view ns) const {
  auto it = ns_links_.find(ns);
  return it == ns_links_.end() ? *default_link_ : *it->second;
}

std::string RemoteTier::backing() const {
  return absl::StrCat("redis cluster ", absl::StrJoin(config_.cluster.seeds, ","));
}

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
  auto it = handles_.find(slot.offset);
  if (it == handles_.end()) return;
  // A record still owned (not Unpersisted: the page moved up, or this node
  // stops tracking it) stays for the other nodes, unowned from now on.
  if (it->second->stored) {
    auto owner = owner_.find(it->second->redis_key);
    if (owner != owner_.end() && owner->second == slot.offset) owner_.erase(owner);
  }
  handles_.erase(it);
  used_.fetch_sub(slot.bytes, std::memory_order_relaxed);
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

std::vector<absl::Status> RemoteTier::Store(ClusterLink& link, size_t channel,
                                            absl::Span<const KeyValue> kvs) {
  RedisCluster* client = link.Acquire(channel);
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
  ReportBatch(link, client, before, unavailable, st.size());
  return st;
}

void RemoteTier::ReportBatch(ClusterLink& link, RedisCluster* client,
                             uint64_t refresh_failures_before, size_t unavailable, size_t keys) {
  link.Report(!ClusterUnreachable(unavailable, keys, refresh_failures_before,
                                   client->stats().refresh_failures));
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
  std::vector<absl::Status> st(slots.size(), absl::CancelledError("not stored"));
  bool down = false;
  for (auto& [link, group] : GroupByLink(slots.size(), [&](size_t i) { return metas[i].ns_name; })) {
    std::vector<KeyValue> kvs;
    std::vector<size_t> index;
    for (size_t i : group) {
      if (values[i].empty()) continue;
      kvs.push_back(KeyValue{keys[i], values[i]});
      index.push_back(i);
    }
    std::vector<absl::Status> stored = Store(*link, ClusterLink::kWrite, kvs);
    for (size_t j = 0; j < index.size(); ++j) st[index[j]] = std::move(stored[j]);
    down = down || link->down();
  }
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < slots.size(); ++i) {
    Handle* h = Find(slots[i]);
    if (!st[i].ok() || h == nullptr) continue;
    ok[i] = true;
    h->stored = true;
    h->redis_key = keys[i];
    h->ns = std::string(metas[i].ns_name);
    h->key = metas[i].key;
    std::string().swap(h->staged);
    owner_[keys[i]] = slots[i].offset;
  }
  if (written != nullptr) *written = ok;
  return down ? absl::UnavailableError("remote tier: the cluster is down") : absl::OkStatus();
}

void RemoteTier::Unpersist(const Slot& slot, const PageMeta& meta) {
  std::string redis_key, ns;
  {
    absl::MutexLock lock(&mu_);
    Handle* h = Find(slot);
    if (h == nullptr || !h->stored) return;
    auto it = owner_.find(h->redis_key);
    if (it == owner_.end() || it->second != slot.offset) return;  // a newer copy owns it
    owner_.erase(it);
    redis_key = h->redis_key;
    ns = h->ns;
    h->bad = true;  // the record is going: a late reader misses
  }
  // Best effort: a key left behind (cluster down) is replaced by the next
  // copy of the page or dropped by the cluster's own eviction.
  RedisCluster* client = LinkFor(ns).Acquire(ClusterLink::kWrite);
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
  ClusterLink& link = LinkFor(ns);
  RedisCluster* client = link.Acquire(ClusterLink::kRead);
  if (client == nullptr) return out;  // down: nothing found
  const uint64_t before = client->stats().refresh_failures;
  std::vector<absl::StatusOr<bool>> found = client->MultiExists(names);
  size_t unavailable = 0;
  for (const auto& f : found) unavailable += !f.ok() && absl::IsUnavailable(f.status()) ? 1 : 0;
  ReportBatch(link, client, before, unavailable, found.size());
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
  // Down when the default link is; a tenant's link alone going down (its
  // ACL user refused, say) counts in down_events.
  c.down = default_link_->down() ? 1 : 0;
  c.down_events = default_link_->down_events();
  for (const auto& [ns, link] : ns_links_) c.down_events += link->down_events();
  c.corrupt_reads = corrupt_reads_.load(std::memory_order_relaxed);
  c.missing_reads = missing_reads_.load(std::memory_order_relaxed);
  c.published = published_.load(std::memory_order_relaxed);
  c.publish_drops = publish_drops_.load(std::memory_order_relaxed);
  return c;
}

absl::Status RemoteTierConfig::Validate() const {
  RETURN_IF_ERROR(cluster.Validate());
  if (capacity_bytes == 0) return absl::InvalidArgumentError("remote tier: capacity 0");
  if (max_page_bytes == 0 || max_page_bytes > (1ull << 31))
    return absl::InvalidArgumentError("remote tier: max page bytes must be in (0, 2 GiB]");
  if (min_backoff <= absl::ZeroDuration() || max_backoff < min_backoff)
    return absl::InvalidArgumentError("remote tier: want 0 < min_backoff <= max_backoff");
  for (const auto& [ns, credentials] : ns_credentials) {
    if (ns.empty() || credentials.user.empty() || credentials.password.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("remote tier: namespace '", ns, "' needs a Redis user and a password"));
  }
  if (readers == 0 || readers > 64)
    return absl::InvalidArgumentError("remote tier: readers must be in 1..64");
  if (max_read_batch_bytes < max_page_bytes)
    return absl::InvalidArgumentError("remote tier: a read batch must hold a page");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tier>> CreateRemoteTier(const RemoteTierConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  return std::unique_ptr<Tier>(new RemoteTier(config));
}

}  // namespace kvtier::tiers::remote
