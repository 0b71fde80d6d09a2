// Checkpoint loading (HF Llama tensor names), random weights, and writing a
// checkpoint back out in the same format.
#include "kvtier/decoder/weights.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvtier::decoder {
namespace {

// One tensor of the model: its HF name, shape and where it lives in memory.
struct Slot {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float>* data;
  bool ones = false;  // a norm weight: random weights start it at 1
};

// q/k/v/o (and gate/up/down) with their biases when the config has them.
void AddLayer(const ModelConfig& c, uint32_t i, LayerWeights& l, std::vector<Slot>& s) {
  const int64_t h = c.hidden_size, q = int64_t(c.num_attention_heads) * c.head_dim,
                kv = int64_t(c.num_key_value_heads) * c.head_dim, f = c.intermediate_size;
  const std::string p = absl::StrCat("model.layers.", i, ".");
  auto linear = [&](const std::string& name, int64_t out, int64_t in, std::vector<float>* w,
                    std::vector<float>* b, bool bias) {
    s.push_back({p + name + ".weight", {out, in}, w});
    if (bias) s.push_back({p + name + ".bias", {out}, b});
  };
  const bool ab = c.attention_bias, mb = c.mlp_bias;
  s.push_back({p + "input_layernorm.weight", {h}, &l.input_norm, true});
  linear("self_attn.q_proj", q, h, &l.q_proj, &l.q_bias, ab);
  linear("self_attn.k_proj", kv, h, &l.k_proj, &l.k_bias, ab);
  linear("self_attn.v_proj", kv, h, &l.v_proj, &l.v_bias, ab);
  linear("self_attn.o_proj", h, q, &l.o_proj, &l.o_bias, ab);
  s.push_back({p + "post_attention_layernorm.weight", {h}, &l.post_norm, true});
  linear("mlp.gate_proj", f, h, &l.gate_proj, &l.gate_bias, mb);
  linear("mlp.up_proj", f, h, &l.up_proj, &l.up_bias, mb);
  linear("mlp.down_proj", h, f, &l.down_proj, &l.down_bias, mb);
}

std::vector<Slot> Slots(ModelWeights& w) {
  const ModelConfig& c = w.config;
  std::vector<Slot> s = {{"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, &w.embed}};
  w.layers.resize(c.num_hidden_layers);
  for (uint32_t i = 0; i < c.num_hidden_layers; ++i) AddLayer(c, i, w.layers[i], s);
  s.push_back({"model.norm.weight", {c.hidden_size}, &w.final_norm, true});
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}, &w.lm_head});
  return s;
}

// A projection bias the config does not declare would be silently dropped:
// the checkpoint and its config.json disagree, so refuse it by name.
absl::Status CheckUndeclaredBiases(const ModelConfig& c, const SafetensorsFile& f,
                                   const absl::flat_hash_set<std::string>& used) {
  for (const auto& [name, info] : f.tensors()) {
    if (used.contains(name) || !absl::StartsWith(name, "model.layers.") ||
        !absl::EndsWith(name, "_proj.bias"))
      continue;
    const char* key = absl::StrContains(name, ".self_attn.") ? "attention_bias" : "mlp_bias";
    const bool on = absl::StrContains(name, ".self_attn.") ? c.attention_bias : c.mlp_bias;
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": tensor \"", name, "\" is a projection bias the model does not use ",
                     "(config.json has ", key, " ", on ? "true" : "false", ")"));
  }
  return absl::OkStatus();
}

// The safetensors files of a checkpoint: model.safetensors, or the shards
// listed in model.safetensors.index.json.
absl::StatusOr<std::vector<std::unique_ptr<SafetensorsFile>>> OpenShards(const std::string& dir) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::string single = dir + "/model.safetensors";
  std::string index = dir + "/model.safetensors.index.json";
  if (std::filesystem::exists(single) || !std::filesystem::exists(index)) {
    ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(single));
    files.push_back(std::move(f));
    return files;
  }
  std::ifstream in(index);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.contains("weight_map") || !j["weight_map"].is_object())
    return absl::InvalidArgumentError(absl::StrCat(index, ": no \"weight_map\" object"));
  std::vector<std::string> names;
  for (auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) return absl::InvalidArgumentError(absl::StrCat(index, ": bad entry ", tensor));
    if (std::find(names.begin(), names.end(), file.get<std::string>()) == names.end())
      names.push_back(file.get<std::string>());
  }
  for (const std::string& n : names) {
    ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(dir + "/" + n));
    files.push_back(std::move(f));
  }
  return files;
}

}  // namespace

uint64_t ModelWeights::ParameterCount() const {
  uint64_t n = embed.size() + final_norm.size() + lm_head.size();
  for (const LayerWeights& l : layers)
    n += l.input_norm.size() + l.q_proj.size() + l.k_proj.size() + l.v_proj.size() +
         l.o_proj.size() + l.post_norm.size() + l.gate_proj.size() + l.up_proj.size() +
         l.down_proj.size() + l.q_bias.size() + l.k_bias.size() + l.v_bias.size() +
         l.o_bias.size() + l.gate_bias.size() + l.up_bias.size() + l.down_bias.size();
  return n;
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadCheckpoint(const std::string& dir) {
  auto w = std::make_unique<ModelWeights>();
  ASSIGN_OR_RETURN(w->config, LoadConfigFile(dir + "/config.json"));
  ASSIGN_OR_RETURN(auto files, OpenShards(dir));
  absl::flat_hash_set<std::string> used;
  for (Slot& s : Slots(*w)) {
    const SafetensorsFile* holder = files.front().get();
    for (const auto& f : files)
      if (f->Find(s.name)) holder = f.get();
    absl::Status st = holder->ReadF32(s.name, s.shape, s.data);
    if (absl::IsNotFound(st) && absl::EndsWith(s.name, "_proj.bias")) {
      const char* key = absl::StrContains(s.name, ".mlp.") ? "mlp_bias" : "attention_bias";
      st = absl::NotFoundError(absl::StrCat(st.message(), " (config.json has ", key, " true)"));
    }
    RETURN_IF_ERROR(st);
    used.insert(s.name);
  }
  for (const auto& f : files) RETURN_IF_ERROR(CheckUndeclaredBiases(w->config, *f, used));
  return w;
}

std::unique_ptr<ModelWeights> RandomWeights(const ModelConfig& config, uint64_t seed, float init_std) {
  auto w = std::make_unique<ModelWeights>();
  w->config = config;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, init_std);
  for (Slot& s : Slots(*w)) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    s.data->resize(size_t(n));
    for (float& x : *s.data) x = s.ones ? 1.0f : normal(rng);
  }
  return w;
}

absl::Status WriteCheckpoint(const std::string& dir, const ModelWeights& weights, TensorDtype dtype) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir, ": ", ec.message()));
  std::ofstream(dir + "/config.json") << weights.config.ToJson() << "\n";
  std::vector<TensorToWrite> tensors;
  for (const Slot& s : Slots(const_cast<ModelWeights&>(weights)))
    tensors.push_back({s.name, s.shape, s.data->data()});
  return WriteSafetensors(dir + "/model.safetensors", tensors, dtype);
}

}  // namespace kvtier::decoder
