// The checkpoint loader against what Hugging Face does with the same files:
// q/k/v/o and MLP biases loaded and used (logits against the dense
// reference), a bias the config does not declare (or a declared one that is
// missing) refused by name, tensors the model never reads skipped whatever
// their dtype, absent config keys taking LlamaConfig's defaults, and the
// sliding window taken from config.json unless the caller overrides it. A
// session reads config.json before the weights (to size its KV arena) and
// refuses a checkpoint whose config.json changed in between.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kvtier/decoder/session.h"
#include "kvtier/decoder/weights.h"
#include "tests/decoder/decoder_test_util.h"

namespace kvtier::decoder::testing {
namespace {

constexpr double kFp32Tol = 2e-3;

// A tensor written verbatim: `dtype` is any safetensors name, `bytes` its data.
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvtier-loader-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `w` as an fp32 checkpoint in dir_, plus `extra` tensors in the same file.
  void Write(const ModelWeights& w, const std::vector<RawTensor>& extra = {}) {
    ASSERT_TRUE(WriteCheckpoint(dir_, w, TensorDtype::kF32).ok());
    if (extra.empty()) return;
    auto f = SafetensorsFile::Open(dir_ + "/model.safetensors");
    ASSERT_TRUE(f.ok()) << f.status();
    std::vector<RawTensor> all = extra;
    for (const auto& [name, info] : (*f)->tensors()) {
      std::vector<float> v;
      ASSERT_TRUE((*f)->ReadF32(name, info.shape, &v).ok());
      all.push_back({name, "F32", info.shape, std::string(reinterpret_cast<char*>(v.data()), v.size() * 4)});
    }
    f->reset();
    std::string header = "{", data;
    for (const RawTensor& t : all) {
      absl::StrAppend(&header, header.size() > 1 ? "," : "", "\"", t.name, "\":{\"dtype\":\"", t.dtype,
                      "\",\"shape\":[", absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", data.size(),
                      ",", data.size() + t.bytes.size(), "]}");
      data += t.bytes;
    }
    header += "}";
    std::ofstream out(dir_ + "/model.safetensors", std::ios::binary | std::ios::trunc);
    uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << data;
  }
  void WriteConfig(const ModelConfig& c) { std::ofstream(dir_ + "/config.json") << c.ToJson(); }
  std::string dir_;
};

ModelConfig BiasedConfig(bool attention, bool mlp) {
  ModelConfig c = *NamedConfig("tiny");
  c.attention_bias = attention;
  c.mlp_bias = mlp;
  return c;
}

TEST_F(LoaderTest, BiasesAreLoadedAndUsed) {
  auto w = RandomWeights(BiasedConfig(true, true), 3, 0.1f);
  ASSERT_EQ(w->layers[1].o_bias.size(), w->config.hidden_size);
  ASSERT_EQ(w->layers[1].gate_bias.size(), w->config.intermediate_size);
  Write(*w);
  auto back = LoadCheckpoint(dir_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE((*back)->config.attention_bias);
  EXPECT_EQ((*back)->layers[1].k_bias, w->layers[1].k_bias);
  EXPECT_EQ((*back)->layers[0].down_bias, w->layers[0].down_bias);
  auto cache = PagedKvCache::Create({KvLayoutFor((*back)->config, 8, Dtype::kFp32), 16});
  ASSERT_TRUE(cache.ok());
  auto model = Model::Create(back->get(), cache->get());
  ASSERT_TRUE(model.ok());
  std::vector<uint32_t> prompt = PromptTokens(21);
  SeqId seq = (*cache)->AddSequence();
  std::vector<float> logits;
  ASSERT_TRUE((*model)->Forward({{seq, prompt}}, &logits, /*all_logits=*/true).ok());
  std::vector<double> ref = ReferenceLogits(**back, prompt);
  EXPECT_LT(MaxAbsDiff(logits.data(), ref.data(), ref.size()), kFp32Tol);
  // The biases matter: the same weights without them are far off.
  ModelWeights plain = **back;
  for (LayerWeights& l : plain.layers)
    for (auto* b : {&l.q_bias, &l.k_bias, &l.v_bias, &l.o_bias, &l.gate_bias, &l.up_bias, &l.down_bias})
      b->clear();
  std::vector<double> unbiased = ReferenceLogits(plain, prompt);
  EXPECT_GT(MaxAbsDiff(logits.data(), unbiased.data(), unbiased.size()), 100 * kFp32Tol);
}

TEST_F(LoaderTest, BiasesAndConfigMustAgree) {
  auto w = RandomWeights(BiasedConfig(true, false), 3, 0.1f);
  Write(*w);
  WriteConfig(BiasedConfig(false, false));  // the tensors have biases, the config says none
  auto loaded = LoadCheckpoint(dir_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("tensor \"model.layers.0.self_attn.k_proj.bias\" is a projection "
                                           "bias the model does not use (config.json has attention_bias false)"),
            std::string::npos) << loaded.status();
  WriteConfig(BiasedConfig(true, true));  // the config declares MLP biases the file lacks
  loaded = LoadCheckpoint(dir_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("missing tensor \"model.layers.0.mlp.gate_proj.bias\" "
                                           "(config.json has mlp_bias true)"),
            std::string::npos) << loaded.status();
}

TEST_F(LoaderTest, UnusedTensorsOfAnyDtypeAreSkipped) {
  auto w = TinyWeights(5);
  Write(*w, {{"model.layers.0.self_attn.rotary_emb.inv_freq", "I64", {32}, std::string(256, '\1')},
             {"model.position_ids", "I32", {1, 4}, std::string(16, '\0')},
             {"model.extra_scale", "F8_E8M0", {3}, std::string(3, '\0')}});
  auto back = LoadCheckpoint(dir_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->layers[1].v_proj, w->layers[1].v_proj);
  EXPECT_EQ(ModelFingerprint(**back), ModelFingerprint(*w));
  // A tensor the model does read must still be F32, F16 or BF16.
  auto f = SafetensorsFile::Open(dir_ + "/model.safetensors");
  ASSERT_TRUE(f.ok());
  std::vector<float> v;
  absl::Status st = (*f)->ReadF32("model.position_ids", {1, 4}, &v);
  EXPECT_NE(st.message().find("tensor \"model.position_ids\" has dtype I32; the decoder reads F32, F16 or BF16"),
            std::string::npos) << st;
}

TEST(ConfigDefaultsTest, AbsentKeysTakeHuggingFaceDefaults) {
  const std::string sizes = R"("vocab_size": 300, "hidden_size": 128, "intermediate_size": 256,
      "num_hidden_layers": 2, "num_attention_heads": 4)";
  auto c = ParseConfigJson(absl::StrCat("{", sizes, "}"), "min.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c->rope_theta, 10000.0f);
  EXPECT_EQ(c->num_key_value_heads, 4u);
  EXPECT_EQ(c->head_dim, 32u);
  EXPECT_EQ(c->max_position_embeddings, 2048u);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->mlp_bias);
  EXPECT_EQ(c->sliding_window, 0u);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_id, 2);
  // null means none; a config written with no eos reads back with none.
  c = ParseConfigJson(absl::StrCat("{", sizes, R"(, "eos_token_id": null, "bos_token_id": null})"), "n.json");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->eos_token_id, -1);
  auto again = ParseConfigJson(c->ToJson(), "again.json");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ToJson(), c->ToJson());
  auto bad = ParseConfigJson(absl::StrCat("{", sizes, R"(, "attention_bias": "yes"})"), "b.json");
  EXPECT_NE(bad.status().message().find("\"attention_bias\" must be true or false"), std::string::npos)
      << bad.status();
}

TEST(ConfigDefaultsTest, SlidingWindowFromConfig) {
  const std::string sizes = R"("vocab_size": 300, "hidden_size": 128, "intermediate_size": 256,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2)";
  auto with = [&](const std::string& more) {
    auto c = ParseConfigJson(absl::StrCat("{", sizes, more, "}"), "w.json");
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? c->sliding_window : 12345u;
  };
  EXPECT_EQ(with(R"(, "sliding_window": 64)"), 64u);
  EXPECT_EQ(with(R"(, "sliding_window": null)"), 0u);
  EXPECT_EQ(with(R"(, "model_type": "mistral")"), 4096u);  // MistralConfig's default
  EXPECT_EQ(with(R"(, "model_type": "mistral", "sliding_window": null)"), 0u);
  EXPECT_EQ(with(R"(, "sliding_window": 64, "use_sliding_window": false)"), 0u);
  EXPECT_EQ(with(R"(, "sliding_window": 64, "use_sliding_window": true)"), 64u);
  auto round = ParseConfigJson(absl::StrCat("{", sizes, R"(, "sliding_window": 64, "attention_bias": true})"), "r");
  ASSERT_TRUE(round.ok());
  auto back = ParseConfigJson(round->ToJson(), "r2");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->sliding_window, 64u);
  EXPECT_TRUE(back->attention_bias);
}

TEST_F(LoaderTest, SessionTakesTheWindowFromConfigUnlessOverridden) {
  ModelConfig c = *NamedConfig("tiny");
  c.sliding_window = 24;
  Write(*RandomWeights(c, 2, 0.1f));
  SessionOptions o;
  o.checkpoint_dir = dir_;
  o.tokens_per_page = 8;
  o.kv_dtype = Dtype::kFp32;
  o.use_daemon = false;
  auto s = DecoderSession::Create(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->cache().sliding_window(), 24u);
  // The window is applied: logits match the windowed reference, not the full one.
  std::vector<uint32_t> prompt = PromptTokens(40);
  SeqId seq = (*s)->cache().AddSequence();
  std::vector<float> logits;
  ASSERT_TRUE((*s)->model().Forward({{seq, prompt}}, &logits, /*all_logits=*/true).ok());
  std::vector<double> ref = ReferenceLogits((*s)->weights(), prompt, 24);
  EXPECT_LT(MaxAbsDiff(logits.data(), ref.data(), ref.size()), kFp32Tol);
  std::vector<double> unwindowed = ReferenceLogits((*s)->weights(), prompt);
  EXPECT_GT(MaxAbsDiff(logits.data(), unwindowed.data(), unwindowed.size()), 10 * kFp32Tol);
  o.sliding_window = 0;  // --sliding_window=0: full attention
  auto full = DecoderSession::Create(o);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ((*full)->cache().sliding_window(), 0u);
}

using Clock = std::chrono::steady_clock;

// Writes `text` to the FIFO `path` once a reader has it open; false when
// none comes by `deadline` (polled, so a test that fails does not hang).
bool WriteToNextReader(const std::string& path, const std::string& text,
                       Clock::time_point deadline) {
  int fd;
  while ((fd = open(path.c_str(), O_WRONLY | O_NONBLOCK)) < 0) {
    if (errno != ENXIO || Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool ok = write(fd, text.data(), text.size()) == ssize_t(text.size());
  close(fd);
  return ok;
}

// Serves `first` to the FIFO's next reader and, once that reader has closed
// it (inotify: a read-only close), `second` to the one after: a config.json
// rewritten exactly between two reads of it. Returns how many were served.
int ServeTwice(const std::string& path, const std::string& first, const std::string& second) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  const int in = inotify_init1(IN_CLOEXEC);
  if (in < 0 || inotify_add_watch(in, path.c_str(), IN_CLOSE_NOWRITE) < 0) return 0;
  int served = 0;
  if (WriteToNextReader(path, first, deadline)) {
    ++served;
    pollfd p{in, POLLIN, 0};
    char event[sizeof(inotify_event) + 256];
    if (poll(&p, 1, 10000) == 1 && read(in, event, sizeof(event)) > 0 &&
        WriteToNextReader(path, second, deadline))
      ++served;
  }
  close(in);
  return served;
}

TEST_F(LoaderTest, SessionRefusesAConfigChangedWhileItStarts) {
  ModelConfig c = *NamedConfig("tiny");
  Write(*RandomWeights(c, 2, 0.1f));
  const std::string config = dir_ + "/config.json";
  std::filesystem::remove(config);
  ASSERT_EQ(mkfifo(config.c_str(), 0600), 0);
  SessionOptions o;
  o.checkpoint_dir = dir_;
  o.tokens_per_page = 8;
  o.use_daemon = false;
  // Control: the same text twice starts the session (config.json is read
  // twice, and a FIFO serves it).
  int served = 0;
  std::thread same([&] { served = ServeTwice(config, c.ToJson(), c.ToJson()); });
  auto s = DecoderSession::Create(o);
  same.join();
  ASSERT_EQ(served, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  // The weights' shapes hold for both texts: only the comparison notices.
  ModelConfig rewritten = c;
  rewritten.rope_theta = 500000.0f;
  std::thread changed([&] { served = ServeTwice(config, c.ToJson(), rewritten.ToJson()); });
  auto refused = DecoderSession::Create(o);
  changed.join();
  ASSERT_EQ(served, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAborted) << refused.status();
  EXPECT_NE(refused.status().message().find("config.json changed while the session started"),
            std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace kvtier::decoder::testing
