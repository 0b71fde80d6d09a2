// The io_uring engine of the file device. One ring per I/O thread; the ring,
// its fixed file and its registered buffers belong to that thread alone
// (IORING_SETUP_SINGLE_ISSUER where the kernel has it). Callers queue
// requests; the thread moves the queue into SQEs by I/O class (demand, then
// prefetch, then write-back, each lower class kept to its share of the
// depth: FileDeviceConfig), submits them in one io_uring_submit_and_wait,
// reaps completions and runs the callbacks. An
// eventfd read kept armed in the ring wakes the thread when a caller queues
// work while it sleeps.
#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "kvtier/test_hooks.h"
#include "tiers/nvme/io_engine.h"

namespace kvtier::tiers::nvme::internal {
namespace {

constexpr unsigned kMaxBufferSlots = 64;      // registered-buffer table per ring
constexpr uint64_t kMaxSlotBytes = 1ull << 30;  // the kernel's limit per buffer
constexpr uint64_t kMaxSqeBytes = 1ull << 30;   // longer I/O continues as "short"
constexpr int kMaxRetries = 8;                  // EAGAIN/EINTR resubmissions

// ioprio of an I/O class: best effort (IOPRIO_CLASS_BE, which needs no
// privilege), levels 0 (highest), 4 and 7. <linux/ioprio.h> is not in every
// kernel's uapi headers, so the encoding is spelled out.
uint16_t IoPriority(IoClass c) {
  constexpr uint16_t kClassShift = 13, kClassBestEffort = 2;
  static constexpr uint16_t kLevel[kIoClasses] = {0, 4, 7};
  return static_cast<uint16_t>(kClassBestEffort << kClassShift) | kLevel[static_cast<size_t>(c)];
}

absl::Status UringError(int err, absl::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(what, ": ", std::strerror(err)));
}

// One ring and the thread that owns it.
class Ring {
 public:
  Ring(int fd, const std::string& what, const FileDeviceConfig& config)
      : fd_(fd),
        what_(what),
        depth_(config.queue_depth),
        prefetch_cap_(Cap(config.queue_depth, config.prefetch_share)),
        writeback_cap_(Cap(config.queue_depth, config.writeback_share)) {}
  ~Ring() { Stop(); }

  // Starts the thread, which sets the ring up; returns its verdict.
  absl::Status Start() {
    thread_ = std::thread([this] { Run(); });
    started_.WaitForNotification();
    if (!init_status_.ok()) thread_.join();
    return init_status_;
  }

  void Stop() {
    if (!thread_.joinable()) return;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    Wake();
    thread_.join();
  }

  void Submit(std::unique_ptr<IoRequest> req) {
    bool wake;
    {
      absl::MutexLock lock(&mu_);
      pending_.push_back(std::move(req));
      // The ring's own thread looks at the queue again before it sleeps.
      wake = need_wake_ && tls_ring_ != this;
      if (wake) need_wake_ = false;
    }
    if (wake) Wake();
  }

  // Runs `fn` on the ring thread between batches and returns its result.
  int RunOnThread(std::function<int(io_uring*)> fn) {
    absl::Notification done;
    int result = 0;
    {
      absl::MutexLock lock(&mu_);
      control_.push_back([&] {
        result = fn(&ring_);
        done.Notify();
      });
      need_wake_ = false;
    }
    Wake();
    done.WaitForNotification();
    return result;
  }

  const std::string& setup() const { return setup_; }
  bool fixed_file() const { return fixed_file_; }
  bool sparse_buffers() const { return sparse_buffers_; }

 private:
  absl::Status Init();
  void Run();
  void ArmWake();
  static uint32_t Cap(uint32_t depth, double share) {
    return std::max<uint32_t>(1, static_cast<uint32_t>(depth * share));
  }
  // The queued request to start next, by class (FileDeviceConfig), or
  // null when none may start now.
  IoRequest* TakeNext();
  // Queued prefetch reads a waiter has joined since (their IoUrgency is
  // set) move to the demand queue, keeping their order: from now on they
  // are demand I/O, in order, priority and share.
  void EscalateJoined();
  bool BacklogEmpty() const {
    for (const auto& q : backlog_)
      if (!q.empty()) return false;
    return true;
  }
  void Prep(io_uring_sqe* sqe, IoRequest* req);
  void Reap();
  void Complete(IoRequest* req, int res);
  void Wake() {
    uint64_t one = 1;
    while (::write(efd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
  }

  static thread_local Ring* tls_ring_;

  const int fd_;
  const std::string what_;
  const uint32_t depth_;
  const uint32_t prefetch_cap_;   // prefetch I/Os in flight, at most
  const uint32_t writeback_cap_;  // write-back I/Os in flight while reads run or wait
  io_uring ring_{};
  int efd_ = -1;
  uint64_t wake_buf_ = 0;  // target of the armed eventfd read
  bool fixed_file_ = false;
  bool sparse_buffers_ = false;
  std::string setup_;
  absl::Status init_status_;
  absl::Notification started_;
  std::thread thread_;

  // Ring-thread state.
  // Taken from pending_, not yet in an SQE, one queue per IoClass.
  std::deque<IoRequest*> backlog_[kIoClasses];
  uint32_t inflight_ = 0;  // requests in SQEs, not yet completed
  uint32_t inflight_by_[kIoClasses] = {};
  uint64_t escalated_ = 0;  // prefetch reads moved to demand (EscalateJoined)
  std::vector<std::pair<uint64_t, int>> reaped_;

  absl::Mutex mu_;
  std::vector<std::unique_ptr<IoRequest>> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> control_ ABSL_GUARDED_BY(mu_);
  bool need_wake_ ABSL_GUARDED_BY(mu_) = false;  // the thread may sleep
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

thread_local Ring* Ring::tls_ring_ = nullptr;

absl::Status Ring::Init() {
  efd_ = ::eventfd(0, EFD_CLOEXEC);
  if (efd_ < 0) return UringError(errno, "eventfd");
  // Newest first: single issuer + deferred task work (6.1), cooperative task
  // run (5.19), plain.
  struct Try {
    unsigned flags;
    const char* name;
  };
  const Try tries[] = {
      {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, "single-issuer, defer-taskrun"},
      {IORING_SETUP_COOP_TASKRUN, "coop-taskrun"},
      {0, "default"}};
  int rc = -EINVAL;
  for (const Try& t : tries) {
    io_uring_params params{};
    params.flags = t.flags;
    rc = io_uring_queue_init_params(depth_ + 1, &ring_, &params);
    if (rc == 0) {
      setup_ = t.name;
      break;
    }
    if (rc != -EINVAL) break;  // EPERM/ENOSYS/ENOMEM: io_uring itself is refused
  }
  if (rc < 0) {
    ::close(efd_);
    efd_ = -1;
    return UringError(-rc, "io_uring_queue_init");
  }
  fixed_file_ = io_uring_register_files(&ring_, &fd_, 1) == 0;
  sparse_buffers_ = io_uring_register_buffers_sparse(&ring_, kMaxBufferSlots) == 0;
  return absl::OkStatus();
}

void Ring::Run() {
  tls_ring_ = this;
  init_status_ = Init();
  started_.Notify();
  if (!init_status_.ok()) return;
  ArmWake();
  std::vector<std::unique_ptr<IoRequest>> taken;
  std::vector<std::function<void()>> controls;
  for (;;) {
    bool stop;
    {
      absl::MutexLock lock(&mu_);
      taken.swap(pending_);
      controls.swap(control_);
      stop = stopping_;
      need_wake_ = true;  // from here on the thread may sleep in the kernel
    }
    for (auto& c : controls) c();
    controls.clear();
    for (auto& r : taken) {
      const auto c = static_cast<size_t>(r->cls);
      backlog_[c < kIoClasses ? c : 0].push_back(r.release());
    }
    taken.clear();
    EscalateJoined();
    KVTIER_SYNC_POINT("nvme.ring.before_dispatch");
    while (inflight_ < depth_) {
      IoRequest* req = TakeNext();
      if (req == nullptr) break;
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {  // SQ full: starts after this submit
        backlog_[static_cast<size_t>(req->cls)].push_front(req);
        break;
      }
      Prep(sqe, req);
      ++inflight_;
      ++inflight_by_[static_cast<size_t>(req->cls)];
      // Tests read the in-flight count per class (uint32_t[kIoClasses]).
      KVTIER_SYNC_POINT_CALLBACK("nvme.ring.started", inflight_by_);
    }
    if (stop && inflight_ == 0 && BacklogEmpty()) break;
    int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      // Nothing sane left to do with this ring: fail what is queued. Requests
      // already in the kernel still complete through Reap.
      for (auto& q : backlog_) {
        while (!q.empty()) {
          IoRequest* req = q.front();
          q.pop_front();
          ++inflight_;
          ++inflight_by_[static_cast<size_t>(req->cls)];
          Complete(req, rc);
        }
      }
    }
    Reap();
  }
  io_uring_queue_exit(&ring_);  // cancels the armed eventfd read
  ::close(efd_);
}

void Ring::ArmWake() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  io_uring_prep_read(sqe, efd_, &wake_buf_, sizeof(wake_buf_), 0);
  io_uring_sqe_set_data(sqe, &wake_buf_);
}

void Ring::EscalateJoined() {
  auto& prefetch = backlog_[static_cast<size_t>(IoClass::kPrefetch)];
  auto& demand = backlog_[static_cast<size_t>(IoClass::kDemand)];
  const uint64_t before = escalated_;
  for (auto it = prefetch.begin(); it != prefetch.end();) {
    if (!Urgent((*it)->urgency)) {
      ++it;
      continue;
    }
    (*it)->cls = IoClass::kDemand;
    demand.push_back(*it);
    it = prefetch.erase(it);
    ++escalated_;
  }
  // Tests read the running count of escalated requests (uint64_t).
  if (escalated_ != before) KVTIER_SYNC_POINT_CALLBACK("nvme.ring.escalated", &escalated_);
}

IoRequest* Ring::TakeNext() {
  auto pop = [](std::deque<IoRequest*>& q) {
    IoRequest* r = q.front();
    q.pop_front();
    return r;
  };
  auto& demand = backlog_[static_cast<size_t>(IoClass::kDemand)];
  auto& prefetch = backlog_[static_cast<size_t>(IoClass::kPrefetch)];
  auto& writeback = backlog_[static_cast<size_t>(IoClass::kWriteback)];
  if (!demand.empty()) return pop(demand);
  if (!prefetch.empty() && inflight_by_[static_cast<size_t>(IoClass::kPrefetch)] < prefetch_cap_)
    return pop(prefetch);
  if (writeback.empty()) return nullptr;
  // Reads running or waiting: write-back keeps to its share of the queue.
  const bool reads = !prefetch.empty() || inflight_by_[static_cast<size_t>(IoClass::kDemand)] > 0 ||
                     inflight_by_[static_cast<size_t>(IoClass::kPrefetch)] > 0;
  if (reads && inflight_by_[static_cast<size_t>(IoClass::kWriteback)] >= writeback_cap_)
    return nullptr;
  return pop(writeback);
}

void Ring::Prep(io_uring_sqe* sqe, IoRequest* req) {
  const int fd = fixed_file_ ? 0 : fd_;
  char* p = req->buf + req->done;
  const unsigned len = static_cast<unsigned>(std::min(req->n - req->done, kMaxSqeBytes));
  const uint64_t off = req->offset + req->done;
  if (req->buf_index >= 0) {
    if (req->write) {
      io_uring_prep_write_fixed(sqe, fd, p, len, off, req->buf_index);
    } else {
      io_uring_prep_read_fixed(sqe, fd, p, len, off, req->buf_index);
    }
  } else if (req->write) {
    io_uring_prep_write(sqe, fd, p, len, off);
  } else {
    io_uring_prep_read(sqe, fd, p, len, off);
  }
  if (fixed_file_) sqe->flags |= IOSQE_FIXED_FILE;
  // The class as a best-effort I/O priority too, for block schedulers that
  // honour it (mq-deadline, bfq): it orders what is already in the kernel.
  sqe->ioprio = IoPriority(req->cls);
  io_uring_sqe_set_data(sqe, req);
}

void Ring::Reap() {
  unsigned head;
  unsigned count = 0;
  io_uring_cqe* cqe;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    reaped_.emplace_back(cqe->user_data, cqe->res);
    ++count;
  }
  io_uring_cq_advance(&ring_, count);
  for (auto [data, res] : reaped_) {
    if (data == reinterpret_cast<uint64_t>(&wake_buf_)) {
      ArmWake();
    } else {
      Complete(reinterpret_cast<IoRequest*>(data), res);
    }
  }
  reaped_.clear();
}

void Ring::Complete(IoRequest* req, int res) {
  --inflight_;
  --inflight_by_[static_cast<size_t>(req->cls)];
  std::deque<IoRequest*>& backlog = backlog_[static_cast<size_t>(req->cls)];
  absl::Status status;
  if (res < 0) {
    const int err = -res;
    if ((err == EAGAIN || err == EINTR) && req->retries++ < kMaxRetries) {
      backlog.push_front(req);
      return;
    }
    status = IoErrnoStatus(err, what_, req->write, req->offset + req->done, req->n - req->done);
  } else if (res == 0) {
    status = ShortIoStatus(what_, req->write, req->offset, req->n, req->done);
  } else {
    req->done += static_cast<uint64_t>(res);
    if (req->done < req->n) {  // short transfer: continue with the rest
      backlog.push_front(req);
      return;
    }
  }
  IoCallback cb = std::move(req->cb);
  delete req;
  cb(std::move(status));
}

class UringEngine final : public IoEngine {
 public:
  UringEngine(int fd, const std::string& what, const FileDeviceConfig& config) {
    for (uint32_t i = 0; i < config.io_threads; ++i) {
      rings_.push_back(std::make_unique<Ring>(fd, what, config));
    }
    depth_ = config.queue_depth;
  }
  ~UringEngine() override {
    for (auto& r : rings_) r->Stop();  // each drains its in-flight I/O
  }

  absl::Status Start() {
    for (auto& r : rings_) {
      absl::Status s = r->Start();
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  void Submit(std::unique_ptr<IoRequest> req) override {
    req->buf_index = FindSlot(req->buf, req->n);
    uint64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    rings_[i % rings_.size()]->Submit(std::move(req));
  }

  absl::Status RegisterBufferRegion(void* base, uint64_t len) override;
  std::string Describe() const override;

 private:
  struct Slot {
    uintptr_t base;
    uint64_t len;
    int index;
  };
  int FindSlot(const char* buf, uint64_t n) const {
    const auto b = reinterpret_cast<uintptr_t>(buf);
    absl::ReaderMutexLock lock(&reg_mu_);
    for (const Slot& s : slots_) {
      if (b >= s.base && b - s.base <= s.len && n <= s.len - (b - s.base)) return s.index;
    }
    return -1;
  }

  std::vector<std::unique_ptr<Ring>> rings_;
  uint32_t depth_ = 0;
  std::atomic<uint64_t> next_{0};
  mutable absl::Mutex reg_mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(reg_mu_);
  std::string buffer_note_ ABSL_GUARDED_BY(reg_mu_);  // why a region was not registered
};

absl::Status UringEngine::RegisterBufferRegion(void* base, uint64_t len) {
  absl::MutexLock lock(&reg_mu_);
  if (!rings_[0]->sparse_buffers()) {
    buffer_note_ = "registered buffers unsupported by the kernel";
    return absl::OkStatus();
  }
  std::vector<iovec> iovs;
  for (uint64_t off = 0; off < len; off += kMaxSlotBytes) {
    iovs.push_back({static_cast<char*>(base) + off, std::min(len - off, kMaxSlotBytes)});
  }
  const unsigned first = slots_.empty() ? 0 : slots_.back().index + 1;
  if (first + iovs.size() > kMaxBufferSlots) {
    buffer_note_ = absl::StrCat("region of ", len, " bytes not registered: out of slots");
    return absl::OkStatus();
  }
  std::vector<__u64> tags(iovs.size(), 0);
  for (auto& ring : rings_) {
    int rc = ring->RunOnThread([&](io_uring* r) {
      return io_uring_register_buffers_update_tag(r, first, iovs.data(), tags.data(),
                                                  static_cast<unsigned>(iovs.size()));
    });
    if (rc < 0) {
      // Best effort: plain I/O still works. ENOMEM is usually RLIMIT_MEMLOCK.
      buffer_note_ = absl::StrCat("region of ", len,
                                  " bytes not registered: ", std::strerror(-rc));
      return absl::OkStatus();
    }
  }
  for (size_t i = 0; i < iovs.size(); ++i) {
    slots_.push_back({reinterpret_cast<uintptr_t>(iovs[i].iov_base), iovs[i].iov_len,
                      static_cast<int>(first + i)});
  }
  return absl::OkStatus();
}

std::string UringEngine::Describe() const {
  const Ring& r = *rings_[0];
  absl::ReaderMutexLock lock(&reg_mu_);
  std::string s = absl::StrFormat("io_uring: %d ring%s x %u deep (%s)%s, %d registered buffer%s",
                                  rings_.size(), rings_.size() == 1 ? "" : "s", depth_,
                                  r.setup(), r.fixed_file() ? ", fixed file" : "",
                                  slots_.size(), slots_.size() == 1 ? "" : "s");
  if (!buffer_note_.empty()) absl::StrAppend(&s, " (", buffer_note_, ")");
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<IoEngine>> CreateUringEngine(int fd, const std::string& what,
                                                            const FileDeviceConfig& config) {
  auto engine = std::make_unique<UringEngine>(fd, what, config);
  absl::Status s = engine->Start();
  if (!s.ok()) return s;
  return std::unique_ptr<IoEngine>(std::move(engine));
}

}  // namespace kvtier::tiers::nvme::internal
