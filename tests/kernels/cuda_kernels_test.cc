// CUDA kernels vs the double-precision reference (label gpu). Pages are
// filled on the CPU, copied to the device, and every CUDA result is compared
// with the reference on the host copy; scatter/convert must write the same
// bytes as the CPU. Skips (GTEST_SKIP) when there is no CUDA device.
#include <cuda_runtime_api.h>

#include <cmath>

#include "kernel_test_util.h"
#include "kvtier/kernels/cuda.h"
#include "kvtier/kernels/quant.h"
#include "reference/reference.h"

namespace kvtier::kernels::testing {
namespace {

#define SKIP_WITHOUT_GPU()                                                              \
  do {                                                                                  \
    int n = 0;                                                                          \
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)                                \
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none): CUDA kernels not run"; \
  } while (0)

// A device copy of a host buffer, freed on scope exit.
template <typename T>
class Dev {
 public:
  explicit Dev(size_t n) : n_(n) { EXPECT_EQ(cudaMalloc(&p_, n * sizeof(T) + 4), cudaSuccess); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) { Put(h.data()); }
  ~Dev() { cudaFree(p_); }
  void Put(const T* h) { ASSERT_EQ(cudaMemcpy(p_, h, n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess); }
  std::vector<T> Get() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  T* get() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
  size_t n_;
};

PagedKv OnDevice(const PagedKv& host, Dev<uint8_t>& arena) {
  arena.Put(static_cast<const uint8_t*>(host.arena));
  PagedKv kv = host;
  kv.arena = arena.get();
  return kv;
}

double CudaDecodeVsReference(uint32_t d, uint32_t tpp, uint32_t group, KvDtype dt,
                             const std::vector<uint32_t>& lens, uint32_t window = 0) {
  const uint32_t kv_heads = 2, q_heads = kv_heads * group;
  uint32_t total = 0, max_len = 0;
  for (uint32_t l : lens) total += l, max_len = std::max(max_len, l);
  TestArena arena(kv_heads, d, tpp, dt, total / tpp + 2 * uint32_t(lens.size()) + 4);
  const uint32_t stride = (max_len + tpp - 1) / tpp + 1;
  std::vector<int32_t> tables(lens.size() * stride, 0), seq_lens;
  for (size_t i = 0; i < lens.size(); ++i) {
    auto t = arena.TakeTable(lens[i]);
    std::copy(t.begin(), t.end(), tables.begin() + i * stride);
    arena.Fill(t, lens[i]);
    seq_lens.push_back(int32_t(lens[i]));
  }
  auto q = arena.Random(lens.size() * q_heads * d);
  DecodeParams p{arena.kv(), uint32_t(lens.size()), q_heads, 1.f / std::sqrt(float(d)), window,
                 q.data(), nullptr, tables.data(), stride, seq_lens.data(), max_len};
  const auto want = reference::Decode(p);
  Dev<uint8_t> darena(arena.kv().PageBytes() * arena.kv().num_pages);
  Dev<float> dq(q), dout(q.size());
  Dev<int32_t> dtables(tables), dlens(seq_lens);
  DecodeParams dp = p;
  dp.kv = OnDevice(arena.kv(), darena);
  dp.q = dq.get();
  dp.out = dout.get();
  dp.block_tables = dtables.get();
  dp.seq_lens = dlens.get();
  Dev<uint8_t> ws(DecodeWorkspaceBytesCuda(dp) + 1);
  EXPECT_EQ(PagedDecodeCuda(dp, {ws.get(), DecodeWorkspaceBytesCuda(dp)}, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return MaxAbsDiff(dout.Get(), want);
}

TEST(CudaKernels, DecodeSweepMatchesReference) {
  SKIP_WITHOUT_GPU();
  for (uint32_t d : {64u, 80u, 128u}) {
    for (uint32_t tpp : {1u, 3u, 16u, 256u}) {
      for (uint32_t g : {1u, 4u, 8u}) {
        for (KvDtype dt : kAllDtypes) {
          SCOPED_TRACE(absl::StrCat("d=", d, " tpp=", tpp, " group=", g, " ", Name(dt)));
          const std::vector<uint32_t> lens = {1, tpp + 1, 2 * tpp + tpp / 2 + 1, 5 * tpp + 2, 300};
          EXPECT_LE(CudaDecodeVsReference(d, tpp, g, dt, lens), kKernelVsReferenceTol);
        }
      }
    }
  }
  for (KvDtype dt : kAllDtypes) {  // long: many splits + combine
    EXPECT_LE(CudaDecodeVsReference(128, 256, 4, dt, {4096, 1, 2049}), kKernelVsReferenceTol);
  }
  EXPECT_LE(CudaDecodeVsReference(64, 16, 4, KvDtype::kFp16, {1, 50, 1030}, 100),
            kKernelVsReferenceTol);
}

TEST(CudaKernels, PrefillMatchesReference) {
  SKIP_WITHOUT_GPU();
  for (KvDtype dt : kAllDtypes) {
    for (uint32_t tpp : {1u, 16u, 256u}) {
      SCOPED_TRACE(absl::StrCat(Name(dt), " tpp=", tpp));
      const uint32_t d = 80, q_heads = 8, cached = tpp + 5, n = 40, len = cached + n;
      TestArena arena(2, d, tpp, dt, len / tpp + 3);
      auto table = arena.TakeTable(len);
      arena.Fill(table, len);
      auto q = arena.Random(size_t(n) * q_heads * d);
      PrefillParams p{arena.kv(), q_heads, 0.11f, 0, q.data(), nullptr, table.data(),
                      uint32_t(table.size()), cached, n};
      const auto want = reference::Prefill(p);
      Dev<uint8_t> darena(arena.kv().PageBytes() * arena.kv().num_pages);
      Dev<float> dq(q), dout(q.size());
      Dev<int32_t> dtable(table);
      PrefillParams dp = p;
      dp.kv = OnDevice(arena.kv(), darena);
      dp.q = dq.get();
      dp.out = dout.get();
      dp.block_table = dtable.get();
      ASSERT_EQ(PagedPrefillCuda(dp, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_LE(MaxAbsDiff(dout.Get(), want), kKernelVsReferenceTol);
    }
  }
}

TEST(CudaKernels, ScatterGatherConvertMatchCpuBytes) {
  SKIP_WITHOUT_GPU();
  for (KvDtype dt : kAllDtypes) {
    SCOPED_TRACE(Name(dt));
    const uint32_t len = 50, row = 2 * 64;
    TestArena cpu(2, 64, 16, dt, 4), gpu(2, 64, 16, dt, 4);
    std::vector<int32_t> table = {2, 0, 3, 1};
    auto k = cpu.Random(len * row), v = cpu.Random(len * row, -3, 3);
    ASSERT_TRUE(ScatterKvCpu({cpu.kv(), table.data(), 4, 0, len, k.data(), v.data()}).ok());
    const size_t bytes = cpu.kv().PageBytes() * 4;
    Dev<uint8_t> darena(bytes);
    const PagedKv dkv = OnDevice(gpu.kv(), darena);
    Dev<float> dk(k), dv(v);
    Dev<int32_t> dtable(table);
    ASSERT_EQ(ScatterKvCuda({dkv, dtable.get(), 4, 0, len, dk.get(), dv.get()}, nullptr), cudaSuccess);
    auto got = darena.Get();
    ASSERT_EQ(0, std::memcmp(got.data(), cpu.kv().arena, bytes)) << "scatter bytes differ";

    Dev<float> gk(k.size()), gv(v.size());
    ASSERT_EQ(GatherKvCuda({dkv, dtable.get(), 4, 0, len, gk.get(), gv.get()}, nullptr), cudaSuccess);
    std::vector<float> ck(k.size()), cv(v.size());
    ASSERT_TRUE(GatherKvCpu({cpu.kv(), table.data(), 4, 0, len, ck.data(), cv.data()}).ok());
    EXPECT_EQ(gk.Get(), ck);
    EXPECT_EQ(gv.Get(), cv);

    // Quantize the device pages to int8 on both sides.
    TestArena cq(2, 64, 16, KvDtype::kInt8, 4);
    Dev<uint8_t> dq(cq.kv().PageBytes() * 4);
    const PagedKv dqkv = OnDevice(cq.kv(), dq);
    ASSERT_TRUE(ConvertPagesCpu({cpu.kv(), cq.kv(), table.data(), table.data(), 4}).ok());
    ASSERT_EQ(ConvertPagesCuda({dkv, dqkv, dtable.get(), dtable.get(), 4}, nullptr), cudaSuccess);
    auto qgot = dq.Get();
    EXPECT_EQ(0, std::memcmp(qgot.data(), cq.kv().arena, cq.kv().PageBytes() * 4));
  }
}

TEST(CudaKernels, LaunchersRejectBadShapes) {
  SKIP_WITHOUT_GPU();
  DecodeParams p;
  p.kv.layers = 1;
  p.kv.kv_heads = 2;
  p.kv.head_dim = 512;  // > 256
  p.kv.tokens_per_page = 16;
  p.kv.arena = reinterpret_cast<void*>(64);
  p.num_q_heads = 2;
  p.max_seq_len = 1;
  EXPECT_EQ(PagedDecodeCuda(p, {}, nullptr), cudaErrorInvalidValue);
  p.kv.head_dim = 64;
  p.num_q_heads = 3;
  EXPECT_EQ(PagedDecodeCuda(p, {}, nullptr), cudaErrorInvalidValue);
}

TEST(CudaKernels, CudaAvailableAgreesWithRuntime) {
  int n = 0;
  const bool runtime = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  EXPECT_EQ(CudaAvailable(), runtime);
}

}  // namespace
}  // namespace kvtier::kernels::testing
