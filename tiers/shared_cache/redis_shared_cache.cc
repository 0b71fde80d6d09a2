// RedisSharedCache (redis_shared_cache.h). Every request is a job on one of
// three queues (batch_queue.h), each worker with its own cluster clients:
// lookups and forgets, publishing, and fetches. A worker takes every job
// queued when it wakes and runs them as one pipeline per node and link, so
// a burst costs one round trip per node. No lock is held over network I/O,
// and every callback runs on a worker after its batch's clients are free.
#include "tiers/shared_cache/redis_shared_cache.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/spdlog.h"
#include "tiers/shared_cache/batch_queue.h"
#include "tiers/shared_cache/cluster_link.h"
#include "tiers/shared_cache/record_key.h"
#include "tiers/shared_cache/sealed_record.h"

namespace kvtier::tiers::shared_cache {

using remote::KeyValue;

absl::Status RedisSharedCacheConfig::Validate() const {
  if (absl::Status s = cluster.Validate(); !s.ok()) return s;
  if (max_page_bytes == 0) return absl::InvalidArgumentError("shared cache: max_page_bytes is 0");
  if (readers == 0) return absl::InvalidArgumentError("shared cache: readers must be at least 1");
  if (max_publish_batch_bytes == 0)
    return absl::InvalidArgumentError("shared cache: max_publish_batch_bytes is 0");
  if (min_backoff <= absl::ZeroDuration() || max_backoff < min_backoff)
    return absl::InvalidArgumentError("shared cache: backoff must be 0 < min <= max");
  return absl::OkStatus();
}

namespace {

using Counter = std::atomic<uint64_t>;

// One namespace's view: its link (ACL user) and keys, fixed at start.
struct Tenant {
  ClusterLink* link = nullptr;
  const TenantKeys* keys = nullptr;  // null: shares nothing
};

class RedisSharedCache final : public SharedCache {
 public:
  explicit RedisSharedCache(const RedisSharedCacheConfig& config);
  ~RedisSharedCache() override;

  bool Publish(absl::string_view ns, const PageKey& key, const PageKey& parent, const void* bytes,
               uint64_t n) override;
  void Contains(absl::string_view ns, std::vector<PageKey> keys, ContainsDone done) override;
  void FetchInto(absl::string_view ns, std::vector<PageKey> keys, uint64_t page_bytes,
                 std::vector<uint8_t*> dst, FetchDone done) override;
  void Forget(absl::string_view ns, std::vector<PageKey> keys, ForgetDone done) override;
  void Drain() override;
  void Stop() override;
  SharedCacheCounters counters() const override;
  std::string backing() const override {
    return absl::StrCat("redis-cluster ", absl::StrJoin(config_.cluster.seeds, ","));
  }

 private:
  // A lookup-queue job: a Contains (contains_done set) or a Forget.
  struct MetaJob {
    std::string ns;
    std::vector<PageKey> keys;
    ContainsDone contains_done;
    ForgetDone forget_done;
    // Forget: publishes queued before it, which it waits for (a record
    // published after its DELETE would bring the page back).
    uint64_t after_publishes = 0;
    uint64_t bytes = 1;  // for BatchQueue: one unit per job
  };
  struct FetchJob {
    std::string ns;
    std::vector<PageKey> keys;
    std::vector<uint8_t*> dst;  // empty, or one per key (null: allocate)
    uint64_t page_bytes = 0;
    FetchDone done;
    uint64_t bytes = 0;
  };
  struct PublishJob {
    ClusterLink* link = nullptr;
    std::string redis_key, value;
    uint64_t page_bytes = 0;
    uint64_t bytes = 0;
  };

  Tenant TenantOf(absl::string_view ns) const;
  std::vector<const ClusterLink*> AllLinks() const {
    std::vector<const ClusterLink*> all{default_link_.get()};
    for (const auto& [ns, link] : ns_links_) all.push_back(link.get());
    return all;
  }
  // Runs `keys` on `link`'s `channel` client: per key its reply or error
  // (Unavailable for the whole batch when the link is down). Reports
  // reachability to the link and counts I/O errors.
  template <typename Call>
  void OnLink(ClusterLink& link, size_t channel, size_t keys, Call call);
  void RunMeta(std::vector<MetaJob>& batch);
  void RunContains(ClusterLink& link, std::vector<MetaJob*>& jobs);
  void RunForget(ClusterLink& link, std::vector<MetaJob*>& jobs);
  void RunFetch(size_t worker, std::vector<FetchJob>& batch);
  void RunPublish(std::vector<PublishJob>& batch);
  // After a burst of publishes has drained, gives what the allocator kept of
  // it back to the system (publish worker only).
  void TrimAfterPublishBurst(uint64_t freed_bytes);
  // Record buffers for Publish, recycled: a buffer from the spares (or a new
  // one), and back to them after it is stored, up to kSpareRecordBytes;
  // returns the bytes freed instead.
  std::string TakeRecordBuffer();
  uint64_t ReturnRecordBuffers(std::vector<PublishJob>& batch);
  void CountOpenFailure(OpenFailure f);
  // Each job's link, grouped: jobs of one link share a pipeline.
  template <typename Job>
  static std::vector<std::pair<ClusterLink*, std::vector<Job*>>> GroupByLink(
      std::vector<Job>& batch, const RedisSharedCache& self);

  const RedisSharedCacheConfig config_;
  std::unique_ptr<ClusterLink> default_link_;
  absl::flat_hash_map<std::string, std::unique_ptr<ClusterLink>> ns_links_;
  Counter published_{0}, publish_drops_{0}, published_bytes_{0}, lookups_{0}, lookup_keys_{0};
  Counter lookup_hits_{0}, fetch_keys_{0}, fetch_hits_{0}, fetch_misses_{0}, fetched_bytes_{0};
  Counter io_errors_{0}, rejected_{0}, oversized_{0}, malformed_{0}, forgotten_{0};
  Counter forget_errors_{0};
  // Publish jobs queued and finished (sent or dropped), in queue order.
  Counter publishes_queued_{0}, publishes_done_{0};
  Counter publish_bytes_waiting_{0};  // sealed bytes queued, not yet stored
  std::atomic<bool> stopped_{false};
  std::atomic<bool> logged_reject_{false}, logged_oversized_{false};
  // Sealed records stored and kept for the next ones (TakeRecordBuffer).
  absl::Mutex spare_mu_;
  std::vector<std::string> spare_records_ ABSL_GUARDED_BY(spare_mu_);
  uint64_t spare_bytes_ ABSL_GUARDED_BY(spare_mu_) = 0;
  // TrimAfterPublishBurst's (publish worker only).
  uint64_t untrimmed_publish_bytes_ = 0;
  absl::Time last_trim_ = absl::InfinitePast();
  // Last: their workers use everything above, and stop (draining) first.
  std::unique_ptr<BatchQueue<MetaJob>> meta_;
  std::unique_ptr<BatchQueue<FetchJob>> fetches_;
  std::unique_ptr<BatchQueue<PublishJob>> publishes_;
};

RedisSharedCache::RedisSharedCache(const RedisSharedCacheConfig& config) : config_(config) {
  const size_t channels = ClusterLink::kFirstReader + config.readers;
  LinkConfig lc{config.cluster, config.min_backoff, config.max_backoff};
  default_link_ = std::make_unique<ClusterLink>(lc, channels);
  for (const auto& [ns, credentials] : config.ns_credentials) {
    LinkConfig own = lc;
    own.cluster.user = credentials.user;
    own.cluster.password = credentials.password;
    ns_links_[ns] = std::make_unique<ClusterLink>(own, channels);
  }
  // Connect now, every channel to every master, so the first requests do
  // not pay for it and the daemon's connections (and fds) are all open from
  // its start; a cluster that does not answer leaves the link down
  // (retried with backoff) and later calls connect lazily. Tenants' own
  // links (ns_credentials) connect at their first use.
  for (size_t c = 0; c < channels; ++c) {
    remote::RedisCluster* client = default_link_->Acquire(c);
    if (client == nullptr) break;
    (void)client->ConnectMasters();
  }
  meta_ = std::make_unique<BatchQueue<MetaJob>>(
      1, /*max_batch_bytes=*/256, /*max_queued_bytes=*/config.max_lookup_queue,
      [this](size_t, std::vector<MetaJob>& batch) { RunMeta(batch); });
  fetches_ = std::make_unique<BatchQueue<FetchJob>>(
      config.readers, config.max_read_batch_bytes, /*max_queued_bytes=*/0,
      [this](size_t worker, std::vector<FetchJob>& batch) { RunFetch(worker, batch); });
  publishes_ = std::make_unique<BatchQueue<PublishJob>>(
      1, config.max_publish_batch_bytes, config.max_publish_queue_bytes,
      [this](size_t, std::vector<PublishJob>& batch) { RunPublish(batch); });
}

RedisSharedCache::~RedisSharedCache() {
  publishes_.reset();  // stores what is queued
  fetches_.reset();    // answers every queued fetch
  meta_.reset();
}

Tenant RedisSharedCache::TenantOf(absl::string_view ns) const {
  Tenant t;
  auto link = ns_links_.find(ns);
  t.link = link == ns_links_.end() ? default_link_.get() : link->second.get();
  auto keys = config_.tenant_keys.find(ns);
  if (keys != config_.tenant_keys.end()) t.keys = &keys->second;
  return t;
}

template <typename Job>
std::vector<std::pair<ClusterLink*, std::vector<Job*>>> RedisSharedCache::GroupByLink(
    std::vector<Job>& batch, const RedisSharedCache& self) {
  std::vector<std::pair<ClusterLink*, std::vector<Job*>>> groups;
  for (Job& job : batch) {
    ClusterLink* link = self.TenantOf(job.ns).link;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == link; });
    if (it == groups.end()) it = groups.insert(groups.end(), {link, {}});
    it->second.push_back(&job);
  }
  return groups;
}

template <typename Call>
void RedisSharedCache::OnLink(ClusterLink& link, size_t channel, size_t keys, Call call) {
  remote::RedisCluster* client = link.Acquire(channel);
  if (client == nullptr) {
    io_errors_.fetch_add(keys, std::memory_order_relaxed);
    call(nullptr);
    return;
  }
  const uint64_t before = client->stats().refresh_failures;
  const size_t unavailable = call(client);
  if (unavailable > 0) io_errors_.fetch_add(unavailable, std::memory_order_relaxed);
  link.Report(!ClusterUnreachable(unavailable, keys, before, client->stats().refresh_failures));
}

bool RedisSharedCache::Publish(absl::string_view ns, const PageKey& key, const PageKey& parent,
                               const void* bytes, uint64_t n) {
  const Tenant t = TenantOf(ns);
  if (t.keys == nullptr || n == 0 || n > config_.max_page_bytes || t.link->down()) {
    publish_drops_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  PublishJob job;
  job.value = TakeRecordBuffer();
  if (!SealInto(t.keys->current, ns, key, parent,
                absl::string_view(static_cast<const char*>(bytes), n), &job.value)
           .ok()) {
    publish_drops_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  job.link = t.link;
  job.redis_key = RecordKey(ns, key);
  job.page_bytes = n;
  job.bytes = job.value.size();
  const uint64_t sealed_bytes = job.bytes;
  publish_bytes_waiting_.fetch_add(sealed_bytes, std::memory_order_relaxed);
  if (!publishes_->Push(std::move(job))) {
    publish_bytes_waiting_.fetch_sub(sealed_bytes, std::memory_order_relaxed);
    publish_drops_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  publishes_queued_.fetch_add(1, std::memory_order_release);
  return true;
}

void RedisSharedCache::RunPublish(std::vector<PublishJob>& batch) {
  // Consecutive jobs of one link (usually all: one tenant's burst) share a
  // pipeline per node; one tenant's refused user fails its own group only.
  size_t begin = 0;
  while (begin < batch.size()) {
    size_t end = begin;
    std::vector<KeyValue> kvs;
    while (end < batch.size() && batch[end].link == batch[begin].link) {
      kvs.push_back(KeyValue{batch[end].redis_key, batch[end].value});
      ++end;
    }
    OnLink(*batch[begin].link, ClusterLink::kPublish, kvs.size(),
           [&](remote::RedisCluster* client) -> size_t {
             if (client == nullptr) {
               publish_drops_.fetch_add(kvs.size(), std::memory_order_relaxed);
               return kvs.size();
             }
             size_t unavailable = 0;
             std::vector<absl::Status> st = client->MultiSet(kvs);
             for (size_t i = 0; i < st.size(); ++i) {
               if (st[i].ok()) {
                 published_.fetch_add(1, std::memory_order_relaxed);
                 published_bytes_.fetch_add(batch[begin + i].page_bytes, std::memory_order_relaxed);
               } else {
                 publish_drops_.fetch_add(1, std::memory_order_relaxed);
                 if (absl::IsUnavailable(st[i])) ++unavailable;
               }
             }
             return unavailable;
           });
    publishes_done_.fetch_add(end - begin, std::memory_order_release);
    begin = end;
  }
  uint64_t stored = 0;
  for (const PublishJob& job : batch) stored += job.bytes;
  publish_bytes_waiting_.fetch_sub(stored, std::memory_order_relaxed);
  TrimAfterPublishBurst(ReturnRecordBuffers(batch));
}

// Enough spares for a burst's steady state (the soak publishes ~45 MB/s in
// 4 MiB batches) without keeping a whole queue's worth (256 MiB) for good.
constexpr uint64_t kSpareRecordBytes = 32ull << 20;

std::string RedisSharedCache::TakeRecordBuffer() {
  absl::MutexLock lock(&spare_mu_);
  if (spare_records_.empty()) return std::string();
  std::string r = std::move(spare_records_.back());
  spare_records_.pop_back();
  spare_bytes_ -= std::min<uint64_t>(spare_bytes_, r.capacity());
  return r;
}

uint64_t RedisSharedCache::ReturnRecordBuffers(std::vector<PublishJob>& batch) {
  uint64_t freed = 0;
  {
    absl::MutexLock lock(&spare_mu_);
    for (PublishJob& job : batch) {
      if (spare_bytes_ + job.value.capacity() <= kSpareRecordBytes) {
        spare_bytes_ += job.value.capacity();
        spare_records_.push_back(std::move(job.value));
      } else {
        freed += job.value.capacity();
      }
    }
  }
  batch.clear();  // what was not kept goes now, before a trim
  return freed;
}

// The evictor seals every page it publishes (a FLUSH, or NVMe filling up,
// makes it publish thousands at once) faster than this worker stores them:
// the queue holds up to max_publish_queue_bytes of sealed records, with the
// batch's pipeline buffer on top. glibc keeps the freed burst in its
// arenas (the soak's daemon held ~90 MB of free heap against ~8 MB live,
// its RSS climbing with each larger burst). Record buffers are recycled up
// to kSpareRecordBytes; what a larger burst freed beyond them is handed
// back once at least kTrimAfterBytes were freed since the last trim and at
// most one batch is still waiting, at most once a second (a trim is not
// free: on this project's VMs the next burst faults every 4 KiB page back
// in at ~30 us each). Waiting for a fully drained queue (as before) almost
// never trimmed under steady eviction: a heaptrack run saw every arena keep
// its high-water mark.
void RedisSharedCache::TrimAfterPublishBurst(uint64_t freed_bytes) {
#if defined(__GLIBC__)
  constexpr uint64_t kTrimAfterBytes = 16ull << 20;
  untrimmed_publish_bytes_ += freed_bytes;
  if (untrimmed_publish_bytes_ < kTrimAfterBytes ||
      publish_bytes_waiting_.load(std::memory_order_relaxed) > config_.max_publish_batch_bytes)
    return;
  const absl::Time now = absl::Now();
  if (now - last_trim_ < absl::Seconds(1)) return;
  malloc_trim(0);
  untrimmed_publish_bytes_ = 0;
  last_trim_ = now;
#else
  (void)freed_bytes;
#endif
}

void RedisSharedCache::Contains(absl::string_view ns, std::vector<PageKey> keys,
                                ContainsDone done) {
  lookups_.fetch_add(1, std::memory_order_relaxed);
  lookup_keys_.fetch_add(keys.size(), std::memory_order_relaxed);
  const Tenant t = TenantOf(ns);
  std::vector<bool> none(keys.size(), false);
  if (t.keys == nullptr || keys.empty() || t.link->down() || stopped_.load())
    return std::move(done)(std::move(none));
  MetaJob job;
  job.ns = std::string(ns);
  job.keys = std::move(keys);
  job.contains_done = std::move(done);
  // Refused when the queue is full: answered below as all absent.
  if (!meta_->Push(std::move(job))) std::move(job.contains_done)(std::move(none));
}

void RedisSharedCache::Forget(absl::string_view ns, std::vector<PageKey> keys, ForgetDone done) {
  if (keys.empty()) return std::move(done)(absl::OkStatus(), 0);
  if (stopped_.load())
    return std::move(done)(absl::UnavailableError("shared cache: stopping"), 0);
  MetaJob job;
  job.after_publishes = publishes_queued_.load(std::memory_order_acquire);
  job.ns = std::string(ns);
  job.keys = std::move(keys);
  job.forget_done = std::move(done);
  const size_t n = job.keys.size();
  if (!meta_->Push(std::move(job))) {
    forget_errors_.fetch_add(n, std::memory_order_relaxed);
    std::move(job.forget_done)(
        absl::UnavailableError(absl::StrCat("shared cache: ", n,
                                            " records not deleted (too many requests queued)")),
        0);
  }
}

void RedisSharedCache::RunMeta(std::vector<MetaJob>& batch) {
  for (auto& [link, jobs] : GroupByLink(batch, *this)) {
    std::vector<MetaJob*> contains, forgets;
    for (MetaJob* j : jobs) (j->contains_done ? contains : forgets).push_back(j);
    if (!contains.empty()) RunContains(*link, contains);
    if (!forgets.empty()) RunForget(*link, forgets);
  }
}

void RedisSharedCache::RunContains(ClusterLink& link, std::vector<MetaJob*>& jobs) {
  std::vector<std::string> names;
  for (MetaJob* j : jobs)
    for (const PageKey& k : j->keys) names.push_back(RecordKey(j->ns, k));
  std::vector<bool> present(names.size(), false);
  OnLink(link, ClusterLink::kLookup, names.size(), [&](remote::RedisCluster* client) -> size_t {
    if (client == nullptr) return names.size();
    size_t unavailable = 0;
    std::vector<absl::StatusOr<bool>> got = client->MultiExists(names);
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i].ok()) present[i] = *got[i];
      else if (absl::IsUnavailable(got[i].status())) ++unavailable;
    }
    return unavailable;
  });
  size_t at = 0;
  for (MetaJob* j : jobs) {
    std::vector<bool> mine(present.begin() + at, present.begin() + at + j->keys.size());
    at += j->keys.size();
    lookup_hits_.fetch_add(std::count(mine.begin(), mine.end(), true), std::memory_order_relaxed);
    std::move(j->contains_done)(std::move(mine));
  }
}

void RedisSharedCache::RunForget(ClusterLink& link, std::vector<MetaJob*>& jobs) {
  for (MetaJob* j : jobs) {
    // Bounded: a publisher stuck on a hung node sends nothing meanwhile.
    const absl::Time deadline = absl::Now() + 2 * config_.cluster.command_timeout;
    while (publishes_done_.load(std::memory_order_acquire) < j->after_publishes &&
           absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(1));
    std::vector<std::string> names;
    for (const PageKey& k : j->keys) names.push_back(RecordKey(j->ns, k));
    uint64_t deleted = 0, failed = 0;
    OnLink(link, ClusterLink::kLookup, names.size(), [&](remote::RedisCluster* client) -> size_t {
      if (client == nullptr) {
        failed = names.size();
        return names.size();
      }
      size_t unavailable = 0;
      for (const absl::StatusOr<bool>& r : client->MultiDelete(names)) {
        if (r.ok()) {
          deleted += *r ? 1 : 0;
        } else {
          ++failed;
          if (absl::IsUnavailable(r.status())) ++unavailable;
        }
      }
      return unavailable;
    });
    forgotten_.fetch_add(deleted, std::memory_order_relaxed);
    forget_errors_.fetch_add(failed, std::memory_order_relaxed);
    absl::Status st = failed == 0 ? absl::OkStatus()
                                  : absl::UnavailableError(absl::StrCat(
                                        "shared cache: ", failed, " of ", names.size(),
                                        " records could not be deleted (their nodes are down); "
                                        "DELETE again once the cluster is back"));
    std::move(j->forget_done)(std::move(st), deleted);
  }
}

void RedisSharedCache::FetchInto(absl::string_view ns, std::vector<PageKey> keys,
                                 uint64_t page_bytes, std::vector<uint8_t*> dst, FetchDone done) {
  fetch_keys_.fetch_add(keys.size(), std::memory_order_relaxed);
  const Tenant t = TenantOf(ns);
  if (t.keys == nullptr || keys.empty() || page_bytes == 0 || page_bytes > config_.max_page_bytes ||
      t.link->down() || stopped_.load()) {
    std::vector<FetchedPage> pages(keys.size());
    for (FetchedPage& p : pages) p.status = absl::NotFoundError("shared cache: not fetched");
    fetch_misses_.fetch_add(keys.size(), std::memory_order_relaxed);
    return std::move(done)(std::move(pages));
  }
  FetchJob job;
  job.ns = std::string(ns);
  job.page_bytes = page_bytes;
  job.bytes = page_bytes * keys.size();
  job.keys = std::move(keys);
  job.dst = std::move(dst);
  job.done = std::move(done);
  fetches_->Push(std::move(job));  // unbounded: the callers' requests bound it
}

void RedisSharedCache::CountOpenFailure(OpenFailure f) {
  switch (f) {
    case OpenFailure::kOversized:
      oversized_.fetch_add(1, std::memory_order_relaxed);
      if (!logged_oversized_.exchange(true))
        spdlog::warn("shared cache: refused a record larger than its page (counted in oversized)");
      break;
    case OpenFailure::kUnknownKey:
    case OpenFailure::kAuthentication:
      rejected_.fetch_add(1, std::memory_order_relaxed);
      if (!logged_reject_.exchange(true))
        spdlog::warn(
            "shared cache: a record not sealed by its tenant's key (forged, another tenant's, or "
            "another secret) was refused (counted in rejected)");
      break;
    default:
      malformed_.fetch_add(1, std::memory_order_relaxed);
      break;
  }
}

void RedisSharedCache::RunFetch(size_t worker, std::vector<FetchJob>& batch) {
  std::vector<std::vector<FetchedPage>> results(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) results[i].resize(batch[i].keys.size());
  for (auto& [link, jobs] : GroupByLink(batch, *this)) {
    // One capped GET per key of every job of this link, in one pipeline.
    std::vector<std::string> names;
    std::vector<std::pair<size_t, size_t>> where;  // (job index in batch, key index)
    uint64_t cap = 0;
    for (FetchJob* j : jobs) {
      const size_t ji = static_cast<size_t>(j - batch.data());
      for (size_t k = 0; k < j->keys.size(); ++k) {
        names.push_back(RecordKey(j->ns, j->keys[k]));
        where.emplace_back(ji, k);
      }
      cap = std::max(cap, j->page_bytes + kSealOverheadBytes);
    }
    OnLink(*link, ClusterLink::kFirstReader + worker, names.size(),
           [&](remote::RedisCluster* client) -> size_t {
             if (client == nullptr) {
               for (auto [ji, k] : where)
                 results[ji][k].status = absl::UnavailableError("shared cache: cluster down");
               return names.size();
             }
             size_t unavailable = 0;
             client->VisitGetCapped(
                 names, cap,
                 [&](size_t n, absl::StatusOr<std::optional<absl::string_view>> value) {
                   const auto [ji, k] = where[n];
                   const FetchJob& job = batch[ji];
                   FetchedPage& page = results[ji][k];
                   if (!value.ok()) {
                     if (absl::IsUnavailable(value.status())) ++unavailable;
                     page.status = value.status();
                     return;
                   }
                   if (!value->has_value()) {
                     page.status = absl::NotFoundError("shared cache: no such record");
                     return;
                   }
                   uint8_t* to = k < job.dst.size() ? job.dst[k] : nullptr;
                   if (to == nullptr) {
                     page.bytes.reset(new uint8_t[job.page_bytes]);
                     to = page.bytes.get();
                   }
                   OpenFailure failure = OpenFailure::kNone;
                   absl::StatusOr<OpenedRecord> opened = Open(*TenantOf(job.ns).keys, **value,
                                                              job.ns, job.keys[k], job.page_bytes,
                                                              to, &failure);
                   if (!opened.ok()) {
                     CountOpenFailure(failure);
                     page.bytes.reset();
                     page.status = opened.status();
                     return;
                   }
                   page.parent = opened->parent;
                   page.status = absl::OkStatus();
                 });
             return unavailable;
           });
  }
  // After the batch: the clients are free, so a `done` that queues the next
  // fetch never waits on this pipeline.
  for (size_t i = 0; i < batch.size(); ++i) {
    for (const FetchedPage& p : results[i]) {
      if (p.status.ok()) {
        fetch_hits_.fetch_add(1, std::memory_order_relaxed);
        fetched_bytes_.fetch_add(batch[i].page_bytes, std::memory_order_relaxed);
      } else if (absl::IsNotFound(p.status)) {
        fetch_misses_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    std::move(batch[i].done)(std::move(results[i]));
  }
}

void RedisSharedCache::Drain() {
  const uint64_t target = publishes_queued_.load(std::memory_order_acquire);
  while (publishes_done_.load(std::memory_order_acquire) < target)
    absl::SleepFor(absl::Milliseconds(1));
}

void RedisSharedCache::Stop() {
  // The daemon's frontend, the only caller of Contains, Fetch and Forget,
  // has stopped: no call races the queues' destruction, which answers what
  // they hold and joins their workers.
  stopped_.store(true);
  meta_.reset();
  fetches_.reset();
}

SharedCacheCounters RedisSharedCache::counters() const {
  auto get = [](const Counter& c) { return c.load(std::memory_order_relaxed); };
  SharedCacheCounters c;
  c.published = get(published_);
  c.publish_drops = get(publish_drops_);
  c.published_bytes = get(published_bytes_);
  c.lookups = get(lookups_);
  c.lookup_keys = get(lookup_keys_);
  c.lookup_hits = get(lookup_hits_);
  c.fetch_keys = get(fetch_keys_);
  c.fetch_hits = get(fetch_hits_);
  c.fetch_misses = get(fetch_misses_);
  c.fetched_bytes = get(fetched_bytes_);
  c.io_errors = get(io_errors_);
  c.rejected = get(rejected_);
  c.oversized = get(oversized_);
  c.malformed = get(malformed_);
  c.forgotten = get(forgotten_);
  c.forget_errors = get(forget_errors_);
  for (const ClusterLink* link : AllLinks()) {
    const ClusterLink::Health h = link->health();
    c.node_down_events += link->down_events() + h.node_down_events;
    c.down_nodes = std::max(c.down_nodes, link->down() ? uint64_t{1} : h.down_nodes);
    c.frontend_io += h.forbidden_io;
  }
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedCache>> CreateRedisSharedCache(
    const RedisSharedCacheConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  return std::unique_ptr<SharedCache>(new RedisSharedCache(config));
}

}  // namespace kvtier::tiers::shared_cache
