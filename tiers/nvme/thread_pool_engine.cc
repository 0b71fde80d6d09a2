// The fallback engine: pread/pwrite on a pool of worker threads, for kernels
// or sandboxes where io_uring is refused (seccomp, io_uring_disabled).
#include <algorithm>
#include <memory>

#include "absl/strings/str_format.h"
#include "tiers/nvme/io_engine.h"
#include "tiers/nvme/worker_pool.h"

namespace kvtier::tiers::nvme::internal {
namespace {

class ThreadPoolEngine final : public IoEngine {
 public:
  ThreadPoolEngine(int fd, const std::string& what, uint32_t workers)
      : fd_(fd), what_(what), workers_(workers), pool_(workers) {}

  void Submit(std::unique_ptr<IoRequest> req) override {
    pool_.Post([this, r = std::shared_ptr<IoRequest>(std::move(req))] {
      absl::Status s = PositionalIo(fd_, what_, r->write, r->offset, r->buf, r->n);
      r->cb(std::move(s));
    });
  }

  std::string Describe() const override {
    return absl::StrFormat("thread-pool pread/pwrite: %u workers", workers_);
  }

 private:
  const int fd_;
  const std::string what_;
  const uint32_t workers_;
  WorkerPool pool_;  // last: drained and joined first
};

}  // namespace

std::unique_ptr<IoEngine> CreateThreadPoolEngine(int fd, const std::string& what,
                                                 const FileDeviceConfig& config) {
  uint32_t workers = std::max(config.io_threads, std::min<uint32_t>(config.queue_depth, 16));
  return std::make_unique<ThreadPoolEngine>(fd, what, workers);
}

}  // namespace kvtier::tiers::nvme::internal
