// Device: the checked public I/O (alignment, bounds, counters) every
// implementation shares, and the errno -> Status mapping of the engines.
#include "tiers/nvme/device.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tiers/nvme/io_engine.h"

namespace kvtier::tiers::nvme {

absl::Status Device::Check(const char* op, uint64_t offset, const void* buf, uint64_t n) {
  absl::Status status;
  if (n == 0 || n % kBlockSize != 0) {
    status = absl::InvalidArgumentError(absl::StrFormat(
        "%s: length %u is not a positive multiple of %u", op, n, kBlockSize));
  } else if (offset % kBlockSize != 0) {
    status = absl::InvalidArgumentError(
        absl::StrFormat("%s: offset %u is not a multiple of %u", op, offset, kBlockSize));
  } else if (reinterpret_cast<uintptr_t>(buf) % kBlockSize != 0) {
    status = absl::InvalidArgumentError(absl::StrFormat(
        "%s: buffer %p is not %u-byte aligned", op, buf, kBlockSize));
  } else if (offset > size_ || n > size_ - offset) {
    status = absl::OutOfRangeError(absl::StrFormat(
        "%s: [%u, %u) is outside the device (%u bytes)", op, offset, offset + n, size_));
  }
  if (!status.ok()) rejected_.fetch_add(1, std::memory_order_relaxed);
  return status;
}

void Device::Begin(bool write) {
  (write ? writes_ : reads_).fetch_add(1, std::memory_order_relaxed);
  uint64_t now = inflight_.fetch_add(1, std::memory_order_relaxed) + 1;
  uint64_t max = max_inflight_.load(std::memory_order_relaxed);
  while (now > max &&
         !max_inflight_.compare_exchange_weak(max, now, std::memory_order_relaxed)) {
  }
}

void Device::End(bool write, uint64_t n, const absl::Status& status) {
  if (status.ok()) {
    (write ? bytes_written_ : bytes_read_).fetch_add(n, std::memory_order_relaxed);
  } else {
    (write ? write_errors_ : read_errors_).fetch_add(1, std::memory_order_relaxed);
  }
  inflight_.fetch_sub(1, std::memory_order_relaxed);
}

absl::Status Device::Read(uint64_t offset, void* buf, uint64_t n) {
  absl::Status status = Check("read", offset, buf, n);
  if (!status.ok()) return status;
  Begin(false);
  status = ReadImpl(offset, buf, n);
  End(false, n, status);
  return status;
}

absl::Status Device::Write(uint64_t offset, const void* buf, uint64_t n) {
  absl::Status status = Check("write", offset, buf, n);
  if (!status.ok()) return status;
  Begin(true);
  status = WriteImpl(offset, buf, n);
  End(true, n, status);
  return status;
}

IoCallback Device::Timed(IoCallback cb) {
  const size_t c = static_cast<size_t>(CurrentIoClass());
  const auto start = std::chrono::steady_clock::now();
  return [this, c, start, cb = std::move(cb)](absl::Status s) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - start);
    class_ios_[c].fetch_add(1, std::memory_order_relaxed);
    class_us_[c].fetch_add(static_cast<uint64_t>(us.count()), std::memory_order_relaxed);
    cb(std::move(s));
  };
}

void Device::ReadAsync(uint64_t offset, void* buf, uint64_t n, IoCallback cb) {
  absl::Status status = Check("read", offset, buf, n);
  if (!status.ok()) return cb(std::move(status));
  Begin(false);
  cb = Timed(std::move(cb));
  ReadAsyncImpl(offset, buf, n, [this, n, cb = std::move(cb)](absl::Status s) {
    End(false, n, s);
    cb(std::move(s));
  });
}

void Device::WriteAsync(uint64_t offset, const void* buf, uint64_t n, IoCallback cb) {
  absl::Status status = Check("write", offset, buf, n);
  if (!status.ok()) return cb(std::move(status));
  Begin(true);
  cb = Timed(std::move(cb));
  WriteAsyncImpl(offset, buf, n, [this, n, cb = std::move(cb)](absl::Status s) {
    End(true, n, s);
    cb(std::move(s));
  });
}

absl::Status Device::Flush() { return FlushImpl(); }

absl::Status Device::RegisterBufferRegion(void* base, uint64_t len) {
  if (base == nullptr || len == 0) {
    return absl::InvalidArgumentError("RegisterBufferRegion: empty region");
  }
  return absl::OkStatus();
}

DeviceStats Device::stats() const {
  DeviceStats s;
  s.reads = reads_.load(std::memory_order_relaxed);
  s.writes = writes_.load(std::memory_order_relaxed);
  s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  s.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  s.read_errors = read_errors_.load(std::memory_order_relaxed);
  s.write_errors = write_errors_.load(std::memory_order_relaxed);
  s.rejected = rejected_.load(std::memory_order_relaxed);
  s.inflight = inflight_.load(std::memory_order_relaxed);
  s.max_inflight = max_inflight_.load(std::memory_order_relaxed);
  for (size_t c = 0; c < kIoClasses; ++c) {
    s.class_ios[c] = class_ios_[c].load(std::memory_order_relaxed);
    s.class_latency_us[c] = class_us_[c].load(std::memory_order_relaxed);
  }
  return s;
}

namespace internal {

absl::Status IoErrnoStatus(int err, const std::string& what, bool write, uint64_t offset,
                           uint64_t n) {
  std::string msg = absl::StrFormat("%s: %s of %u bytes at offset %u failed: %s (errno %d)",
                                    what, write ? "write" : "read", n, offset,
                                    std::strerror(err), err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    case EIO:
      return absl::DataLossError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case EINVAL:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::Status(absl::ErrnoToStatusCode(err), msg);
  }
}

absl::Status ShortIoStatus(const std::string& what, bool write, uint64_t offset, uint64_t n,
                           uint64_t done) {
  return absl::DataLossError(absl::StrFormat(
      "%s: short %s at offset %u: %u of %u bytes transferred, then no progress%s", what,
      write ? "write" : "read", offset, done, n, write ? "" : " (past end of file?)"));
}

absl::Status PositionalIo(int fd, const std::string& what, bool write, uint64_t offset,
                          char* buf, uint64_t n) {
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = write ? ::pwrite(fd, buf + done, n - done, offset + done)
                      : ::pread(fd, buf + done, n - done, offset + done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return IoErrnoStatus(errno, what, write, offset + done, n - done);
    }
    if (r == 0) return ShortIoStatus(what, write, offset, n, done);
    done += static_cast<uint64_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace kvtier::tiers::nvme
