// Status plumbing and a grow-only device buffer for the CUDA decoder:
// cudaError_t / cublasStatus_t become absl::Status naming the call, so a
// failure deep in a forward pass says which launch broke.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"

namespace kvtier::decoder::cuda {

inline absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

inline absl::Status CublasStatus(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS status ", int(e)));
}

#define KVTIER_CUDA_OK(expr) RETURN_IF_ERROR(::kvtier::decoder::cuda::CudaStatus((expr), #expr))
#define KVTIER_CUBLAS_OK(expr) RETURN_IF_ERROR(::kvtier::decoder::cuda::CublasStatus((expr), #expr))

// Device memory that only grows (scratch reused across passes). Owns it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { if (ptr_ != nullptr) cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // At least `bytes` (contents lost when it grows).
  absl::Status Reserve(size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&ptr_, bytes), "cudaMalloc (decoder scratch)"));
    bytes_ = bytes;
    return absl::OkStatus();
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kvtier::decoder::cuda
