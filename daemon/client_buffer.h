// A client's registered buffer: a POSIX shared-memory object the client
// created and the daemon maps. Copies into and out of it run under a SIGBUS
// guard, because a client may shrink the object after registering it and the
// daemon must not die for that. Copies into a range the daemon's mapping has
// not yet touched go through the object's descriptor instead (Write).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

#include "kvtier/sigbus_guard.h"
#include "absl/status/statusor.h"
#include "tiers/hbm/device.h"

namespace kvtier::daemon {

class ClientBuffer {
 public:
  // Maps `size` bytes of the shm object `name`. Errors: NotFound (no such
  // object), PermissionDenied, InvalidArgument (object smaller than `size`).
  static absl::StatusOr<std::shared_ptr<ClientBuffer>> Map(const std::string& name, uint64_t size);
  // Maps `size` bytes of the memory object open as `fd` (handed over by a
  // client: buffer_fd_inbox.h); the caller keeps and closes `fd`. `label`
  // names it in errors. InvalidArgument when the object is smaller.
  static absl::StatusOr<std::shared_ptr<ClientBuffer>> MapFd(int fd, uint64_t size,
                                                             std::string label);
  // A client's GPU memory: `size` bytes of the allocation behind `handle`
  // (CUDA IPC handle, or the emulated device's shm name), mapped through
  // `device`. `label` names it in errors. Defined in device_transfers.cc.
  static absl::StatusOr<std::shared_ptr<ClientBuffer>> MapDevice(
      std::shared_ptr<tiers::hbm::Device> device, const std::string& handle, uint64_t size,
      std::string label);
  ~ClientBuffer();
  ClientBuffer(const ClientBuffer&) = delete;
  ClientBuffer& operator=(const ClientBuffer&) = delete;

  // Host bytes of a shm buffer; nullptr for a device buffer.
  uint8_t* data() const { return gpu_ ? nullptr : data_; }
  // Device buffers: the device that mapped it and the device address.
  bool on_device() const { return gpu_ != nullptr; }
  tiers::hbm::Device* gpu() const { return gpu_.get(); }
  uint8_t* device_ptr() const { return gpu_ ? data_ : nullptr; }
  uint64_t size() const { return size_; }
  const std::string& name() const { return name_; }
  uint64_t device() const { return dev_; }
  uint64_t inode() const { return ino_; }

  // The host memory this mapping covers — a shm buffer, or the emulated
  // device's shared memory — which warm-up may touch (buffer_warmer.h);
  // {nullptr, 0} for real device memory.
  std::pair<uint8_t*, uint64_t> HostMapping() const;

  // OutOfRange unless [offset, offset + n) lies inside the buffer.
  absl::Status CheckRange(uint64_t offset, uint64_t n) const;

  // Copies `n` bytes from `src` into [offset, offset + n) of a host buffer
  // (the caller checked the range); false when the object no longer covers
  // it (shrunk by its owner). Thread-safe. Below the warm mark (MarkWarm)
  // the copy goes through the daemon's mapping; above it, through the
  // object's descriptor (pwritev2): the first access through a new mapping
  // costs a fault per 4 KiB page (~10-20 us each on a paravirtualized VM,
  // whatever was populated ahead), a write through the descriptor costs the
  // copy and a page-cache lookup. A write there cannot allocate more than the
  // range: holes it fills are the ones a copy through the mapping would.
  bool Write(uint64_t offset, const uint8_t* src, uint64_t n);
  // Every byte below `end` has been touched through the daemon's mapping
  // (BufferWarmer, in order from 0): later copies there use the mapping.
  void MarkWarm(uint64_t end);
  // Whether Write copies into [0, end) go through the mapping (warm, or no
  // usable descriptor): then a caller may copy there itself under GuardedRun.
  bool MappedWrites(uint64_t end) const {
    return fd_ < 0 || end <= warm_end_.load(std::memory_order_acquire) ||
           !fd_usable_.load(std::memory_order_relaxed);
  }
  uint64_t warm_bytes() const { return warm_end_.load(std::memory_order_acquire); }
  // Whether copies above the warm mark can use the descriptor (tests).
  bool writes_through_fd() const { return fd_ >= 0 && fd_usable_.load(std::memory_order_relaxed); }
  // The descriptor kept open for Write: one per registration, taken only
  // while fewer than a quarter of the soft RLIMIT_NOFILE are held (else the
  // copy uses the mapping, as before). set_fd_limit sets another limit for
  // registrations to come (0: none, kvtierd --buffer_write_fd=false; -1:
  // the default again). Thread-safe.
  static void set_fd_limit(int limit);

 private:
  ClientBuffer(std::string name, uint8_t* data, uint64_t size, uint64_t dev, uint64_t ino)
      : name_(std::move(name)), data_(data), size_(size), dev_(dev), ino_(ino) {}
  // Keeps a descriptor of its own for Write (see set_fd_limit).
  void KeepFd(int fd);
  // Bytes of [offset, offset + n) written through the descriptor, from the
  // start; -1 when the object is shorter than the range.
  int64_t WriteThroughFd(uint64_t offset, const uint8_t* src, uint64_t n);
  std::string name_;
  uint8_t* data_;
  uint64_t size_;
  // The mapping's length: size_, rounded up to the page size of a hugetlbfs
  // object (which maps only whole hugetlb pages).
  uint64_t mapped_ = size_;
  uint64_t dev_, ino_;
  int fd_ = -1;  // shm buffers only (not hugetlbfs: no write()); see Write
  std::atomic<bool> fd_usable_{true};
  std::atomic<uint64_t> warm_end_{0};
  std::shared_ptr<tiers::hbm::Device> gpu_;  // set for device buffers
};

// Copies into and out of client buffers run under kvtier::GuardedRun
// (kvtier/sigbus_guard.h).

}  // namespace kvtier::daemon
