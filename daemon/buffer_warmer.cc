// Buffer warm-up threads. Per chunk: mincore() says which pages the client's
// object already holds; for each run of them, madvise(MADV_POPULATE_WRITE)
// builds the daemon's page-table entries without a fault per page, then one
// read per page makes the mapping live. The read is not redundant: under a
// hypervisor that maps guest pages lazily (this project's VMs), the first
// access through a new mapping costs ~15 us per page even with the entry
// populated, and only an access pays it ahead of time.
#include "daemon/buffer_warmer.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "kvtier/sigbus_guard.h"
#include "kvtier/test_hooks.h"
#include "spdlog/spdlog.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace kvtier::daemon {

// Fields other than the first three are guarded by the warmer's mu_.
struct BufferWarmer::Job {
  std::weak_ptr<ClientBuffer> buffer;
  uint8_t* base;  // valid while `buffer` can be locked
  uint64_t size;
  uint64_t done = 0;        // bytes warmed or skipped so far
  bool cancelled = false;   // set while a thread works on it; it drops the job
};

namespace {

// Cleared at the first EINVAL: a kernel without MADV_POPULATE_* (< 5.14).
std::atomic<bool> g_populate_supported{true};

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

absl::Status BufferWarmerConfig::Validate() const {
  if (threads < 0 || threads > 16)
    return absl::InvalidArgumentError("buffer warm-up threads must be in [0, 16]");
  if (chunk_bytes < PageSize() || chunk_bytes % PageSize() != 0 || chunk_bytes > (64ull << 20))
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer warm-up chunk of ", chunk_bytes, " bytes must be a multiple of the page size, "
        "at most 64 MiB"));
  if (nice < -20 || nice > 19)
    return absl::InvalidArgumentError("buffer warm-up nice value must be in [-20, 19]");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BufferWarmer>> BufferWarmer::Create(
    const BufferWarmerConfig& config) {
  if (absl::Status st = config.Validate(); !st.ok()) return st;
  InstallSigbusGuard();  // the touch runs under GuardedRun
  std::unique_ptr<BufferWarmer> w(new BufferWarmer(config));
  if (config.enabled)
    for (int i = 0; i < config.threads; ++i) w->threads_.emplace_back([p = w.get()] { p->Loop(); });
  return w;
}

BufferWarmer::~BufferWarmer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void BufferWarmer::Loop() {
  pthread_setname_np(pthread_self(), "kvtier-warm");
  // Per-thread nice (Linux): warming must not take CPU from copies.
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), config_.nice) != 0)
    spdlog::debug("buffer warm-up: setpriority failed: {}", strerror(errno));
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !ready_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
    }
    Step();
    sched_yield();  // between chunks, anyone runnable goes first
  }
}

void BufferWarmer::Warm(tiers::NamespaceId ns, const std::shared_ptr<ClientBuffer>& buffer) {
  if (!config_.enabled || buffer == nullptr) return;
  auto [base, size] = buffer->HostMapping();
  if (base == nullptr || size == 0) return;
  auto job = std::make_shared<Job>();
  job->buffer = buffer;
  job->base = base;
  job->size = size;
  absl::MutexLock lock(&mu_);
  Tenant& t = tenants_[ns];
  DropEnded(t);  // keeps the queue as short as the tenant's live registrations
  t.jobs.push_back(std::move(job));
  t.stats.pending_bytes += size;
  Requeue(ns, t);
}

void BufferWarmer::Cancel(tiers::NamespaceId ns, const ClientBuffer* buffer) {
  absl::MutexLock lock(&mu_);
  auto it = tenants_.find(ns);
  if (it == tenants_.end()) return;
  Tenant& t = it->second;
  for (size_t i = 0; i < t.jobs.size(); ++i) {
    const Job& job = *t.jobs[i];
    if (job.cancelled) continue;
    // By address, only while the buffer is alive: a freed buffer's job has
    // an expired pointer, so a new buffer at the same address never matches.
    std::shared_ptr<ClientBuffer> b = job.buffer.lock();
    if (b.get() != buffer) continue;
    CancelJob(t, i);
    return;
  }
}

WarmStats BufferWarmer::Stats(tiers::NamespaceId ns) {
  absl::MutexLock lock(&mu_);
  auto it = tenants_.find(ns);
  if (it == tenants_.end()) return {};
  DropEnded(it->second);
  return it->second.stats;
}

void BufferWarmer::CancelJob(Tenant& t, size_t index) {
  Job& job = *t.jobs[index];
  t.stats.pending_bytes -= job.size - job.done;
  ++t.stats.cancelled;
  // The job a thread is on stays until that thread drops it (Finish).
  if (index == 0 && t.busy) job.cancelled = true;
  else t.jobs.erase(t.jobs.begin() + static_cast<ptrdiff_t>(index));
}

void BufferWarmer::DropEnded(Tenant& t) {
  for (size_t i = t.jobs.size(); i-- > 0;)
    if (!t.jobs[i]->cancelled && t.jobs[i]->buffer.expired()) CancelJob(t, i);
}

void BufferWarmer::Requeue(tiers::NamespaceId ns, Tenant& t) {
  if (t.busy || t.in_ring || t.jobs.empty()) return;
  ready_.push_back(ns);
  t.in_ring = true;
}

std::shared_ptr<BufferWarmer::Job> BufferWarmer::Take(tiers::NamespaceId* ns, uint64_t* begin) {
  absl::MutexLock lock(&mu_);
  while (!ready_.empty()) {
    *ns = ready_.front();
    ready_.pop_front();
    Tenant& t = tenants_[*ns];
    t.in_ring = false;
    if (t.jobs.empty()) continue;  // cancelled since it was listed
    t.busy = true;
    *begin = t.jobs.front()->done;
    return t.jobs.front();
  }
  return nullptr;
}

bool BufferWarmer::Step() {
  tiers::NamespaceId ns = 0;
  uint64_t begin = 0;
  std::shared_ptr<Job> job = Take(&ns, &begin);
  if (job == nullptr) return false;
  const uint64_t end = std::min(job->size, begin + config_.chunk_bytes);
  ChunkResult r;
  {
    // Holding the buffer keeps it mapped for this chunk only; if this is
    // the last reference, the munmap happens here, off the frontend.
    std::shared_ptr<ClientBuffer> buffer = job->buffer.lock();
    if (buffer != nullptr) r = WarmChunk(job->base, begin, end);
    else r.ok = false;  // ended: Finish counts it cancelled
    // Chunks of a job run in order from 0: all of [0, end) is done, and
    // copies there can use the mapping (ClientBuffer::Write).
    if (r.ok && buffer != nullptr) buffer->MarkWarm(end);
  }
  Finish(ns, *job, begin, r);
  return true;
}

void BufferWarmer::Finish(tiers::NamespaceId ns, Job& job, uint64_t begin, const ChunkResult& r) {
  absl::MutexLock lock(&mu_);
  Tenant& t = tenants_[ns];
  t.busy = false;
  t.stats.warmed_bytes += r.warmed;
  t.stats.skipped_bytes += r.skipped;
  if (job.cancelled) {
    t.jobs.pop_front();  // counted by Cancel
  } else if (job.buffer.expired()) {
    CancelJob(t, 0);
  } else if (!r.ok) {
    spdlog::info("buffer warm-up stopped at byte {} of {}: the client's object shrank", begin,
                 job.size);
    t.stats.pending_bytes -= job.size - job.done;
    ++t.stats.failed;
    t.jobs.pop_front();
  } else {
    const uint64_t end = begin + r.warmed + r.skipped;
    t.stats.pending_bytes -= end - job.done;
    job.done = end;
    if (job.done == job.size) {
      ++t.stats.buffers;
      t.jobs.pop_front();
    }
  }
  Requeue(ns, t);
}

BufferWarmer::ChunkResult BufferWarmer::WarmChunk(uint8_t* base, uint64_t begin, uint64_t end) {
  ChunkResult r;
  const uint64_t page = PageSize(), len = end - begin;
  uint8_t* p = base + begin;
  const size_t pages = (len + page - 1) / page;
  // The object's own pages, not our mapping's: a page the client never
  // wrote is a hole, and touching it would allocate the client's memory on
  // the daemon's account (SECURITY.md, hole 4).
  std::vector<unsigned char> resident(pages, 1);
  if (config_.check_residency && mincore(p, len, resident.data()) != 0) return {0, 0, false};
  KVTIER_SYNC_POINT("buffer_warmer.after_residency");
  for (size_t i = 0; i < pages;) {
    const bool in = resident[i] & 1;
    size_t j = i;
    while (j < pages && (resident[j] & 1) == in) ++j;
    const uint64_t a = i * page, b = std::min<uint64_t>(j * page, len);
    if (!in) {
      r.skipped += b - a;
    } else {
      if (!Touch(p + a, b - a)) return {r.warmed, r.skipped, false};
      r.warmed += b - a;
    }
    i = j;
  }
  return r;
}

bool BufferWarmer::Touch(uint8_t* begin, uint64_t bytes) {
  if (config_.use_populate && g_populate_supported.load(std::memory_order_relaxed) &&
      madvise(begin, bytes, MADV_POPULATE_WRITE) != 0) {
    if (errno == EFAULT) return false;  // a SIGBUS would follow: truncated
    if (errno == EINVAL && g_populate_supported.exchange(false))
      spdlog::info("buffer warm-up: no MADV_POPULATE_WRITE (Linux < 5.14); touching pages only");
  }
  // A read, never a write: the client may be writing these bytes right now.
  // Reading a shared writable shmem mapping installs writable entries.
  const uint64_t page = PageSize();
  return GuardedRun([&] {
    for (uint64_t off = 0; off < bytes; off += page)
      (void)*static_cast<volatile const uint8_t*>(begin + off);
  });
}

}  // namespace kvtier::daemon
