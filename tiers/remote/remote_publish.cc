// RemoteTier's write-through (--remote_admission=put; remote_tier_impl.h):
// a PUT's page is encoded as its record at once (one copy of the bytes, on
// the PUT's thread) and queued; one publisher stores what is queued as one
// pipeline per node on its own connections, so the evictor's stores and the
// readers never wait behind it. The records are not owned by this node:
// other nodes adopt them, and the cluster's own eviction reclaims them.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <utility>

#include "tiers/remote/remote_record.h"
#include "tiers/remote/remote_tier_impl.h"

namespace kvtier::tiers::remote {

bool RemoteTier::Publish(absl::string_view ns, const PageKey& key, const PageKey& parent,
                         const void* bytes, uint64_t n) {
  if (n == 0 || n > config_.max_page_bytes || link_.down()) {
    publish_drops_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const RecordInfo info{.ns = ns, .key = key, .parent = parent,
                        .checksum = XXH3_64bits(bytes, n)};
  PublishJob job;
  job.redis_key = RecordKey(ns, key);
  job.value = EncodeHeader(info, n);
  job.value.append(static_cast<const char*>(bytes), n);
  job.bytes = job.value.size();
  if (!publishes_->Push(std::move(job))) {
    publish_drops_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void RemoteTier::RunPublish(std::vector<PublishJob>& batch) {
  std::vector<KeyValue> kvs;
  kvs.reserve(batch.size());
  for (const PublishJob& job : batch) kvs.push_back(KeyValue{job.redis_key, job.value});
  std::vector<absl::Status> st = Store(ClusterLink::kPublish, kvs);
  for (const absl::Status& s : st) {
    if (s.ok()) {
      published_.fetch_add(1, std::memory_order_relaxed);
    } else {
      publish_drops_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace kvtier::tiers::remote
