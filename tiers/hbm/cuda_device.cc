// CudaDevice: the device backend on a real GPU. The page pool is cudaMalloc'd
// (so it can be shared by CUDA IPC), the host arena is pinned with
// cudaHostRegister, copies go on non-blocking streams — one
// cudaMemcpyBatchAsync per batch where the runtime has it — and each batch
// records an event that a per-stream completion thread waits on before it
// runs the callback. Compiled only when KVTIER_HAVE_CUDA.
#include <cuda_runtime.h>

#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "tiers/hbm/device.h"

namespace kvtier::tiers::hbm {
namespace {

absl::Status CudaError(cudaError_t err, absl::string_view what) {
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

#define KVTIER_CUDA_RETURN(expr, what)                    \
  do {                                                    \
    cudaError_t kvtier_err_ = (expr);                     \
    if (kvtier_err_ != cudaSuccess) return CudaError(kvtier_err_, what); \
  } while (0)

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, std::string description)
      : ordinal_(ordinal), description_(std::move(description)) {}

  ~CudaDevice() override {
    for (auto& s : streams_) {
      {
        absl::MutexLock lock(&s->mu);
        s->stop = true;
      }
      if (s->waiter.joinable()) s->waiter.join();
      cudaStreamDestroy(s->stream);
    }
  }

  absl::Status Init(int streams) {
    KVTIER_CUDA_RETURN(cudaSetDevice(ordinal_), absl::StrCat("cudaSetDevice(", ordinal_, ")"));
    for (int i = 0; i < std::max(1, streams); ++i) {
      auto s = std::make_unique<Stream>();
      KVTIER_CUDA_RETURN(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking),
                         "cudaStreamCreateWithFlags");
      streams_.push_back(std::move(s));
    }
    for (auto& s : streams_) s->waiter = std::thread([this, st = s.get()] { Wait(*st); });
    return absl::OkStatus();
  }

  std::string description() const override { return description_; }
  bool emulated() const override { return false; }
  int ordinal() const override { return ordinal_; }
  int streams() const override { return static_cast<int>(streams_.size()); }

  absl::StatusOr<void*> Allocate(uint64_t bytes, bool exportable) override {
    cudaSetDevice(ordinal_);
    void* p = nullptr;
    KVTIER_CUDA_RETURN(cudaMalloc(&p, bytes), absl::StrCat("cudaMalloc(", bytes, ")"));
    return p;
  }
  void Free(void* ptr) override {
    cudaSetDevice(ordinal_);
    cudaFree(ptr);
  }

  absl::Status RegisterHost(void* base, uint64_t bytes) override {
    KVTIER_CUDA_RETURN(cudaHostRegister(base, bytes, cudaHostRegisterPortable),
                       absl::StrCat("cudaHostRegister of ", bytes, " bytes"));
    return absl::OkStatus();
  }
  void UnregisterHost(void* base) override { cudaHostUnregister(base); }

  absl::Status CopyAsync(CopyKind kind, std::vector<CopyRange> ranges, int stream,
                         CopyDone done) override;

  absl::StatusOr<std::string> ExportHandle(void* ptr) override {
    cudaSetDevice(ordinal_);
    cudaIpcMemHandle_t h;
    KVTIER_CUDA_RETURN(cudaIpcGetMemHandle(&h, ptr), "cudaIpcGetMemHandle");
    return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
  }

  absl::StatusOr<ImportedMemory> ImportHandle(const std::string& handle,
                                              uint64_t bytes) override {
    cudaIpcMemHandle_t h;
    if (handle.size() != sizeof(h))
      return absl::InvalidArgumentError(absl::StrCat("CUDA IPC handle is ", handle.size(),
                                                     " bytes, want ", sizeof(h)));
    memcpy(&h, handle.data(), sizeof(h));
    cudaSetDevice(ordinal_);
    void* p = nullptr;
    KVTIER_CUDA_RETURN(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess),
                       "cudaIpcOpenMemHandle");
    // The client's declared size is a claim: check it against the
    // allocation behind the handle, so copies never run past its end.
    uint64_t base = 0, size = 0;
    if (absl::Status st = AllocationRange(p, &base, &size); !st.ok()) {
      cudaIpcCloseMemHandle(p);
      return st;
    }
    const uint64_t at = reinterpret_cast<uint64_t>(p);
    if (at < base || bytes > size - (at - base)) {
      cudaIpcCloseMemHandle(p);
      return absl::InvalidArgumentError(absl::StrCat("the CUDA allocation behind the handle is ",
                                                     size - (at - base), " bytes, smaller than ",
                                                     bytes));
    }
    // Identity for one-owner checks: the allocation's base in this process.
    // The same allocation opened again maps to the same base (the driver
    // reference-counts IPC opens), and the address is not reused while open.
    return ImportedMemory{p, bytes, kCudaIdentity, base};
  }
  // cuMemGetAddressRange through the runtime's driver entry point, so the
  // daemon does not link libcuda (absent on machines without a driver).
  static absl::Status AllocationRange(void* p, uint64_t* base, uint64_t* size) {
    using Fn = int (*)(unsigned long long*, size_t*, unsigned long long);
    static Fn fn = [] {
      void* f = nullptr;
      cudaDriverEntryPointQueryResult q;
      if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault,
                                           &q) != cudaSuccess ||
          q != cudaDriverEntryPointSuccess)
        f = nullptr;
      return reinterpret_cast<Fn>(f);
    }();
    if (fn == nullptr)
      return absl::FailedPreconditionError("CUDA driver has no cuMemGetAddressRange");
    unsigned long long b = 0;
    size_t n = 0;
    if (int rc = fn(&b, &n, reinterpret_cast<unsigned long long>(p)); rc != 0)
      return absl::InvalidArgumentError(absl::StrCat("cuMemGetAddressRange failed (", rc, ")"));
    *base = b;
    *size = n;
    return absl::OkStatus();
  }
  static constexpr uint64_t kCudaIdentity = ~0ull;  // no shm has this device number

  void CloseImported(const ImportedMemory& memory) override {
    cudaSetDevice(ordinal_);
    cudaIpcCloseMemHandle(memory.ptr);
  }

 private:
  struct Pending {
    cudaEvent_t event;
    CopyDone done;
  };
  struct Stream {
    cudaStream_t stream = nullptr;
    absl::Mutex mu;
    std::deque<Pending> pending ABSL_GUARDED_BY(mu);
    bool stop ABSL_GUARDED_BY(mu) = false;
    std::thread waiter;
  };

  absl::Status Enqueue(cudaStream_t stream, const std::vector<CopyRange>& ranges);
  void Wait(Stream& s);

  const int ordinal_;
  const std::string description_;
  std::vector<std::unique_ptr<Stream>> streams_;
};

absl::Status CudaDevice::Enqueue(cudaStream_t stream, const std::vector<CopyRange>& ranges) {
#if CUDART_VERSION >= 13000
  if (ranges.size() > 1) {
    std::vector<void*> dsts;
    std::vector<const void*> srcs;
    std::vector<size_t> sizes;
    for (const CopyRange& r : ranges) {
      dsts.push_back(r.dst);
      srcs.push_back(r.src);
      sizes.push_back(r.bytes);
    }
    cudaMemcpyAttributes attr = {};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t attr_idx = 0;
    cudaError_t err = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), ranges.size(),
                                           &attr, &attr_idx, 1, stream);
    if (err == cudaSuccess) return absl::OkStatus();
    // Not every memory kind or platform takes a batch; copies are idempotent,
    // so redoing the whole batch one call per range is safe.
    cudaGetLastError();
  }
#endif
  for (const CopyRange& r : ranges)
    KVTIER_CUDA_RETURN(cudaMemcpyAsync(r.dst, r.src, r.bytes, cudaMemcpyDefault, stream),
                       absl::StrCat("cudaMemcpyAsync of ", r.bytes, " bytes"));
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyAsync(CopyKind kind, std::vector<CopyRange> ranges, int stream,
                                   CopyDone done) {
  Stream& s = *streams_[static_cast<size_t>(stream) % streams_.size()];
  // The current device is per thread; callers are arbitrary worker threads.
  KVTIER_CUDA_RETURN(cudaSetDevice(ordinal_), "cudaSetDevice");
  cudaEvent_t event;
  KVTIER_CUDA_RETURN(
      cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync),
      "cudaEventCreate");
  absl::Status st = Enqueue(s.stream, ranges);
  if (st.ok()) {
    cudaError_t err = cudaEventRecord(event, s.stream);
    if (err != cudaSuccess) st = CudaError(err, "cudaEventRecord");
  }
  if (!st.ok()) {
    // Copies already enqueued may still run: wait for them before the
    // caller reuses its buffers.
    cudaStreamSynchronize(s.stream);
    cudaEventDestroy(event);
    return absl::Status(st.code(), absl::StrCat(CopyKindName(kind), ": ", st.message()));
  }
  absl::MutexLock lock(&s.mu);
  s.pending.push_back(Pending{event, std::move(done)});
  return absl::OkStatus();
}

// Events of one stream complete in order, so waiting on the oldest first
// never delays a later one.
void CudaDevice::Wait(Stream& s) {
  cudaSetDevice(ordinal_);
  for (;;) {
    Pending p;
    {
      absl::MutexLock lock(&s.mu);
      auto ready = [&s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
        return s.stop || !s.pending.empty();
      };
      s.mu.Await(absl::Condition(&ready));
      if (s.pending.empty()) return;
      p = std::move(s.pending.front());
      s.pending.pop_front();
    }
    cudaError_t err = cudaEventSynchronize(p.event);
    cudaEventDestroy(p.event);
    absl::Status st = err == cudaSuccess ? absl::OkStatus() : CudaError(err, "copy failed");
    if (p.done) p.done(std::move(st));
  }
}

std::string Describe(int ordinal) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) return absl::StrCat("cuda:", ordinal);
  return absl::StrFormat("cuda:%d %s (%.1f GiB)", ordinal, prop.name,
                         static_cast<double>(prop.totalGlobalMem) / (1ull << 30));
}

}  // namespace

bool BuiltWithCuda() { return true; }

int CudaDeviceCount(std::string* why) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why != nullptr)
      *why = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorName(err), " (",
                          cudaGetErrorString(err), ")");
    cudaGetLastError();
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "cudaGetDeviceCount: 0 devices";
  return n;
}

absl::StatusOr<std::shared_ptr<Device>> CreateCudaDevice(int ordinal, int streams) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count == 0) return absl::FailedPreconditionError(absl::StrCat("no CUDA device: ", why));
  if (ordinal < 0 || ordinal >= count)
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ordinal ", ordinal, " out of range (", count, " devices)"));
  auto dev = std::make_shared<CudaDevice>(ordinal, Describe(ordinal));
  absl::Status st = dev->Init(streams);
  if (!st.ok()) return st;
  return std::shared_ptr<Device>(std::move(dev));
}

}  // namespace kvtier::tiers::hbm
