// Prefix reuse on the GPU through a real kvtierd (--hbm_device=cuda, label
// gpu): the decoder's KV arena is CUDA memory registered once by IPC handle;
// warm runs restore pages straight into it (from the HBM tier, host RAM or
// NVMe) and give exactly the tokens of a run from scratch; PUTs read the
// pages from it. Skips without a GPU.
#include <gtest/gtest.h>

#include <set>

#include "kvtier/decoder/generator.h"
#include "kvtier/decoder/prefix_store.h"
#include "tests/decoder/decoder_test_util.h"
#include "tests/decoder/gpu_compare.h"
#include "tests/integration/daemon_process.h"

namespace kvtier::decoder::testing {
namespace {

constexpr uint32_t kTpp = 16;

class GpuReuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVTIER_REQUIRE_CUDA_DECODER();
    itest::DaemonOptions o;
    o.nvme = true;
    o.flags = {"--hbm_device=cuda", "--hbm_bytes=2MiB", "--host_bytes=2MiB",
               "--prefetch_lookahead=false"};
    auto d = itest::DaemonProcess::Start(o, "default", "", 60000);  // CUDA init is slow
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
    w_ = TinyWeights(11);
    m_ = MakeModel(*w_, true, TensorDtype::kF32, kTpp, Dtype::kFp16, 32);
    ASSERT_TRUE(m_.model);
    auto store = PrefixStore::Connect(itest::Options(daemon_->endpoint()), m_.cache.get(),
                                      ModelFingerprint(*w_));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  void TearDown() override {
    store_.reset();
    if (daemon_) (void)daemon_->Stop();
  }
  GenerateResult Run(const std::vector<uint32_t>& prompt, bool reuse, bool layerwise = false) {
    Generator g(m_.model.get(), reuse ? store_.get() : nullptr);
    auto r = g.Generate(prompt, {.max_new_tokens = 8, .keep_logits = true,
                                 .layerwise_restore = layerwise});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : GenerateResult{};
  }

  std::unique_ptr<itest::DaemonProcess> daemon_;
  std::unique_ptr<ModelWeights> w_;
  DeviceModel m_;
  std::unique_ptr<PrefixStore> store_;
};

TEST_F(GpuReuseTest, RestoredPagesInGpuMemoryGiveTheSameTokens) {
  // On, past and short of page boundaries (as the CPU reuse test).
  const std::pair<uint32_t, uint32_t> cases[] = {{10, 0}, {16, 15}, {17, 16}, {33, 32}, {50, 48}};
  uint32_t salt = 0;
  for (auto [len, expect_restored] : cases) {
    std::vector<uint32_t> prompt = PromptTokens(len, ++salt);
    GenerateResult scratch = Run(prompt, false);
    GenerateResult cold = Run(prompt, true);
    EXPECT_EQ(cold.stats.restored_tokens, 0u) << len;
    EXPECT_EQ(cold.stats.reuse_note, "") << len;
    GenerateResult warm = Run(prompt, true, /*layerwise=*/true);  // falls back to whole pages
    EXPECT_FALSE(warm.stats.layerwise) << "no layer-wise GET into GPU buffers";
    EXPECT_EQ(warm.stats.restored_tokens, expect_restored) << len;
    EXPECT_EQ(warm.stats.reuse_note, "") << len;
    EXPECT_EQ(warm.tokens, scratch.tokens) << len;
    EXPECT_EQ(cold.tokens, scratch.tokens) << len;
    for (size_t i = 0; i < scratch.logits.size() && i < warm.logits.size(); ++i) {
      std::vector<double> ref(scratch.logits[i].begin(), scratch.logits[i].end());
      EXPECT_LT(MaxAbsDiff(warm.logits[i].data(), ref.data(), ref.size()), 1e-3) << len << " " << i;
    }
  }
  EXPECT_EQ(m_.cache->free_pages(), m_.cache->num_pages());
}

// Enough pages (24 prompts x 12 pages of 16 KiB) that the 2 MiB host and
// HBM tiers overflow to NVMe: restores
// come from more than one tier and stay exact.
TEST_F(GpuReuseTest, RestoresFromSeveralTiersAreExact) {
  std::set<TierKind> seen;
  for (uint32_t salt = 100; salt < 124; ++salt) {
    std::vector<uint32_t> prompt = PromptTokens(kTpp * 12 + 3, salt);
    GenerateResult scratch = Run(prompt, false);
    (void)Run(prompt, true);
    GenerateResult warm = Run(prompt, true);
    EXPECT_EQ(warm.tokens, scratch.tokens) << salt;
    EXPECT_EQ(warm.stats.restored_tokens, kTpp * 12) << salt;
    for (TierKind t : warm.stats.restored_from) seen.insert(t);
  }
  std::string tiers;
  for (TierKind t : seen) tiers += std::string(TierKindName(t)) + " ";
  std::printf("  restored from: %s\n", tiers.c_str());
  EXPECT_GE(seen.size(), 1u);
}

}  // namespace
}  // namespace kvtier::decoder::testing
