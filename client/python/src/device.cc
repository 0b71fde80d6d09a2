// CUDA tensors as kvtier buffers: a tensor from PyTorch's caching allocator is
// a piece of a larger cudaMalloc'd segment, and a CUDA IPC handle names the
// whole segment. So we find the segment's base and size (cuMemGetAddressRange,
// reached through cudart's entry-point lookup so the module does not need
// libcuda at load time), register each segment once per client, and return
// the tensor's offset in it. Built without CUDA, these calls say so.
#include "absl/strings/str_cat.h"
#include "client.h"

#if KVTIER_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

#if KVTIER_HAVE_CUDA
#define KVTIER_HAVE_CUDA_VALUE true
#else
#define KVTIER_HAVE_CUDA_VALUE false
#endif

namespace kvtier::py {
namespace {

#if KVTIER_HAVE_CUDA
absl::Status CudaError(cudaError_t err, absl::string_view what) {
  cudaGetLastError();  // clear the sticky-free error state for the next call
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

struct Segment {
  uintptr_t base = 0;
  uint64_t size = 0;
  int device = 0;
  std::string handle;  // cudaIpcMemHandle_t bytes
};

using GetAddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

absl::StatusOr<GetAddressRangeFn> AddressRangeFn() {
  static GetAddressRangeFn fn = nullptr;
  if (fn) return fn;
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q;
  cudaError_t err =
      cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault, &q);
  if (err != cudaSuccess) return CudaError(err, "cudaGetDriverEntryPointByVersion");
  if (q != cudaDriverEntryPointSuccess || !p)
    return absl::FailedPreconditionError("the CUDA driver has no cuMemGetAddressRange");
  fn = reinterpret_cast<GetAddressRangeFn>(p);
  return fn;
}

// The cudaMalloc segment holding [ptr, ptr+size) on its device.
absl::StatusOr<Segment> FindSegment(uintptr_t ptr, uint64_t size) {
  cudaPointerAttributes attr;
  cudaError_t err = cudaPointerGetAttributes(&attr, reinterpret_cast<void*>(ptr));
  if (err != cudaSuccess) return CudaError(err, "cudaPointerGetAttributes");
  if (attr.type != cudaMemoryTypeDevice)
    return absl::InvalidArgumentError("the tensor's memory is not CUDA device memory");
  Segment s;
  s.device = attr.device;
  int prev = 0;
  cudaGetDevice(&prev);
  if (prev != s.device) cudaSetDevice(s.device);
  auto fn = AddressRangeFn();
  CUdeviceptr base = 0;
  size_t len = 0;
  CUresult cr = fn.ok() ? (*fn)(&base, &len, static_cast<CUdeviceptr>(ptr)) : CUDA_ERROR_UNKNOWN;
  cudaIpcMemHandle_t h;
  cudaError_t ipc =
      cr == CUDA_SUCCESS ? cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base)) : cudaSuccess;
  if (prev != s.device) cudaSetDevice(prev);
  if (!fn.ok()) return fn.status();
  if (cr != CUDA_SUCCESS)
    return absl::FailedPreconditionError(
        absl::StrCat("cuMemGetAddressRange failed (", int(cr), ")"));
  if (ipc != cudaSuccess)
    return CudaError(ipc, "cudaIpcGetMemHandle (memory not from cudaMalloc?)");
  s.base = static_cast<uintptr_t>(base);
  s.size = len;
  if (ptr + size > s.base + s.size)
    return absl::InvalidArgumentError("the tensor runs past the end of its CUDA allocation");
  s.handle.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  return s;
}
#endif

// (buffer_id, offset) of [ptr, ptr+size) in a registered CUDA segment;
// registers the segment on first use (and again when the allocator has
// replaced it: a new IPC handle at the same address).
py::tuple RegisterCuda(PyClient& c, uintptr_t ptr, uint64_t size) {
#if KVTIER_HAVE_CUDA
  absl::StatusOr<Segment> seg;
  {
    py::gil_scoped_release nogil;
    seg = FindSegment(ptr, size);
  }
  Segment s = Check(std::move(seg));
  auto& regs = c.device_regs();
  auto key = std::make_pair(s.device, s.base);
  auto it = regs.find(key);
  if (it != regs.end() && (it->second.handle != s.handle || it->second.size != s.size)) {
    BufferId stale = it->second.id;
    (void)c.Call("register_tensor", [&](Client& cl) { return cl.UnregisterBuffer(stale); });
    c.Forget(stale);
    it = regs.end();
  }
  if (it == regs.end()) {
    BufferId id = Check(c.Call("register_tensor", [&](Client& cl) {
      return cl.RegisterDeviceBuffer(DeviceBufferKind::kCudaIpc, s.handle, s.device, s.size);
    }));
    it = regs.emplace(key, PyClient::DeviceReg{id, s.size, s.handle}).first;
  }
  return py::make_tuple(it->second.id, ptr - s.base, s.device);
#else
  (void)c, (void)ptr, (void)size;
  ThrowStatus(absl::FailedPreconditionError(
      "kvtier was built without CUDA: CUDA tensors cannot be registered (rebuild with nvcc, "
      "or allocate the KV cache in a kvtier.ShmBuffer)"));
#endif
}

bool CudaAvailable() {
#if KVTIER_HAVE_CUDA
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) cudaGetLastError();
  return err == cudaSuccess && n > 0;
#else
  return false;
#endif
}

}  // namespace

void BindDeviceMethods(py::class_<PyClient>& c) {
  c.def("_register_cuda", &RegisterCuda, py::arg("ptr"), py::arg("size"));
}

void BindDevice(py::module_& m) {
  m.def("cuda_available", &CudaAvailable,
        "Whether this build has CUDA and a CUDA device is visible.");
  m.attr("built_with_cuda") = py::bool_(KVTIER_HAVE_CUDA_VALUE);
}

}  // namespace kvtier::py
