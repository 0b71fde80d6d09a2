// The device backend behind the HBM tier and the daemon's GPU data path: a
// page pool in device memory, pinned host memory, asynchronous copies on
// streams with completion callbacks, and IPC export/import of device memory.
// Two implementations: CudaDevice (a real GPU) and EmulatedDevice (host
// memory behind the same interface, for machines without a GPU).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kvtier::tiers::hbm {

enum class CopyKind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };
absl::string_view CopyKindName(CopyKind kind);

// One contiguous copy. Which side is device memory follows from CopyKind.
struct CopyRange {
  void* dst = nullptr;
  const void* src = nullptr;
  uint64_t bytes = 0;
};

// Merges ranges that continue the previous one on both sides (after sorting
// by source), so a batch of adjacent pages becomes one copy. The ranges of
// one batch must not overlap each other's destinations.
std::vector<CopyRange> Coalesce(std::vector<CopyRange> ranges);

// Device memory mapped from another process's export.
struct ImportedMemory {
  void* ptr = nullptr;
  uint64_t bytes = 0;
  // Identity of the underlying object, for "one owner" checks: the emulated
  // device's shm (device, inode); CUDA: (~0, the allocation's base address).
  uint64_t dev = 0, ino = 0;
};

// Runs once when every copy of a CopyAsync call has completed (or failed),
// on a thread owned by the device. Must not block for long.
using CopyDone = std::function<void(absl::Status)>;

class Device {
 public:
  virtual ~Device() = default;

  // What backs it, for logs and STATS: "cuda:0 NVIDIA H200 (139.8 GiB)" or
  // "emulated (host memory)".
  virtual std::string description() const = 0;
  virtual bool emulated() const = 0;
  virtual int ordinal() const { return 0; }
  // Copy streams; CopyAsync's `stream` is taken modulo this.
  virtual int streams() const = 0;

  // Device memory; ExportHandle can share it when `exportable`. Thread-safe.
  // (The emulated device names its memory only then, so a killed process
  // leaves no shm object behind for a pool nobody imports.)
  virtual absl::StatusOr<void*> Allocate(uint64_t bytes, bool exportable = true) = 0;
  virtual void Free(void* ptr) = 0;

  // Pins a host range (the host tier's arena) so copies to and from it are
  // DMA without staging. Best effort for the emulated device (a no-op).
  virtual absl::Status RegisterHost(void* base, uint64_t bytes) = 0;
  virtual void UnregisterHost(void* base) = 0;

  // Enqueues `ranges` on one stream in order and returns at once; `done`
  // runs when they have all completed. Errors found before anything was
  // enqueued are returned (and `done` is not called). Thread-safe.
  virtual absl::Status CopyAsync(CopyKind kind, std::vector<CopyRange> ranges, int stream,
                                 CopyDone done) = 0;
  // CopyAsync and wait for completion.
  absl::Status Copy(CopyKind kind, std::vector<CopyRange> ranges, int stream = 0);

  // An opaque handle another process passes to ImportHandle to map memory
  // from Allocate (CUDA: the 64 bytes of cudaIpcMemHandle_t; emulated: the
  // name of the shm object behind the allocation).
  virtual absl::StatusOr<std::string> ExportHandle(void* ptr) = 0;
  // Maps `bytes` of an exported allocation of another process. Errors name
  // what failed (bad handle, object smaller than `bytes`).
  virtual absl::StatusOr<ImportedMemory> ImportHandle(const std::string& handle,
                                                      uint64_t bytes) = 0;
  virtual void CloseImported(const ImportedMemory& memory) = 0;
};

// Waits for several CopyAsync batches (e.g. the D2D and the H2D part of one
// GET) and keeps the first error. Thread-safe.
class CopyGroup {
 public:
  explicit CopyGroup(Device& device) : device_(device) {}
  ~CopyGroup() { (void)Wait(); }
  // Submits one batch (nothing for an empty one).
  void Add(CopyKind kind, std::vector<CopyRange> ranges, int stream);
  // Blocks until every submitted batch has completed; the first error.
  absl::Status Wait();

 private:
  void Done(absl::Status st);
  Device& device_;
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

enum class DeviceMode { kAuto, kCuda, kEmulated, kNone };
absl::StatusOr<DeviceMode> ParseDeviceMode(absl::string_view text);
absl::string_view DeviceModeName(DeviceMode mode);

// Visible CUDA devices; 0 when built without CUDA or when
// cudaGetDeviceCount fails (no driver, no device). `why` gets the reason.
int CudaDeviceCount(std::string* why = nullptr);
bool BuiltWithCuda();

struct EmulatedDeviceConfig {
  int streams = 2;
  // Pauses each copy this long, so tests can observe asynchrony.
  uint64_t copy_delay_us = 0;
};
std::shared_ptr<Device> CreateEmulatedDevice(const EmulatedDeviceConfig& config = {});

// Fails with FailedPrecondition when there is no CUDA (build or device).
absl::StatusOr<std::shared_ptr<Device>> CreateCudaDevice(int ordinal, int streams = 4);

// The daemon's choice: kAuto takes CUDA when a device is present and
// `hbm_bytes` > 0, else the emulated device; kCuda insists on CUDA; kNone
// returns nullptr. `why` gets one line saying what was picked and why.
absl::StatusOr<std::shared_ptr<Device>> CreateDevice(DeviceMode mode, uint64_t hbm_bytes,
                                                     int ordinal, std::string* why);

}  // namespace kvtier::tiers::hbm
