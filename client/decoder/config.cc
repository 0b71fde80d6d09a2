// config.json parsing (Hugging Face Llama field names) and the named sizes
// used by tests and benchmarks.
//
// Keys read, and what an absent one means (HF LlamaConfig's default;
// MistralConfig's where it differs, for model_type "mistral"):
//   vocab_size, hidden_size, intermediate_size, num_hidden_layers,
//   num_attention_heads   required: HF's 7B-shaped defaults would only turn a
//                         truncated config into a wall of shape errors
//   num_key_value_heads   num_attention_heads (mistral: 8)
//   head_dim              hidden_size / num_attention_heads
//   max_position_embeddings 2048 (mistral: 131072)
//   rms_norm_eps 1e-6, rope_theta 10000, tie_word_embeddings false,
//   attention_bias false, mlp_bias false, hidden_act "silu" (the only one run),
//   rope_scaling null (anything else is refused),
//   sliding_window        none (mistral: 4096); null: none; use_sliding_window
//                         false turns it off
//   bos_token_id 1, eos_token_id 2 (null: none; a list: its first id)
#include "kvtier/decoder/config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"
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

// A token id, or the first of a list (newer configs list several eos ids).
// Absent: HF's default; null: none (-1).
int32_t ReadTokenId(const json& j, const char* field, int32_t absent) {
  auto it = j.find(field);
  if (it == j.end()) return absent;
  if (it->is_number_integer()) return it->get<int32_t>();
  if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) return (*it)[0].get<int32_t>();
  return -1;
}

absl::Status ReadBool(const json& j, const char* field, bool* out, absl::string_view source) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean())
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": field \"", field, "\" must be true or false, got ", it->dump()));
  *out = it->get<bool>();
  return absl::OkStatus();
}

// Mistral's window: "sliding_window" absent takes MistralConfig's 4096 for
// model_type "mistral" (LlamaConfig has none); null means no window; HF's
// "use_sliding_window": false (Qwen2-style configs) turns it off.
absl::Status ReadSlidingWindow(const json& j, bool mistral, uint32_t* out, absl::string_view source) {
  *out = 0;
  if (mistral && !j.contains("sliding_window")) *out = 4096;
  RETURN_IF_ERROR(ReadUint(j, "sliding_window", false, out, source));
  bool use = true;
  RETURN_IF_ERROR(ReadBool(j, "use_sliding_window", &use, source));
  if (!use) *out = 0;
  return absl::OkStatus();
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

// The keys past the five required sizes; an absent one takes HF's default.
absl::Status ReadOptional(const json& j, bool mistral, ModelConfig* c, absl::string_view source) {
  c->num_key_value_heads = mistral ? 8 : c->num_attention_heads;
  c->head_dim = c->hidden_size / c->num_attention_heads;
  c->max_position_embeddings = mistral ? 4096 * 32 : 2048;
  c->rms_norm_eps = 1e-6f;
  c->rope_theta = 10000.0f;
  RETURN_IF_ERROR(ReadUint(j, "num_key_value_heads", false, &c->num_key_value_heads, source));
  RETURN_IF_ERROR(ReadUint(j, "head_dim", false, &c->head_dim, source));
  RETURN_IF_ERROR(ReadUint(j, "max_position_embeddings", false, &c->max_position_embeddings, source));
  RETURN_IF_ERROR(ReadFloat(j, "rms_norm_eps", &c->rms_norm_eps, source));
  RETURN_IF_ERROR(ReadFloat(j, "rope_theta", &c->rope_theta, source));
  RETURN_IF_ERROR(ReadBool(j, "attention_bias", &c->attention_bias, source));
  RETURN_IF_ERROR(ReadBool(j, "mlp_bias", &c->mlp_bias, source));
  RETURN_IF_ERROR(ReadSlidingWindow(j, mistral, &c->sliding_window, source));
  auto tie = j.find("tie_word_embeddings");
  c->tie_word_embeddings = tie != j.end() && tie->is_boolean() && tie->get<bool>();
  c->bos_token_id = ReadTokenId(j, "bos_token_id", 1);
  c->eos_token_id = ReadTokenId(j, "eos_token_id", 2);
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
  // null, not absent, for "none": an absent id reads back as HF's default.
  j["bos_token_id"] = bos_token_id >= 0 ? json(bos_token_id) : json(nullptr);
  j["eos_token_id"] = eos_token_id >= 0 ? json(eos_token_id) : json(nullptr);
  // Written only when set, so a plain Llama's text (and the model
  // fingerprint hashed from it) stays what it was before these keys existed.
  if (attention_bias) j["attention_bias"] = true;
  if (mlp_bias) j["mlp_bias"] = true;
  if (sliding_window > 0) j["sliding_window"] = sliding_window;
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
  auto mt = j.find("model_type");
  const bool mistral = mt != j.end() && mt->is_string() && mt->get<std::string>() == "mistral";
  if (st = ReadOptional(j, mistral, &c, source); !st.ok()) return st;
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
  c.rms_norm_eps = 1e-5f;  // as these sizes were first written (keeps their page keys)
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
