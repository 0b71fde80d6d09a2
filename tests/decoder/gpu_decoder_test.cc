// --device=cuda against the CPU path (label gpu): the same weights give the
// same greedy tokens (a different token only at a near-tie of the CPU's
// logits), on the tiny model and the 124m one, fp32 and bf16 weights, with
// prompts and decodes crossing page boundaries; batched decode of several
// sequences; chunked prefill equals one pass. Skips without a GPU.
#include <gtest/gtest.h>

#include "kvtier/decoder/sampler.h"
#include "tests/decoder/decoder_test_util.h"
#include "tests/decoder/gpu_compare.h"

namespace kvtier::decoder::testing {
namespace {

// Logits agree within `logit_tol`; a token may then differ only where the
// CPU's own top two logits are closer than the error allows (2 x tol).
void ExpectSameOrNearTie(const Comparison& r, uint32_t n, double logit_tol) {
  EXPECT_LT(r.max_logit_diff, logit_tol);
  if (r.diverged) {
    EXPECT_LT(r.margin_at_divergence, 2 * logit_tol) << "tokens differ after " << r.same_tokens;
  } else {
    EXPECT_EQ(r.same_tokens, n);
  }
}

// fp32 weights: only the order of fp32 sums differs. bf16 weights: GEMM
// inputs are rounded to bf16 on the GPU (8 bits of mantissa), not on the CPU.
constexpr double kTolFp32 = 2e-3;
constexpr double kTolBf16Tiny = 0.25;  // weights of std 0.1: logits of std ~1.6
constexpr double kTolBf16 = 0.1;       // 124m, std 0.02: logits of std ~0.5

TEST(GpuDecoderTest, TinyFp32MatchesCpuAcrossPageBoundaries) {
  KVTIER_REQUIRE_CUDA_DECODER();
  auto w = TinyWeights(5);
  // 16-token pages: the 40-token prompt fills 2 pages and part of a 3rd;
  // 30 new tokens cross 48 and 64.
  DeviceModel cpu = MakeModel(*w, false, TensorDtype::kF32, 16, Dtype::kFp32, 16);
  DeviceModel gpu = MakeModel(*w, true, TensorDtype::kF32, 16, Dtype::kFp32, 16);
  ASSERT_TRUE(cpu.model && gpu.model);
  Comparison r = CompareGreedy(*cpu.model, *gpu.model, PromptTokens(40, 3), 30);
  ExpectSameOrNearTie(r, 30, kTolFp32);
  EXPECT_EQ(gpu.cache->free_pages(), gpu.cache->num_pages());
}

TEST(GpuDecoderTest, TinyBf16WeightsAndFp16PagesStayNearCpu) {
  KVTIER_REQUIRE_CUDA_DECODER();
  auto w = TinyWeights(6);
  RoundWeightsToBf16(*w);  // a bf16 checkpoint: the upload loses nothing
  DeviceModel cpu = MakeModel(*w, false, TensorDtype::kF32, 16, Dtype::kFp16, 16);
  DeviceModel gpu = MakeModel(*w, true, TensorDtype::kBF16, 16, Dtype::kFp16, 16);
  ASSERT_TRUE(cpu.model && gpu.model);
  Comparison r = CompareGreedy(*cpu.model, *gpu.model, PromptTokens(33, 4), 20);
  ExpectSameOrNearTie(r, 20, kTolBf16Tiny);
}

class Gpu124mTest : public ::testing::TestWithParam<TensorDtype> {};

TEST_P(Gpu124mTest, MatchesCpu) {
  KVTIER_REQUIRE_CUDA_DECODER();
  auto w = RandomWeights(*NamedConfig("124m"), 3);
  const bool bf16 = GetParam() == TensorDtype::kBF16;
  if (bf16) RoundWeightsToBf16(*w);
  // 64-token pages, fp16 KV (the default page dtype): prompt of 150 tokens
  // (2 full pages + part), 24 new tokens crossing 192.
  DeviceModel cpu = MakeModel(*w, false, TensorDtype::kF32, 64, Dtype::kFp16, 8);
  DeviceModel gpu = MakeModel(*w, true, GetParam(), 64, Dtype::kFp16, 8);
  ASSERT_TRUE(cpu.model && gpu.model);
  Comparison r = CompareGreedy(*cpu.model, *gpu.model, PromptTokens(150, 9), 24);
  ExpectSameOrNearTie(r, 24, bf16 ? kTolBf16 : kTolFp32);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, Gpu124mTest,
                         ::testing::Values(TensorDtype::kF32, TensorDtype::kBF16),
                         [](const auto& info) { return std::string(TensorDtypeName(info.param)); });

// Two sequences of different lengths decoded in one Forward (the batched
// scatter and split-K decode kernels) give each one's own logits.
TEST(GpuDecoderTest, BatchedDecodeMatchesCpu) {
  KVTIER_REQUIRE_CUDA_DECODER();
  auto w = TinyWeights(7);
  std::vector<float> cl, gl;
  for (bool gpu : {false, true}) {
    DeviceModel m = MakeModel(*w, gpu, TensorDtype::kF32, 16, Dtype::kFp32, 16);
    ASSERT_TRUE(m.model);
    const SeqId a = m.cache->AddSequence(), b = m.cache->AddSequence();
    const std::vector<uint32_t> pa = PromptTokens(21, 1), pb = PromptTokens(35, 2);
    std::vector<float> l;
    ASSERT_TRUE(m.model->Forward({{a, pa}}, &l).ok());
    ASSERT_TRUE(m.model->Forward({{b, pb}}, &l).ok());
    const uint32_t ta = 5, tb = 9;
    ASSERT_TRUE(m.model->Forward({{a, {&ta, 1}}, {b, {&tb, 1}}}, gpu ? &gl : &cl).ok());
  }
  ASSERT_EQ(cl.size(), gl.size());
  std::vector<double> ref(cl.begin(), cl.end());
  EXPECT_LT(MaxAbsDiff(gl.data(), ref.data(), ref.size()), 2e-3);
}

// A prefill split into passes of 16 rows equals one pass of all 45 rows.
TEST(GpuDecoderTest, ChunkedPrefillEqualsOnePass) {
  KVTIER_REQUIRE_CUDA_DECODER();
  auto w = TinyWeights(8);
  DeviceModel one = MakeModel(*w, true, TensorDtype::kF32, 16, Dtype::kFp32, 8);
  DeviceModel chunked = MakeModel(*w, true, TensorDtype::kF32, 16, Dtype::kFp32, 8, /*rows=*/16);
  ASSERT_TRUE(one.model && chunked.model);
  const std::vector<uint32_t> prompt = PromptTokens(45, 5);
  std::vector<float> a, b;
  ASSERT_TRUE(one.model->Forward({{one.cache->AddSequence(), prompt}}, &a, /*all_logits=*/true).ok());
  ASSERT_TRUE(chunked.model->Forward({{chunked.cache->AddSequence(), prompt}}, &b, true).ok());
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), prompt.size() * w->config.vocab_size);
  std::vector<double> ref(a.begin(), a.end());
  EXPECT_LT(MaxAbsDiff(b.data(), ref.data(), ref.size()), 1e-4);
}

}  // namespace
}  // namespace kvtier::decoder::testing
