// The device seam without a GPU: device names, the device-only 8B size (its
// shapes, its page layout, its page-key root), and --device=cuda failing
// with a reason where there is no CUDA decoder or no GPU.
#include <gtest/gtest.h>

#include "kvtier/decoder/device.h"
#include "kvtier/decoder/session.h"
#include "kvtier/gpu_arena.h"

namespace kvtier::decoder {
namespace {

TEST(DeviceTest, ParsesDevicesAndWeightTypes) {
  EXPECT_EQ(*ParseDevice("cpu"), DeviceKind::kCpu);
  EXPECT_EQ(*ParseDevice("cuda"), DeviceKind::kCuda);
  EXPECT_FALSE(ParseDevice("gpu").ok());
  EXPECT_EQ(*ParseGpuWeights("bf16"), TensorDtype::kBF16);
  EXPECT_EQ(*ParseGpuWeights("fp32"), TensorDtype::kF32);
  EXPECT_FALSE(ParseGpuWeights("int8").ok());
}

TEST(DeviceTest, Llama3_8bShapes) {
  auto c = DeviceRandomConfig("llama3-8b");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->Validate().ok());
  EXPECT_EQ(c->num_hidden_layers, 32u);
  EXPECT_EQ(c->num_attention_heads, 32u);
  EXPECT_EQ(c->num_key_value_heads, 8u);
  EXPECT_EQ(c->head_dim, 128u);
  EXPECT_EQ(c->hidden_size, 4096u);
  EXPECT_EQ(c->intermediate_size, 14336u);
  EXPECT_EQ(c->vocab_size, 128256u);
  EXPECT_EQ(c->rope_theta, 500000.0f);
  EXPECT_FALSE(c->tie_word_embeddings);
  // 64-token bf16 pages: 8 MiB, within a daemon page and its 16 MiB slabs.
  Layout l = KvLayoutFor(*c, 64, Dtype::kBf16);
  EXPECT_TRUE(l.Validate().ok());
  EXPECT_EQ(l.PageBytes(), 8ull << 20);
  EXPECT_FALSE(DeviceRandomConfig("124m").ok());
  EXPECT_FALSE(DeviceRandomFingerprint(*c, 1) == DeviceRandomFingerprint(*c, 2));
  EXPECT_TRUE(DeviceRandomFingerprint(*c, 1) == DeviceRandomFingerprint(*c, 1));
  // GPU weights in bf16 / fp16 compute other KV than fp32: other keys;
  // fp32 keeps the CPU session's (pages shared across devices).
  const PageKey fp = DeviceRandomFingerprint(*c, 1);
  EXPECT_TRUE(WithGpuWeights(fp, TensorDtype::kF32) == fp);
  EXPECT_FALSE(WithGpuWeights(fp, TensorDtype::kBF16) == fp);
  EXPECT_FALSE(WithGpuWeights(fp, TensorDtype::kF16) == fp);
  EXPECT_FALSE(WithGpuWeights(fp, TensorDtype::kBF16) == WithGpuWeights(fp, TensorDtype::kF16));
}

TEST(DeviceTest, DeviceOnlySizeNeedsCuda) {
  SessionOptions o;
  o.size = "llama3-8b";
  o.use_daemon = false;
  auto s = DecoderSession::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
}

TEST(DeviceTest, CudaWithoutGpuFailsAtStart) {
  std::string why;
  if (CudaDecoderBuilt() && GpuArena::CudaAvailable(&why)) GTEST_SKIP() << "a GPU is present";
  SessionOptions o;
  o.device = DeviceKind::kCuda;
  o.use_daemon = false;
  auto s = DecoderSession::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  KvCacheOptions kv{KvLayoutFor(*NamedConfig("tiny"), 16, Dtype::kFp16), 4, 0};
  kv.on_gpu = true;
  EXPECT_FALSE(PagedKvCache::Create(kv).ok());
}

}  // namespace
}  // namespace kvtier::decoder
