// Shared fixtures of the kernel tests: an arena of pages with a shuffled
// (non-contiguous) page pool, sequences filled through ScatterKvCpu with
// random fp32 K/V (kept for error bounds), and comparison helpers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kvtier/kernels/attention.h"
#include "kvtier/kernels/numeric.h"
#include "kvtier/kernels/page_ops.h"

namespace kvtier::kernels::testing {

inline const KvDtype kAllDtypes[] = {KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16,
                                     KvDtype::kInt8, KvDtype::kFp8E4M3};

inline std::string Name(KvDtype d) {
  switch (d) {
    case KvDtype::kFp32: return "fp32";
    case KvDtype::kFp16: return "fp16";
    case KvDtype::kBf16: return "bf16";
    case KvDtype::kInt8: return "int8";
    case KvDtype::kFp8E4M3: return "fp8";
  }
  return "?";
}

// An arena of `pages` pages (2 layers; kernels run on layer 1 so the layer
// offset is exercised) and a shuffled pool to draw block tables from.
class TestArena {
 public:
  TestArena(uint32_t kv_heads, uint32_t head_dim, uint32_t tpp, KvDtype dtype, uint32_t pages,
            uint32_t seed = 1)
      : rng_(seed) {
    kv_.layers = 2;
    kv_.kv_heads = kv_heads;
    kv_.head_dim = head_dim;
    kv_.tokens_per_page = tpp;
    kv_.dtype = dtype;
    kv_.layer = 1;
    kv_.num_pages = pages;
    storage_.assign((kv_.PageBytes() * pages + 7) / 8 + 1, 0);
    kv_.arena = storage_.data();
    // Garbage everywhere first: a kernel that reads outside its pages or
    // layer sees NaNs and fails the comparison.
    std::fill(reinterpret_cast<uint8_t*>(storage_.data()),
              reinterpret_cast<uint8_t*>(storage_.data()) + kv_.PageBytes() * pages, 0x7F);
    for (uint32_t p = 0; p < pages; ++p) pool_.push_back(int32_t(p));
    std::shuffle(pool_.begin(), pool_.end(), rng_);
  }

  const PagedKv& kv() const { return kv_; }
  std::mt19937& rng() { return rng_; }

  // Pages for `tokens` tokens (plus `extra` spare entries), from the pool.
  std::vector<int32_t> TakeTable(uint32_t tokens, uint32_t extra = 0) {
    const uint32_t n = (tokens + kv_.tokens_per_page - 1) / kv_.tokens_per_page + extra;
    if (n > pool_.size()) ADD_FAILURE() << "test arena too small";
    std::vector<int32_t> t(pool_.end() - n, pool_.end());
    pool_.resize(pool_.size() - n);
    return t;
  }

  std::vector<float> Random(size_t n, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> x(n);
    for (float& v : x) v = u(rng_);
    return x;
  }

  // Writes random K/V for positions [0, len) of a sequence in two scatter
  // calls (the second at an unaligned start) and returns the fp32 rows
  // ([len][kv_heads][head_dim] each).
  std::pair<std::vector<float>, std::vector<float>> Fill(const std::vector<int32_t>& table,
                                                         uint32_t len) {
    const size_t row = size_t(kv_.kv_heads) * kv_.head_dim;
    auto k = Random(row * len), v = Random(row * len);
    const uint32_t first = len / 3;
    for (auto [start, n] : {std::pair<uint32_t, uint32_t>{0, first}, {first, len - first}}) {
      KvCopyParams c{kv_, table.data(), uint32_t(table.size()), start, n,
                     k.data() + start * row, v.data() + start * row};
      EXPECT_TRUE(ScatterKvCpu(c).ok());
    }
    return {std::move(k), std::move(v)};
  }

 private:
  PagedKv kv_;
  std::vector<uint64_t> storage_;
  std::vector<int32_t> pool_;
  std::mt19937 rng_;
};

inline double MaxAbsDiff(const std::vector<float>& got, const std::vector<double>& want) {
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - want[i]);
    if (!(d <= m)) m = std::isnan(d) ? INFINITY : d;
  }
  return m;
}

inline std::vector<uint8_t> WsBuffer(size_t bytes) { return std::vector<uint8_t>(bytes + 64); }

// Kernel vs reference on the same page contents: both read identical
// element values, so the only difference is fp32 arithmetic (fp32 dot
// products of head_dim <= 128 terms, online-softmax rescaling, fp32 sums of
// up to 4k weights, one fp32 rounding of int8/fp8 element * scale). With
// |q|, |k|, |v| <= 1 a score carries about sqrt(d) * 2^-24 * sm_scale * d
// ~ 1e-6 of error and the output, a convex combination of |v| <= 1, about
// the same; 1e-4 absolute leaves two orders of margin for every dtype.
inline constexpr double kKernelVsReferenceTol = 1e-4;

}  // namespace kvtier::kernels::testing
