// RemoteTier's reads (remote_tier_impl.h). ReadAsync queues; the readers
// (batch_queue.h) fetch what is queued as one pipeline per node and check
// each value as the record asked for before copying its page bytes straight
// from the reply into the caller's buffer. Read is the same check, alone.
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tiers/remote/remote_record.h"
#include "tiers/remote/remote_tier_impl.h"

namespace kvtier::tiers::remote {

std::optional<absl::Status> RemoteTier::Resolve(const Slot& slot, uint64_t offset, void* dst,
                                                uint64_t n, Target* target) {
  if (offset > slot.bytes || n > slot.bytes - offset)
    return absl::OutOfRangeError("remote tier: read past the slot");
  absl::MutexLock lock(&mu_);
  Handle* h = Find(slot);
  if (h == nullptr) return absl::FailedPreconditionError("remote tier: read of a free slot");
  if (!h->stored) {  // not in the cluster yet: the staged bytes are the page
    std::memcpy(dst, h->staged.data() + offset, n);
    return absl::OkStatus();
  }
  if (h->bad) return Miss("found missing or corrupt before", slot);
  *target = Target{slot, h->redis_key, h->ns, h->key};
  return std::nullopt;
}

absl::Status RemoteTier::Deliver(const Target& target,
                                 const absl::StatusOr<std::optional<absl::string_view>>& value,
                                 uint64_t offset, uint8_t* dst, uint64_t n) {
  if (!value.ok()) {
    io_errors_.fetch_add(1, std::memory_order_relaxed);
    return Miss(value.status().message(), target.slot);
  }
  if (!value->has_value()) {
    missing_reads_.fetch_add(1, std::memory_order_relaxed);
    MarkBad(target.slot);
    return Miss("no longer in the cluster", target.slot);
  }
  absl::StatusOr<ParsedRecord> rec = ParseExpected(**value, target.ns, target.key, target.slot.bytes);
  if (!rec.ok()) {
    corrupt_reads_.fetch_add(1, std::memory_order_relaxed);
    MarkBad(target.slot);
    return Miss(rec.status().message(), target.slot);
  }
  std::memcpy(dst, rec->body.data() + offset, n);
  bytes_read_.fetch_add(n, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status RemoteTier::Read(const Slot& slot, uint64_t offset, void* dst, uint64_t n) {
  Target target;
  if (std::optional<absl::Status> now = Resolve(slot, offset, dst, n, &target)) return *now;
  ClusterLink& link = LinkFor(target.ns);
  RedisCluster* client = link.Acquire(ClusterLink::kRead);
  if (client == nullptr) return Miss("the cluster is down", slot);
  const uint64_t before = client->stats().refresh_failures;
  absl::Status st;
  size_t unavailable = 0;
  client->VisitGet(absl::MakeConstSpan(&target.redis_key, 1),
                   [&](size_t, absl::StatusOr<std::optional<absl::string_view>> value) {
                     if (!value.ok() && absl::IsUnavailable(value.status())) ++unavailable;
                     st = Deliver(target, value, offset, static_cast<uint8_t*>(dst), n);
                   });
  ReportBatch(link, client, before, unavailable, 1);
  return st;
}

void RemoteTier::ReadAsync(const Slot& slot, void* dst, uint64_t dst_room, ReadDone done) {
  if (dst_room < slot.bytes) return done(absl::InvalidArgumentError("remote tier: dst too small"));
  ReadJob job;
  if (std::optional<absl::Status> now = Resolve(slot, 0, dst, slot.bytes, &job.target))
    return done(*std::move(now));
  job.dst = static_cast<uint8_t*>(dst);
  job.done = std::move(done);
  job.bytes = slot.bytes;
  reads_->Push(std::move(job));  // unbounded: the caller's window bounds reads
}

void RemoteTier::RunReads(size_t worker, std::vector<ReadJob>& batch) {
  std::vector<absl::Status> results(batch.size());
  // Not a structured binding: the VisitGet lambda below captures `group`.
  for (auto& by_link :
       GroupByLink(batch.size(), [&](size_t i) -> absl::string_view { return batch[i].target.ns; })) {
    ClusterLink* link = by_link.first;
    const std::vector<size_t>& group = by_link.second;
    RedisCluster* client = link->Acquire(ClusterLink::kFirstReader + worker);
    if (client == nullptr) {
      for (size_t i : group) results[i] = Miss("the cluster is down", batch[i].target.slot);
      continue;
    }
    std::vector<std::string> keys;
    keys.reserve(group.size());
    for (size_t i : group) keys.push_back(batch[i].target.redis_key);
    const uint64_t before = client->stats().refresh_failures;
    size_t unavailable = 0;
    client->VisitGet(keys, [&](size_t k, absl::StatusOr<std::optional<absl::string_view>> value) {
      if (!value.ok() && absl::IsUnavailable(value.status())) ++unavailable;
      const ReadJob& job = batch[group[k]];
      results[group[k]] = Deliver(job.target, value, 0, job.dst, job.target.slot.bytes);
    });
    ReportBatch(*link, client, before, unavailable, keys.size());
  }
  // After the batch: the clients' locks are released, so a `done` that
  // starts the next read never waits on this pipeline.
  for (size_t i = 0; i < batch.size(); ++i) batch[i].done(std::move(results[i]));
}

void RemoteTier::MarkBad(const Slot& slot) {
  absl::MutexLock lock(&mu_);
  if (Handle* h = Find(slot)) h->bad = true;
}

}  // namespace kvtier::tiers::remote
