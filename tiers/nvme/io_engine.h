// Internal to tiers/nvme: the asynchronous engines behind the file device
// (io_uring, thread-pool pread/pwrite) and the errno -> Status mapping they
// share. Not for use outside tiers/nvme.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tiers/nvme/device.h"

namespace kvtier::tiers::nvme::internal {

// "read" or "write" of n bytes at offset on `what`, failed with errno `err`:
// ENOSPC/EDQUOT -> ResourceExhausted, EIO -> DataLoss, EACCES/EPERM ->
// PermissionDenied, EINVAL -> InvalidArgument, else absl::ErrnoToStatusCode.
absl::Status IoErrnoStatus(int err, const std::string& what, bool write, uint64_t offset,
                           uint64_t n);
// A transfer that stopped making progress after `done` of `n` bytes.
absl::Status ShortIoStatus(const std::string& what, bool write, uint64_t offset, uint64_t n,
                           uint64_t done);

// One asynchronous I/O, owned by the engine from Submit() to completion.
struct IoRequest {
  bool write = false;
  uint64_t offset = 0;
  char* buf = nullptr;
  uint64_t n = 0;
  uint64_t done = 0;   // bytes transferred so far (short transfers resume)
  int retries = 0;     // EAGAIN/EINTR resubmissions
  int buf_index = -1;  // io_uring registered-buffer slot, -1 = none
  IoClass cls = IoClass::kDemand;  // queue order and share (FileDeviceConfig)
  IoUrgency urgency;               // once set, a queued prefetch is served as demand
  IoCallback cb;
};

// Synchronous positional I/O of a whole range; loops over short transfers and
// EINTR. Used by the sync path and the thread-pool engine.
absl::Status PositionalIo(int fd, const std::string& what, bool write, uint64_t offset,
                          char* buf, uint64_t n);

class IoEngine {
 public:
  virtual ~IoEngine() = default;  // drains in-flight I/O, joins threads
  virtual void Submit(std::unique_ptr<IoRequest> req) = 0;
  virtual absl::Status RegisterBufferRegion(void* base, uint64_t len) {
    return absl::OkStatus();
  }
  virtual std::string Describe() const = 0;
};

// `what` names the file in error messages. The fd stays owned by the caller
// and must outlive the engine.
absl::StatusOr<std::unique_ptr<IoEngine>> CreateUringEngine(int fd, const std::string& what,
                                                            const FileDeviceConfig& config);
std::unique_ptr<IoEngine> CreateThreadPoolEngine(int fd, const std::string& what,
                                                 const FileDeviceConfig& config);

}  // namespace kvtier::tiers::nvme::internal
