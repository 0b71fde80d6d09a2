// GpuArena: CUDA memory (when built with CUDA and a device is visible) or a
// shared-memory arena behind one set of calls; see gpu_arena.h.
#include "kvtier/gpu_arena.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kvtier/shm_buffer.h"

#if KVTIER_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace kvtier {

namespace {

#if KVTIER_HAVE_CUDA
absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}
#endif

}  // namespace

absl::string_view ArenaKindName(ArenaKind kind) {
  switch (kind) {
    case ArenaKind::kAuto: return "auto";
    case ArenaKind::kCuda: return "cuda";
    case ArenaKind::kEmulatedDevice: return "emulated-device";
    case ArenaKind::kShm: return "shm";
  }
  return "?";
}

bool GpuArena::CudaAvailable(std::string* why) {
#if KVTIER_HAVE_CUDA
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    if (why != nullptr)
      *why = err != cudaSuccess ? absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(err))
                                : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  return true;
#else
  if (why != nullptr) *why = "client library built without CUDA";
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<GpuArena>> GpuArena::Create(uint64_t size, ArenaKind kind,
                                                           int device) {
  if (size == 0) return absl::InvalidArgumentError("GpuArena size must be > 0");
  std::string why;
  if (kind == ArenaKind::kAuto) kind = CudaAvailable(&why) ? ArenaKind::kCuda : ArenaKind::kShm;
  if (kind == ArenaKind::kCuda) {
    if (!CudaAvailable(&why))
      return absl::FailedPreconditionError(absl::StrCat("GpuArena on CUDA: ", why));
#if KVTIER_HAVE_CUDA
    void* p = nullptr;
    if (auto st = CudaStatus(cudaSetDevice(device), "cudaSetDevice"); !st.ok()) return st;
    if (auto st = CudaStatus(cudaMalloc(&p, size), absl::StrCat("cudaMalloc(", size, ")"));
        !st.ok())
      return st;
    cudaIpcMemHandle_t h;
    if (auto st = CudaStatus(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle"); !st.ok()) {
      cudaFree(p);
      return st;
    }
    std::unique_ptr<GpuArena> a(new GpuArena(kind, static_cast<uint8_t*>(p), size, device));
    a->ipc_handle_.assign(reinterpret_cast<const char*>(&h), sizeof(h));
    return a;
#endif
  }
  // The emulated device maps the arena by its shm name, like any shm buffer;
  // a distinct prefix keeps it apart from the daemon's own objects.
  std::string name;
  if (kind == ArenaKind::kEmulatedDevice) {
    static std::atomic<uint64_t> seq{0};
    name = absl::StrCat("/kvtier-devarena-", getpid(), "-", seq++);
  }
  auto shm = ShmBuffer::Create(size, name);
  if (!shm.ok()) return shm.status();
  std::unique_ptr<GpuArena> a(new GpuArena(kind, (*shm)->data(), size, device));
  a->shm_ = *std::move(shm);
  return a;
}

GpuArena::~GpuArena() {
#if KVTIER_HAVE_CUDA
  if (kind_ == ArenaKind::kCuda) cudaFree(data_);
#endif
}

absl::StatusOr<BufferId> GpuArena::Register(Client& client) const {
  switch (kind_) {
    case ArenaKind::kCuda:
      return client.RegisterDeviceBuffer(DeviceBufferKind::kCudaIpc, ipc_handle_, device_, size_);
    case ArenaKind::kEmulatedDevice:
      return client.RegisterDeviceBuffer(DeviceBufferKind::kEmulated, shm_->name(),
                                         device_, size_);
    default:
      return client.RegisterBuffer(*shm_, size_);
  }
}

absl::Status GpuArena::CheckRange(uint64_t offset, uint64_t n) const {
  if (offset > size_ || n > size_ - offset)
    return absl::OutOfRangeError(absl::StrCat("GpuArena range [", offset, ", +", n,
                                              ") outside the arena of ", size_, " bytes"));
  return absl::OkStatus();
}

absl::Status GpuArena::Write(uint64_t offset, const void* src, uint64_t n) {
  if (auto st = CheckRange(offset, n); !st.ok()) return st;
#if KVTIER_HAVE_CUDA
  if (kind_ == ArenaKind::kCuda) {
    cudaSetDevice(device_);
    return CudaStatus(cudaMemcpy(data_ + offset, src, n, cudaMemcpyHostToDevice), "GpuArena write");
  }
#endif
  std::memcpy(data_ + offset, src, n);
  return absl::OkStatus();
}

absl::Status GpuArena::Read(uint64_t offset, void* dst, uint64_t n) const {
  if (auto st = CheckRange(offset, n); !st.ok()) return st;
#if KVTIER_HAVE_CUDA
  if (kind_ == ArenaKind::kCuda) {
    cudaSetDevice(device_);
    return CudaStatus(cudaMemcpy(dst, data_ + offset, n, cudaMemcpyDeviceToHost), "GpuArena read");
  }
#endif
  std::memcpy(dst, data_ + offset, n);
  return absl::OkStatus();
}

}  // namespace kvtier
