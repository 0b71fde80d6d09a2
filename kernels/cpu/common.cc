// Shared pieces of the kernels library: layout bridging from kvtier::Layout,
// validation, run-time ISA dispatch, the worker count and CudaAvailable().
#include <atomic>

#include "absl/strings/str_cat.h"
#include "cpu/cpu_ops.h"
#include "cpu/worker_pool.h"
#include "kvtier/kernels/attention.h"

#if defined(KVTIER_KERNELS_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace kvtier::kernels {
namespace {

std::atomic<bool> force_portable{false};

bool CpuHasAvx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return has;
}

}  // namespace

static_assert(uint32_t(KvDtype::kFp32) == uint32_t(Dtype::kFp32));
static_assert(uint32_t(KvDtype::kFp16) == uint32_t(Dtype::kFp16));
static_assert(uint32_t(KvDtype::kBf16) == uint32_t(Dtype::kBf16));
static_assert(uint32_t(KvDtype::kFp8E4M3) == uint32_t(Dtype::kFp8E4M3));
static_assert(uint32_t(KvDtype::kInt8) == uint32_t(Dtype::kInt8));

KvDtype ToKvDtype(Dtype d) { return static_cast<KvDtype>(static_cast<uint32_t>(d)); }

PagedKv MakePagedKv(const Layout& layout, void* arena, uint64_t num_pages) {
  PagedKv kv;
  kv.arena = arena;
  kv.num_pages = num_pages;
  kv.layers = layout.layers;
  kv.kv_heads = layout.kv_heads;
  kv.head_dim = layout.head_dim;
  kv.tokens_per_page = layout.tokens_per_page;
  kv.dtype = ToKvDtype(layout.dtype);
  kv.layer = 0;
  return kv;
}

absl::Status ValidatePagedKv(const PagedKv& kv) {
  auto bad = [](absl::string_view field, uint64_t value, absl::string_view want) {
    return absl::InvalidArgumentError(
        absl::StrCat("paged kv: ", field, " = ", value, " (", want, ")"));
  };
  if (kv.ElemBytes() == 0) return bad("dtype", uint32_t(kv.dtype), "want 1..5");
  if (kv.layers == 0) return bad("layers", 0, "must be > 0");
  if (kv.kv_heads == 0) return bad("kv_heads", 0, "must be > 0");
  if (kv.head_dim == 0) return bad("head_dim", 0, "must be > 0");
  if (kv.tokens_per_page == 0) return bad("tokens_per_page", 0, "must be > 0");
  if (kv.layer >= kv.layers) return bad("layer", kv.layer, absl::StrCat("must be < layers = ", kv.layers));
  if (kv.arena == nullptr) return absl::InvalidArgumentError("paged kv: arena is null");
  if (reinterpret_cast<uintptr_t>(kv.arena) % 4 != 0)
    return bad("arena address", reinterpret_cast<uintptr_t>(kv.arena), "must be 4-byte aligned");
  return absl::OkStatus();
}

bool CudaAvailable() {
#if defined(KVTIER_KERNELS_CUDA)
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

int CpuThreads() { return internal::WorkerPool::Get().threads(); }

const char* CpuKernelIsa() { return internal::ActiveOps().name; }

void ForcePortableCpuKernels(bool portable) { force_portable.store(portable); }

namespace internal {

const CpuOps& ActiveOps() {
  if (!force_portable.load(std::memory_order_relaxed) && CpuHasAvx2()) return Avx2Ops();
  return PortableOps();
}

}  // namespace internal
}  // namespace kvtier::kernels
