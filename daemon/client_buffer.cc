// Mapping client shm buffers, writing into them before the mapping is warm,
// and surviving their truncation.
#include "daemon/client_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

#ifndef RWF_NOAPPEND
#define RWF_NOAPPEND 0x00000020  // Linux 6.9
#endif

namespace kvtier::daemon {
namespace {

constexpr uint64_t kHugetlbfsMagic = 0x958458f6;  // HUGETLBFS_MAGIC (linux/magic.h)

// Descriptors kept for Write, against their limit (a quarter of the soft
// RLIMIT_NOFILE unless a test set one).
std::atomic<int> g_kept_fds{0};
std::atomic<int> g_fd_limit{-1};
// Cleared when pwritev2 rejects RWF_NOAPPEND (Linux < 6.9): without it a
// client that sets O_APPEND on its descriptor (the daemon's is a dup of the
// same open file) would make every write grow its object.
std::atomic<bool> g_noappend_supported{true};

int FdLimit() {
  int limit = g_fd_limit.load(std::memory_order_relaxed);
  if (limit >= 0) return limit;
  rlimit rl{};
  limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
              ? static_cast<int>(std::min<rlim_t>(rl.rlim_cur / 4, 1 << 20))
              : 256;
  g_fd_limit.store(limit, std::memory_order_relaxed);
  return limit;
}

}  // namespace

void ClientBuffer::set_fd_limit(int limit) { g_fd_limit.store(limit, std::memory_order_relaxed); }

void ClientBuffer::KeepFd(int fd) {
  if (!g_noappend_supported.load(std::memory_order_relaxed)) return;
  if (g_kept_fds.fetch_add(1, std::memory_order_relaxed) >= FdLimit()) {
    g_kept_fds.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  fd_ = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (fd_ < 0) g_kept_fds.fetch_sub(1, std::memory_order_relaxed);
}

void ClientBuffer::MarkWarm(uint64_t end) {
  end = std::min(end, size_);
  uint64_t cur = warm_end_.load(std::memory_order_relaxed);
  while (cur < end && !warm_end_.compare_exchange_weak(cur, end, std::memory_order_release)) {
  }
}

bool ClientBuffer::Write(uint64_t offset, const uint8_t* src, uint64_t n) {
  uint64_t done = 0;
  if (fd_ >= 0 && offset + n > warm_end_.load(std::memory_order_acquire) &&
      fd_usable_.load(std::memory_order_relaxed)) {
    const int64_t w = WriteThroughFd(offset, src, n);
    if (w < 0) return false;
    done = static_cast<uint64_t>(w);
    if (done == n) return true;
  }
  return GuardedRun([&] { std::memcpy(data_ + offset + done, src + done, n - done); });
}

int64_t ClientBuffer::WriteThroughFd(uint64_t offset, const uint8_t* src, uint64_t n) {
  // A write past the end would grow the object where the mapping would
  // fault: a shrunk object is refused here as GuardedRun refuses it. (One
  // shrunk between this check and the write grows back to at most the
  // registered size, the bytes its owner registered.)
  struct stat st;
  if (fstat(fd_, &st) != 0) return 0;
  if (static_cast<uint64_t>(st.st_size) < offset + n) return -1;
  uint64_t done = 0;
  while (done < n) {
    iovec iov{const_cast<uint8_t*>(src + done), n - done};
    const ssize_t w = pwritev2(fd_, &iov, 1, static_cast<off_t>(offset + done), RWF_NOAPPEND);
    if (w > 0) {
      done += static_cast<uint64_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    // The rest goes through the mapping: no RWF_NOAPPEND (EINVAL or
    // EOPNOTSUPP before Linux 6.9), a sealed object (EPERM), a file system
    // without write() (hugetlbfs), or anything else.
    const int err = w < 0 ? errno : 0;
    if ((err == EINVAL || err == EOPNOTSUPP) && g_noappend_supported.exchange(false))
      spdlog::info("client buffers: pwritev2(RWF_NOAPPEND) unsupported ({}); copies into cold "
                   "buffers go through the mapping", strerror(err));
    fd_usable_.store(false, std::memory_order_relaxed);
    break;
  }
  return static_cast<int64_t>(done);
}

absl::StatusOr<std::shared_ptr<ClientBuffer>> ClientBuffer::Map(const std::string& name,
                                                                uint64_t size) {
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    int err = errno;
    std::string msg = absl::StrCat("cannot open shm object '", name, "': ", strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::InvalidArgumentError(msg);
  }
  absl::StatusOr<std::shared_ptr<ClientBuffer>> b = MapFd(fd, size, absl::StrCat("shm object '", name, "'"));
  close(fd);
  if (b.ok()) (*b)->name_ = name;
  return b;
}

absl::StatusOr<std::shared_ptr<ClientBuffer>> ClientBuffer::MapFd(int fd, uint64_t size,
                                                                  std::string label) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(label, " is not a regular file"));
  if (static_cast<uint64_t>(st.st_size) < size)
    return absl::InvalidArgumentError(absl::StrCat(label, " is ", st.st_size,
                                                   " bytes, smaller than the registered size ",
                                                   size));
  // A hugetlbfs object maps in whole hugetlb pages (older kernels fail an
  // mmap of any other length with EINVAL) and has no write() (pwritev2
  // fails with EINVAL, which would read as "no RWF_NOAPPEND" and turn the
  // descriptor path off for every buffer): copies go through the mapping,
  // whose first touch costs a fault per 2 MiB, not per 4 KiB.
  struct statfs fs;
  const bool huge = fstatfs(fd, &fs) == 0 && static_cast<uint64_t>(fs.f_type) == kHugetlbfsMagic;
  const uint64_t block = huge ? static_cast<uint64_t>(st.st_blksize) : 1;
  if (huge && (block == 0 || size > UINT64_MAX - block))
    return absl::InvalidArgumentError(absl::StrCat(label, ": size ", size, " is too large"));
  const uint64_t mapped = huge ? (size + block - 1) / block * block : size;
  // No MAP_POPULATE: REGISTER runs on the frontend, and populating a large
  // (or sparse, ftruncate'd) object would stall every tenant and fault in
  // memory the client never wrote. The BufferWarmer maps in the pages the
  // object holds, off the frontend, after REGISTER (buffer_warmer.h); a copy
  // that comes first faults in what it touches.
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", label, " (", size, " bytes): ", strerror(errno)));
  std::shared_ptr<ClientBuffer> b(new ClientBuffer(std::move(label), static_cast<uint8_t*>(p), size,
                                                   st.st_dev, st.st_ino));
  b->mapped_ = mapped;
  if (!huge) b->KeepFd(fd);
  return b;
}

ClientBuffer::~ClientBuffer() {
  if (gpu_) gpu_->CloseImported(tiers::hbm::ImportedMemory{data_, size_, dev_, ino_});
  else
    munmap(data_, mapped_);
  if (fd_ >= 0) {
    close(fd_);
    g_kept_fds.fetch_sub(1, std::memory_order_relaxed);
  }
}

std::pair<uint8_t*, uint64_t> ClientBuffer::HostMapping() const {
  if (gpu_ == nullptr || gpu_->emulated()) return {data_, size_};
  return {nullptr, 0};
}

absl::Status ClientBuffer::CheckRange(uint64_t offset, uint64_t n) const {
  if (offset > size_ || n > size_ - offset)
    return absl::OutOfRangeError(absl::StrCat("range [", offset, ", ", offset + n,
                                              ") lies outside buffer '", name_, "' of ", size_,
                                              " bytes"));
  return absl::OkStatus();
}

}  // namespace kvtier::daemon
