# ModelConfig: the shape of a Llama-style decoder read from a Hugging Face
# config.json, with the same fields, defaults and validation as the C++
# decoder (client/decoder/config.cc), and to_json() byte-identical to its
# ModelConfig::ToJson(), because that text is hashed into the model fingerprint.
# An absent key takes HF LlamaConfig's default (MistralConfig's for model_type
# "mistral"); config.cc's header lists them: rms_norm_eps 1e-6, rope_theta
# 10000, num_key_value_heads = heads (mistral 8), head_dim = hidden / heads,
# max_position_embeddings 2048 (mistral 131072), tie_word_embeddings,
# attention_bias and mlp_bias false, sliding_window none (mistral 4096; null:
# none; use_sliding_window false: none), bos/eos 1/2 (null: none); the five
# sizes are required.
import dataclasses
import json

import numpy as np

from .json_text import dump_nlohmann

__all__ = ["ConfigError", "UnsupportedConfigError", "ModelConfig", "parse_config_json",
           "load_config"]


class ConfigError(ValueError):
    """config.json is malformed or describes an impossible model."""


class UnsupportedConfigError(ConfigError, NotImplementedError):
    """config.json is valid but asks for something this decoder does not run."""


def _f32(x):
    """x rounded to fp32 and back, as C++ reads a json number into a float."""
    with np.errstate(over="ignore"):
        return float(np.float32(x))


@dataclasses.dataclass
class ModelConfig:
    vocab_size: int = 256
    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    max_position_embeddings: int = 2048
    rms_norm_eps: float = _f32(1e-6)
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # q/k/v/o projections carry biases (Qwen2-style)
    mlp_bias: bool = False        # gate/up/down do
    sliding_window: int = 0       # Mistral's attention window; 0: full attention
    bos_token_id: int = -1  # -1: none
    eos_token_id: int = -1

    def validate(self):
        """Every size positive, heads divide evenly (GQA), head_dim even (RoPE)."""
        sizes = (self.vocab_size, self.hidden_size, self.intermediate_size,
                 self.num_hidden_layers, self.num_attention_heads, self.num_key_value_heads,
                 self.head_dim)
        if any(s <= 0 for s in sizes):
            raise ConfigError("model config: every size must be positive")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"model config: num_attention_heads {self.num_attention_heads} is "
                              f"not a multiple of num_key_value_heads {self.num_key_value_heads}")
        if self.head_dim % 2:
            raise ConfigError(f"model config: head_dim {self.head_dim} is odd (RoPE needs pairs)")
        if not (self.rms_norm_eps > 0) or not (self.rope_theta > 0):
            raise ConfigError("model config: rms_norm_eps and rope_theta must be > 0")

    @property
    def group(self):
        """Query heads per KV head."""
        return self.num_attention_heads // self.num_key_value_heads

    def to_json(self):
        """The text C++ ModelConfig::ToJson() writes: nlohmann::json dump(2) of
        an object (keys sorted bytewise), fp32 fields printed as doubles."""
        j = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
             "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
             "intermediate_size": self.intermediate_size,
             "num_hidden_layers": self.num_hidden_layers,
             "num_attention_heads": self.num_attention_heads,
             "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
             "max_position_embeddings": self.max_position_embeddings,
             "rms_norm_eps": float(self.rms_norm_eps), "rope_theta": float(self.rope_theta),
             "tie_word_embeddings": bool(self.tie_word_embeddings)}
        # null, not absent, for "none": an absent id reads back as HF's default.
        j["bos_token_id"] = self.bos_token_id if self.bos_token_id >= 0 else None
        j["eos_token_id"] = self.eos_token_id if self.eos_token_id >= 0 else None
        # Only when set, so a plain Llama's text (and fingerprint) is unchanged.
        if self.attention_bias:
            j["attention_bias"] = True
        if self.mlp_bias:
            j["mlp_bias"] = True
        if self.sliding_window > 0:
            j["sliding_window"] = self.sliding_window
        return dump_nlohmann(j)


# -- parsing ----------------------------------------------------------------

def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return (isinstance(v, (int, float))) and not isinstance(v, bool)


def _read_uint(j, field, required, default, source):
    v = j.get(field)
    if v is None:
        if required:
            raise ConfigError(f'{source}: missing field "{field}"')
        return default
    if not _is_int(v) or v <= 0 or v > (1 << 31):
        raise ConfigError(f'{source}: field "{field}" must be a positive integer, '
                          f"got {json.dumps(v)}")
    return v


def _read_float(j, field, default, source):
    v = j.get(field)
    if v is None:
        return default
    if not _is_number(v):
        raise ConfigError(f'{source}: field "{field}" must be a number, got {json.dumps(v)}')
    return _f32(v)


def _read_bool(j, field, default, source):
    v = j.get(field)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ConfigError(f'{source}: field "{field}" must be true or false, got {json.dumps(v)}')
    return v


def _read_sliding_window(j, mistral, source):
    """Mistral's window: absent is MistralConfig's 4096 for model_type "mistral"
    (LlamaConfig has none); null is none; use_sliding_window false turns it off."""
    w = _read_uint(j, "sliding_window", False, 4096 if mistral and "sliding_window" not in j else 0,
                   source)
    return w if _read_bool(j, "use_sliding_window", True, source) else 0


def _read_token_id(j, field, absent):
    """An int, or the first entry of a list (newer configs list several eos ids);
    wrapped to int32 like C++ get<int32_t>. Absent: HF's default; null: none."""
    if field not in j:
        return absent
    v = j.get(field)
    if isinstance(v, list) and v:
        v = v[0]
    if not _is_int(v):
        return -1
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def _check_supported(j, source):
    mt = j.get("model_type")
    if isinstance(mt, str) and mt not in ("llama", "mistral"):
        raise UnsupportedConfigError(f'{source}: model_type "{mt}" is not a Llama-style decoder')
    if j.get("rope_scaling") is not None:
        raise UnsupportedConfigError(
            f"{source}: rope_scaling {json.dumps(j['rope_scaling'])} is not supported")
    act = j.get("hidden_act")
    if isinstance(act, str) and act != "silu":
        raise UnsupportedConfigError(f'{source}: hidden_act "{act}" (only silu)')


def _reject_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def parse_config_json(text, source="config.json"):
    """ModelConfig from config.json text; ConfigError names `source` and the field."""
    try:
        j = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"{source}: not a JSON object ({e})") from None
    if not isinstance(j, dict):
        raise ConfigError(f"{source}: not a JSON object")
    _check_supported(j, source)
    c = ModelConfig()
    for field in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads"):
        setattr(c, field, _read_uint(j, field, True, 0, source))
    mistral = j.get("model_type") == "mistral"
    c.num_key_value_heads = _read_uint(j, "num_key_value_heads", False,
                                       8 if mistral else c.num_attention_heads, source)
    c.head_dim = _read_uint(j, "head_dim", False, c.hidden_size // c.num_attention_heads, source)
    c.max_position_embeddings = _read_uint(j, "max_position_embeddings", False,
                                           4096 * 32 if mistral else 2048, source)
    c.rms_norm_eps = _read_float(j, "rms_norm_eps", _f32(1e-6), source)
    c.rope_theta = _read_float(j, "rope_theta", 10000.0, source)
    c.attention_bias = _read_bool(j, "attention_bias", False, source)
    c.mlp_bias = _read_bool(j, "mlp_bias", False, source)
    c.sliding_window = _read_sliding_window(j, mistral, source)
    c.tie_word_embeddings = j.get("tie_word_embeddings") is True
    c.bos_token_id = _read_token_id(j, "bos_token_id", 1)
    c.eos_token_id = _read_token_id(j, "eos_token_id", 2)
    try:
        c.validate()
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    return c


def load_config(path):
    """ModelConfig from a config.json file; FileNotFoundError when it is missing."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: cannot open") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e})") from None
    return parse_config_json(text, path)
