// ShmRegion: the syscalls behind the host tier's memory. Every failing call
// is reported with its errno text; a failure after shm_open unlinks the name
// so nothing is left behind in /dev/shm.
#include "tiers/host/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvtier::tiers {
namespace {

absl::Status ErrnoError(const std::string& what, int err) {
  std::string msg = absl::StrCat(what, ": ", strerror(err));
  if (err == ENOMEM || err == ENOSPC) return absl::ResourceExhaustedError(msg);
  if (err == EEXIST) return absl::AlreadyExistsError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

std::string DefaultName() {
  // Several regions in one process (e.g. tests with two host tiers) must not
  // collide, yet the common single-region case keeps the documented name.
  static std::atomic<uint32_t> seq{0};
  const uint32_t n = seq.fetch_add(1);
  std::string name = absl::StrCat("/kvtier-host-", getpid());
  if (n > 0) absl::StrAppend(&name, "-", n);
  return name;
}

// tmpfs pages are only allocated on touch; a /dev/shm smaller than the arena
// (64 MiB in a default container) would SIGBUS the daemon under load, so
// refuse up front with a message that says what to change.
absl::Status CheckShmSpace(uint64_t bytes) {
  struct statvfs vfs;
  if (statvfs("/dev/shm", &vfs) != 0) return absl::OkStatus();  // not Linux-like: skip
  const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (avail >= bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("host tier needs ", bytes, " bytes of shared memory but /dev/shm has only ",
                   avail, " free; enlarge /dev/shm (e.g. docker --shm-size) or lower capacity"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Create(const std::string& name,
                                                             uint64_t bytes, HugepageMode mode) {
  if (bytes == 0) return absl::InvalidArgumentError("shared-memory region of 0 bytes");
  if (!name.empty() && (name[0] != '/' || name.find('/', 1) != std::string::npos)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm name '", name, "' must be '/' followed by no other '/'"));
  }
  if (mode != HugepageMode::kOff) {
    auto huge = CreateHugetlb(bytes);
    if (huge.ok()) return huge;
    if (mode == HugepageMode::kOn) {
      return absl::FailedPreconditionError(absl::StrCat(
          "hugepages=on but no hugetlb mapping of ", bytes, " bytes: ", huge.status().message(),
          " (reserve pages via /proc/sys/vm/nr_hugepages, or use hugepages=auto)"));
    }
  }
  if (!name.empty()) return CreateShm(name, bytes);
  // A default name can be taken by a stale object of an earlier process with
  // the same pid (one killed before it unlinked): move on to the next name.
  for (int attempt = 0;; ++attempt) {
    auto r = CreateShm(DefaultName(), bytes);
    if (r.ok() || !absl::IsAlreadyExists(r.status()) || attempt == 15) return r;
  }
}

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::CreateHugetlb(uint64_t bytes) {
  const uint64_t size = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  int fd = memfd_create("kvtier-host", MFD_HUGETLB | MFD_CLOEXEC);
  if (fd < 0) return ErrnoError("memfd_create(MFD_HUGETLB)", errno);
  std::unique_ptr<ShmRegion> r(new ShmRegion());
  r->fd_ = fd;  // closed by the destructor on any failure below
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    return ErrnoError("ftruncate(hugetlb memfd)", errno);
  }
  // MAP_SHARED on hugetlbfs reserves the huge pages here, so a shortage shows
  // up now (ENOMEM) rather than as SIGBUS on first touch.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoError("mmap(hugetlb memfd)", errno);
  r->base_ = static_cast<uint8_t*>(p);
  r->size_ = size;
  r->hugetlb_ = true;
  r->backing_ = "memfd hugetlb (2 MiB pages)";
  return r;
}

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::CreateShm(const std::string& name,
                                                                uint64_t bytes) {
  if (auto s = CheckShmSpace(bytes); !s.ok()) return s;
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError(absl::StrCat("shm_open(", name, ")"), errno);
  std::unique_ptr<ShmRegion> r(new ShmRegion());
  r->fd_ = fd;
  r->name_ = name;  // from here on the destructor unlinks it
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return ErrnoError(absl::StrCat("ftruncate(", name, ", ", bytes, ")"), errno);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoError(absl::StrCat("mmap(", name, ")"), errno);
  r->base_ = static_cast<uint8_t*>(p);
  r->size_ = bytes;
  // Nobody else ever maps the daemon's pools (clients get copies), so the
  // name goes at once: a killed daemon leaves nothing behind in /dev/shm, and
  // no client can open the arena by name.
  shm_unlink(name.c_str());
  r->linked_ = false;
  // THP on shmem only happens when the admin enabled it (shmem_enabled);
  // the advice is free otherwise, and its failure is not an error.
  const bool thp = madvise(p, bytes, MADV_HUGEPAGE) == 0;
  r->backing_ = absl::StrCat("shm ", name, " (4 KiB pages", thp ? ", THP advised" : "", ")");
  return r;
}

void ShmRegion::PopulateInBackground() {
#ifdef MADV_POPULATE_WRITE
  if (populate_.joinable() || base_ == nullptr) return;
  populate_ = std::thread([this] {
    constexpr uint64_t kChunk = 32ull << 20;
    for (uint64_t off = 0; off < size_ && !stop_populate_.load(std::memory_order_relaxed);
         off += kChunk) {
      // Older kernels lack it (EINVAL): then first touch pays, as before.
      if (madvise(base_ + off, std::min(kChunk, size_ - off), MADV_POPULATE_WRITE) != 0) return;
    }
  });
#endif
}

ShmRegion::~ShmRegion() {
  stop_populate_ = true;
  if (populate_.joinable()) populate_.join();
  if (base_ != nullptr) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
  if (linked_ && !name_.empty()) shm_unlink(name_.c_str());
}

}  // namespace kvtier::tiers
