// Client-side shared-memory arenas.
#include "kvtier/shm_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvtier {

absl::StatusOr<std::unique_ptr<ShmBuffer>> ShmBuffer::Create(uint64_t size, std::string name) {
  static std::atomic<uint64_t> seq{0};
  if (size == 0) return absl::InvalidArgumentError("shm buffer size must be > 0");
  if (name.empty()) name = absl::StrCat("/kvtier-client-", getpid(), "-", seq++);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0)
    return absl::FailedPreconditionError(
        absl::StrCat("shm_open(", name, "): ", strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(
        absl::StrCat("ftruncate(", name, ", ", size, "): ", strerror(err)));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  if (p == MAP_FAILED) {
    close(fd);
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("mmap(", name, "): ", strerror(err)));
  }
  return std::unique_ptr<ShmBuffer>(new ShmBuffer(name, fd, static_cast<uint8_t*>(p), size));
}

ShmBuffer::~ShmBuffer() {
  munmap(data_, size_);
  close(fd_);
  shm_unlink(name_.c_str());
}

}  // namespace kvtier
