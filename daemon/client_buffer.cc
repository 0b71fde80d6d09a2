// Mapping client shm buffers and surviving their truncation.
#include "daemon/client_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvtier::daemon {

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
  // No MAP_POPULATE: REGISTER runs on the frontend, and populating a large
  // (or sparse, ftruncate'd) object would stall every tenant and fault in
  // memory the client never wrote. The BufferWarmer maps in the pages the
  // object holds, off the frontend, after REGISTER (buffer_warmer.h); a copy
  // that comes first faults in what it touches.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", label, " (", size, " bytes): ", strerror(errno)));
  return std::shared_ptr<ClientBuffer>(new ClientBuffer(std::move(label), static_cast<uint8_t*>(p),
                                                        size, st.st_dev, st.st_ino));
}

ClientBuffer::~ClientBuffer() {
  if (gpu_) gpu_->CloseImported(tiers::hbm::ImportedMemory{data_, size_, dev_, ino_});
  else munmap(data_, size_);
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
