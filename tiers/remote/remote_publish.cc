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
  ClusterLink& link = LinkFor(ns);
  if (n == 0 || n > config_.max_page_bytes || link.down()) {
    publish_drops_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const RecordInfo info{.ns = ns, .key = key, .parent = parent,
                        .checksum = XXH3_64bits(bytes, n)};
  PublishJob job;
  job.link = &link;
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
  // Consecutive jobs of one link (usually all: one tenant's PUT burst)
  // share a batch, one pipeline per node.
  std::vector<std::pair<ClusterLink*, std::vector<KeyValue>>> groups;
  for (const PublishJob& job : batch) {
    if (groups.empty() || groups.back().first != job.link) groups.push_back({job.link, {}});
    groups.back().second.push_back(KeyValue{job.redis_key, job.value});
  }
  for (auto& [link, kvs] : groups) {
    for (const absl::Status& s : Store(*link, ClusterLink::kPublish, kvs)) {
      (s.ok() ? published_ : publish_drops_).fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace kvtier::tiers::remote
