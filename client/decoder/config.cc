// config.json parsing (Hugging Face Llama field names) and the named sizes
// used by tests and benchmarks.
#include "kvtier/decoder/config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace kvtier::decoder {
namespace {

using nlohmann::json;

// Reads an unsigned field; `required` fields must be present.
absl::Status ReadUint(const json& j, const char* field, bool required, uint32_t* out,
                      absl::string_view source) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (required) return absl::InvalidArgumentError(absl::StrCat(source, ": missing field \"", field, "\""));
    return absl::OkStatus();
  }
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (1ll << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": field \"", field, "\" must be a positive integer, got ", it->dump()));
  }
  *out = it->get<uint32_t>();
  return absl::OkStatus();
}

absl::Status ReadFloat(const json& j, const char* field, float* out, absl::string_view source) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number())
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": field \"", field, "\" must be a number, got ", it->dump()));
  *out = it->get<float>();
  return absl::OkStatus();
}

// eos_token_id may be a list in newer configs; the first entry is used.
int32_t ReadTokenId(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end()) return -1;
  if (it->is_number_integer()) return it->get<int32_t>();
  if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) return (*it)[0].get<int32_t>();
  return -1;
}

absl::Status CheckSupported(const json& j, absl::string_view source) {
  auto mt = j.find("model_type");
  if (mt != j.end() && mt->is_string()) {
    std::string t = mt->get<std::string>();
    if (t != "llama" && t != "mistral")
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": model_type \"", t, "\" is not a Llama-style decoder"));
  }
  auto rs = j.find("rope_scaling");
  if (rs != j.end() && !rs->is_null())
    return absl::UnimplementedError(
        absl::StrCat(source, ": rope_scaling ", rs->dump(), " is not supported"));
  auto act = j.find("hidden_act");
  if (act != j.end() && act->is_string() && act->get<std::string>() != "silu")
    return absl::UnimplementedError(
        absl::StrCat(source, ": hidden_act \"", act->get<std::string>(), "\" (only silu)"));
  return absl::OkStatus();
}

}  // namespace

absl::Status ModelConfig::Validate() const {
  if (vocab_size == 0 || hidden_size == 0 || intermediate_size == 0 || num_hidden_layers == 0 ||
      num_attention_heads == 0 || num_key_value_heads == 0 || head_dim == 0)
    return absl::InvalidArgumentError("model config: every size must be positive");
  if (num_attention_heads % num_key_value_heads != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: num_attention_heads ", num_attention_heads,
        " is not a multiple of num_key_value_heads ", num_key_value_heads));
  if (head_dim % 2 != 0)
    return absl::InvalidArgumentError(absl::StrCat("model config: head_dim ", head_dim, " is odd (RoPE needs pairs)"));
  if (!(rms_norm_eps > 0) || !(rope_theta > 0))
    return absl::InvalidArgumentError("model config: rms_norm_eps and rope_theta must be > 0");
  return absl::OkStatus();
}

std::string ModelConfig::ToJson() const {
  json j = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"hidden_act", "silu"},
            {"vocab_size", vocab_size},
            {"hidden_size", hidden_size},
            {"intermediate_size", intermediate_size},
            {"num_hidden_layers", num_hidden_layers},
            {"num_attention_heads", num_attention_heads},
            {"num_key_value_heads", num_key_value_heads},
            {"head_dim", head_dim},
            {"max_position_embeddings", max_position_embeddings},
            {"rms_norm_eps", rms_norm_eps},
            {"rope_theta", rope_theta},
            {"tie_word_embeddings", tie_word_embeddings}};
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_id >= 0) j["eos_token_id"] = eos_token_id;
  return j.dump(2);
}

absl::StatusOr<ModelConfig> ParseConfigJson(absl::string_view text, absl::string_view source) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  if (auto st = CheckSupported(j, source); !st.ok()) return st;
  ModelConfig c;
  absl::Status st;
  for (auto [field, out] : {std::pair{"vocab_size", &c.vocab_size}, {"hidden_size", &c.hidden_size},
                            {"intermediate_size", &c.intermediate_size},
                            {"num_hidden_layers", &c.num_hidden_layers},
                            {"num_attention_heads", &c.num_attention_heads}}) {
    if (st = ReadUint(j, field, true, out, source); !st.ok()) return st;
  }
  c.num_key_value_heads = c.num_attention_heads;
  c.head_dim = c.hidden_size / c.num_attention_heads;
  c.max_position_embeddings = 2048;
  if (st = ReadUint(j, "num_key_value_heads", false, &c.num_key_value_heads, source); !st.ok()) return st;
  if (st = ReadUint(j, "head_dim", false, &c.head_dim, source); !st.ok()) return st;
  if (st = ReadUint(j, "max_position_embeddings", false, &c.max_position_embeddings, source); !st.ok())
    return st;
  if (st = ReadFloat(j, "rms_norm_eps", &c.rms_norm_eps, source); !st.ok()) return st;
  if (st = ReadFloat(j, "rope_theta", &c.rope_theta, source); !st.ok()) return st;
  auto tie = j.find("tie_word_embeddings");
  c.tie_word_embeddings = tie != j.end() && tie->is_boolean() && tie->get<bool>();
  c.bos_token_id = ReadTokenId(j, "bos_token_id");
  c.eos_token_id = ReadTokenId(j, "eos_token_id");
  if (st = c.Validate(); !st.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", st.message()));
  return c;
}

absl::StatusOr<ModelConfig> LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfigJson(ss.str(), path);
}

absl::StatusOr<ModelConfig> NamedConfig(absl::string_view name) {
  ModelConfig c;  // the defaults are "tiny"
  if (name == "tiny") return c;
  if (name == "124m") {
    c.vocab_size = 50257;
    c.hidden_size = 768;
    c.intermediate_size = 2048;
    c.num_hidden_layers = 12;
    c.num_attention_heads = 12;
    c.num_key_value_heads = 12;
    c.head_dim = 64;
    c.max_position_embeddings = 16384;
    c.tie_word_embeddings = true;
    return c;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown model size \"", name, "\" (tiny, 124m)"));
}

}  // namespace kvtier::decoder
