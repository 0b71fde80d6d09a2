// GpuArena: a client's KV arena, wherever it can live — GPU memory shared
// with kvtierd by CUDA IPC when there is a GPU, else a POSIX shared-memory
// arena (or the emulated device's memory, for testing the device path) — with
// the same calls in every case, so callers do not branch on "is there a GPU".
//
// Ownership: the arena owns its memory and frees it on destruction; it must
// outlive every registration of it. Not thread-safe to create or destroy;
// Write/Read of disjoint ranges may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvtier/client.h"
#include "kvtier/shm_buffer.h"

namespace kvtier {

enum class ArenaKind {
  kAuto,            // kCuda when a CUDA device is visible, else kShm
  kCuda,            // cudaMalloc'd GPU memory, registered by CUDA IPC handle
  kEmulatedDevice,  // shared memory the daemon maps as emulated-device memory
  kShm,             // shared memory registered as an ordinary shm buffer
};
absl::string_view ArenaKindName(ArenaKind kind);

class GpuArena {
 public:
  // `size` bytes on CUDA device `device` (kCuda, or kAuto with a GPU).
  // kCuda without a usable device fails with FailedPrecondition, naming why.
  static absl::StatusOr<std::unique_ptr<GpuArena>> Create(uint64_t size,
                                                          ArenaKind kind = ArenaKind::kAuto,
                                                          int device = 0);
  ~GpuArena();
  GpuArena(const GpuArena&) = delete;
  GpuArena& operator=(const GpuArena&) = delete;

  ArenaKind kind() const { return kind_; }
  bool on_gpu() const { return kind_ == ArenaKind::kCuda; }
  // Base address: a device pointer for kCuda (hand it to kernels), a host
  // pointer otherwise.
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  int device() const { return device_; }

  // Registers the arena with the daemon behind `client`; the id works with
  // Client::Get/Put like any buffer id.
  absl::StatusOr<BufferId> Register(Client& client) const;

  // Host <-> arena copies for any kind (cudaMemcpy for kCuda). OutOfRange
  // outside the arena.
  absl::Status Write(uint64_t offset, const void* src, uint64_t n);
  absl::Status Read(uint64_t offset, void* dst, uint64_t n) const;

  // Whether kAuto would pick CUDA; `why` says why not.
  static bool CudaAvailable(std::string* why = nullptr);

 private:
  GpuArena(ArenaKind kind, uint8_t* data, uint64_t size, int device)
      : kind_(kind), data_(data), size_(size), device_(device) {}
  absl::Status CheckRange(uint64_t offset, uint64_t n) const;

  ArenaKind kind_;
  uint8_t* data_;
  uint64_t size_;
  int device_;
  std::unique_ptr<ShmBuffer> shm_;  // kShm and kEmulatedDevice
  std::string ipc_handle_;    // kCuda
};

}  // namespace kvtier
