// Checkpoint I/O: safetensors round trips in every dtype, HF config.json
// parsing, and clear errors for malformed files (truncated header, bad
// dtype, missing tensor, shape mismatch, truncated data).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "kvtier/decoder/safetensors.h"
#include "kvtier/decoder/weights.h"
#include "tests/decoder/decoder_test_util.h"

namespace kvtier::decoder::testing {
namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvtier-dec-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string File(const std::string& n) const { return dir_ + "/" + n; }
  void WriteRaw(const std::string& name, const std::string& header, const std::string& data) {
    std::ofstream out(File(name), std::ios::binary);
    uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << data;
  }
  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripEveryDtype) {
  std::vector<float> v = {0.0f, 1.0f, -2.5f, 3.14159f, 1e-3f, -65000.0f, 1e-6f, 0.333333f};
  for (TensorDtype d : {TensorDtype::kF32, TensorDtype::kF16, TensorDtype::kBF16}) {
    std::string path = File("t.safetensors");
    ASSERT_TRUE(WriteSafetensors(path, {{"a.weight", {2, 4}, v.data()}}, d).ok());
    auto f = SafetensorsFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status();
    const TensorInfo* t = (*f)->Find("a.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, d);
    std::vector<float> back;
    ASSERT_TRUE((*f)->ReadF32("a.weight", {2, 4}, &back).ok());
    // Relative precision of the stored format: 2^-24, 2^-11, 2^-8.
    const double rel = d == TensorDtype::kF32 ? 0 : d == TensorDtype::kF16 ? 1.0 / 2048 : 1.0 / 256;
    for (size_t i = 0; i < v.size(); ++i)
      EXPECT_LE(std::fabs(back[i] - v[i]), rel * std::fabs(v[i]) + (d == TensorDtype::kF16 ? 6e-8 : 0))
          << TensorDtypeName(d) << " element " << i;
  }
}

TEST_F(CheckpointTest, HalfConversionsAreExactWhereRepresentable) {
  for (float f : {0.0f, 1.0f, -1.5f, 65504.0f, 6.103515625e-05f, 5.9604645e-08f})
    EXPECT_EQ(HalfToFloat(FloatToHalf(f)), f) << f;
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(1e6f))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 1.0f / 512)), 1.0f);  // ties to even
}

TEST_F(CheckpointTest, CheckpointRoundTripLoadsUnchanged) {
  auto w = TinyWeights(3);
  ASSERT_TRUE(WriteCheckpoint(dir_, *w, TensorDtype::kF32).ok());
  auto back = LoadCheckpoint(dir_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->config.ToJson(), w->config.ToJson());
  EXPECT_EQ((*back)->embed, w->embed);
  EXPECT_EQ((*back)->layers[1].down_proj, w->layers[1].down_proj);
  EXPECT_EQ((*back)->lm_head, w->lm_head);
  EXPECT_EQ((*back)->ParameterCount(), w->ParameterCount());
}

TEST_F(CheckpointTest, TiedEmbeddingsAndBf16) {
  auto c = NamedConfig("tiny");
  c->tie_word_embeddings = true;
  auto w = RandomWeights(*c, 5, 0.1f);
  ASSERT_TRUE(w->lm_head.empty());
  ASSERT_TRUE(WriteCheckpoint(dir_, *w, TensorDtype::kBF16).ok());
  auto f = SafetensorsFile::Open(File("model.safetensors"));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->Find("lm_head.weight"), nullptr);
  EXPECT_NE((*f)->Find("model.layers.1.mlp.gate_proj.weight"), nullptr);
  auto back = LoadCheckpoint(dir_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->LmHead(), (*back)->embed.data());
  EXPECT_NEAR((*back)->embed[7], w->embed[7], std::fabs(w->embed[7]) / 128);
}

TEST_F(CheckpointTest, TruncatedHeaderIsNamed) {
  std::ofstream(File("short.safetensors")) << "abc";
  auto f = SafetensorsFile::Open(File("short.safetensors"));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("truncated header"), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find("short.safetensors"), std::string::npos);
  WriteRaw("cut.safetensors", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", "");
  std::filesystem::resize_file(File("cut.safetensors"), 20);  // header cut mid-way
  f = SafetensorsFile::Open(File("cut.safetensors"));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("truncated header"), std::string::npos) << f.status();
}

TEST_F(CheckpointTest, MalformedEntriesAreNamed) {
  struct Case {
    std::string header, data, want;
  } cases[] = {
      // A dtype the decoder does not read is listed (not refused) but its
      // bytes are still checked against its shape.
      {R"({"w": {"dtype": "I64", "shape": [2], "data_offsets": [0, 8]}})", std::string(8, '\0'),
       "data_offsets span 8 bytes but shape [2] of I64 needs 16"},
      {R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", std::string(8, '\0'),
       "data_offsets span 8 bytes but shape [3] of F32 needs 12"},
      {R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", std::string(8, '\0'),
       "only 8 (truncated file?)"},
      {R"({"w": {"dtype": "F32", "shape": [2]}})", std::string(8, '\0'), "needs dtype, shape and data_offsets"},
      {"{not json", "", "not a JSON object"},
  };
  for (const Case& c : cases) {
    WriteRaw("bad.safetensors", c.header, c.data);
    auto f = SafetensorsFile::Open(File("bad.safetensors"));
    ASSERT_FALSE(f.ok()) << c.header;
    EXPECT_NE(f.status().message().find(c.want), std::string::npos) << f.status();
  }
}

TEST_F(CheckpointTest, MissingTensorAndShapeMismatchAreNamed) {
  auto w = TinyWeights(4);
  ASSERT_TRUE(WriteCheckpoint(dir_, *w, TensorDtype::kF16).ok());
  // Same checkpoint with one tensor left out.
  auto f = SafetensorsFile::Open(File("model.safetensors"));
  ASSERT_TRUE(f.ok());
  std::vector<std::vector<float>> keep;
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, info] : (*f)->tensors()) {
    if (name == "model.layers.1.self_attn.v_proj.weight") continue;
    keep.emplace_back();
    ASSERT_TRUE((*f)->ReadF32(name, info.shape, &keep.back()).ok());
    tensors.push_back({name, info.shape, nullptr});
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = keep[i].data();
  f->reset();
  ASSERT_TRUE(WriteSafetensors(File("model.safetensors"), tensors, TensorDtype::kF16).ok());
  auto loaded = LoadCheckpoint(dir_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("missing tensor \"model.layers.1.self_attn.v_proj.weight\""),
            std::string::npos) << loaded.status();
  // A config that disagrees with the tensors: every shape check names both.
  auto c = w->config;
  c.intermediate_size = 640;
  ASSERT_TRUE(WriteCheckpoint(dir_ + "/w", *w, TensorDtype::kF16).ok());
  std::ofstream(dir_ + "/w/config.json") << c.ToJson();
  loaded = LoadCheckpoint(dir_ + "/w");
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("has shape [512, 256], expected [640, 256]"), std::string::npos)
      << loaded.status();
}

TEST(ConfigTest, HuggingFaceFieldsAndErrors) {
  auto c = ParseConfigJson(R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048,
      "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
      "num_key_value_heads": 4, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
      "max_position_embeddings": 2048, "tie_word_embeddings": false, "eos_token_id": 2})", "tinyllama");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 64u);
  EXPECT_EQ(c->num_key_value_heads, 4u);
  EXPECT_EQ(c->eos_token_id, 2);
  auto bad = ParseConfigJson(R"({"vocab_size": 10, "hidden_size": 64, "intermediate_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 3})", "cfg.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cfg.json: model config: num_attention_heads 4 is not a multiple"),
            std::string::npos) << bad.status();
  bad = ParseConfigJson(R"({"vocab_size": 10, "hidden_size": 64})", "cfg.json");
  EXPECT_NE(bad.status().message().find("missing field \"intermediate_size\""), std::string::npos);
  bad = ParseConfigJson(R"({"vocab_size": "many"})", "cfg.json");
  EXPECT_NE(bad.status().message().find("\"vocab_size\" must be a positive integer"), std::string::npos);
  auto c124 = NamedConfig("124m");
  ASSERT_TRUE(c124.ok());
  EXPECT_EQ(c124->num_hidden_layers, 12u);
  EXPECT_EQ(c124->hidden_size, 768u);
  EXPECT_EQ(c124->num_attention_heads, 12u);
  EXPECT_FALSE(NamedConfig("7b").ok());
}

}  // namespace
}  // namespace kvtier::decoder::testing
