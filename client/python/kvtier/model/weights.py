# ModelWeights: every tensor of a Llama-style decoder in fp32, loaded from a
# Hugging Face checkpoint directory (config.json + model.safetensors, or the
# shards model.safetensors.index.json names) with the C++ decoder's tensor
# names and shapes (client/decoder/weights.cc), and the model fingerprint that
# roots every page key (client/decoder/prefix_store.cc ModelFingerprint).
import json
import os

from .config import load_config
from .safetensors import SafetensorsError, SafetensorsFile

__all__ = ["LayerWeights", "ModelWeights", "load_checkpoint", "model_fingerprint"]

# Per-layer tensors in the order the fingerprint hashes them; the biases
# (None unless config.attention_bias / mlp_bias) come after, when present.
LAYER_TENSORS = ("input_norm", "q_proj", "k_proj", "v_proj", "o_proj", "post_norm",
                 "gate_proj", "up_proj", "down_proj")
LAYER_BIASES = ("q_bias", "k_bias", "v_bias", "o_bias", "gate_bias", "up_bias", "down_bias")


class LayerWeights:
    __slots__ = LAYER_TENSORS + LAYER_BIASES

    def __init__(self):
        for b in LAYER_BIASES:
            setattr(self, b, None)


class ModelWeights:
    """fp32 tensors; linear weights keep HF's [out, in] shape. `lm_head` is None
    when tied to the embedding (then lm_head_or_embed() is the embedding)."""

    def __init__(self, config):
        self.config = config
        self.embed = None
        self.layers = [LayerWeights() for _ in range(config.num_hidden_layers)]
        self.final_norm = None
        self.lm_head = None

    def lm_head_or_embed(self):
        return self.embed if self.lm_head is None else self.lm_head

    def parameter_count(self):
        n = self.embed.numel() + self.final_norm.numel()
        n += 0 if self.lm_head is None else self.lm_head.numel()
        for l in self.layers:
            n += sum(getattr(l, t).numel() for t in LAYER_TENSORS)
            n += sum(getattr(l, b).numel() for b in LAYER_BIASES if getattr(l, b) is not None)
        return n


def _layer_slots(c, i):
    """weights.cc AddLayer: q/k/v/o (and gate/up/down) with biases when configured."""
    h, q = c.hidden_size, c.num_attention_heads * c.head_dim
    kv, f = c.num_key_value_heads * c.head_dim, c.intermediate_size
    p, out = f"model.layers.{i}.", []

    def linear(name, rows, cols, attr, bias):
        out.append((p + name + ".weight", (rows, cols), (attr + "_proj", i)))
        if bias:
            out.append((p + name + ".bias", (rows,), (attr + "_bias", i)))

    ab, mb = c.attention_bias, c.mlp_bias
    out.append((p + "input_layernorm.weight", (h,), ("input_norm", i)))
    linear("self_attn.q_proj", q, h, "q", ab)
    linear("self_attn.k_proj", kv, h, "k", ab)
    linear("self_attn.v_proj", kv, h, "v", ab)
    linear("self_attn.o_proj", h, q, "o", ab)
    out.append((p + "post_attention_layernorm.weight", (h,), ("post_norm", i)))
    linear("mlp.gate_proj", f, h, "gate", mb)
    linear("mlp.up_proj", f, h, "up", mb)
    linear("mlp.down_proj", h, f, "down", mb)
    return out


def _slots(c):
    """(HF name, shape, setter) of every tensor, as weights.cc Slots()."""
    h = c.hidden_size
    out = [("model.embed_tokens.weight", (c.vocab_size, h), ("embed", None))]
    for i in range(c.num_hidden_layers):
        out += _layer_slots(c, i)
    out.append(("model.norm.weight", (h,), ("final_norm", None)))
    if not c.tie_word_embeddings:
        out.append(("lm_head.weight", (c.vocab_size, h), ("lm_head", None)))
    return out


def _check_undeclared_biases(c, f, used):
    """A projection bias the config does not declare would be dropped silently:
    the checkpoint and its config.json disagree, so it is refused by name."""
    for name in sorted(f.tensors):
        if name in used or not name.startswith("model.layers.") or not name.endswith("_proj.bias"):
            continue
        key = "attention_bias" if ".self_attn." in name else "mlp_bias"
        on = "true" if getattr(c, key) else "false"
        raise SafetensorsError(f'{f.path}: tensor "{name}" is a projection bias the model does '
                               f"not use (config.json has {key} {on})")


def _open_shards(d):
    single = os.path.join(d, "model.safetensors")
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(single) or not os.path.exists(index):
        return [SafetensorsFile(single)]
    try:
        with open(index, "rb") as f:
            j = json.loads(f.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError(f"{index}: not valid JSON ({e})") from None
    if not isinstance(j, dict) or not isinstance(j.get("weight_map"), dict):
        raise SafetensorsError(f'{index}: no "weight_map" object')
    names = []
    for tensor, file in j["weight_map"].items():
        if not isinstance(file, str) or os.path.basename(file) != file or file in ("", ".", ".."):
            raise SafetensorsError(f"{index}: bad entry {tensor!r}: {file!r}")
        if file not in names:
            names.append(file)
    return [SafetensorsFile(os.path.join(d, n)) for n in names]


def load_checkpoint(d):
    """ModelWeights from a checkpoint directory. Errors (ConfigError,
    SafetensorsError, FileNotFoundError) name the file and tensor."""
    d = os.fspath(d)
    w = ModelWeights(load_config(os.path.join(d, "config.json")))
    files = _open_shards(d)
    try:
        used = set()
        for name, shape, (attr, layer) in _slots(w.config):
            holders = [f for f in files if name in f]
            if len(holders) > 1:  # the C++ loader takes the last; refuse the ambiguity
                raise SafetensorsError(f'tensor "{name}" is in more than one shard: '
                                       f"{', '.join(f.path for f in holders)}")
            if not holders and name.endswith("_proj.bias"):
                key = "mlp_bias" if ".mlp." in name else "attention_bias"
                raise SafetensorsError(f'{files[0].path}: missing tensor "{name}" '
                                       f"(config.json has {key} true)")
            t = (holders or files)[0].read(name, shape)  # missing: the error names the file
            setattr(w if layer is None else w.layers[layer], attr, t)
            used.add(name)
        for f in files:  # tensors the model does not use are skipped, whatever their dtype
            _check_undeclared_biases(w.config, f, used)
    finally:
        for f in files:
            f.close()
    return w


def _xxh3_state():
    import kvtier  # the extension; imported late so the pure-torch parts load without it
    return kvtier.Xxh3_128()


def _update_f32(h, t):
    h.update(memoryview(t.detach().contiguous().float().numpy()).cast("B"))


def model_fingerprint(w):
    """XXH3-128 (canonical big-endian bytes) of config.to_json() and every fp32
    weight in the C++ order: embed; per layer input_norm, q, k, v, o,
    post_norm, gate, up, down, then the biases present (q, k, v, o, gate, up,
    down); final norm; lm_head (nothing when tied)."""
    h = _xxh3_state()
    h.update(w.config.to_json().encode())
    _update_f32(h, w.embed)
    for layer in w.layers:
        for t in LAYER_TENSORS:
            _update_f32(h, getattr(layer, t))
        for b in LAYER_BIASES:  # absent biases hash nothing, as C++'s empty vectors
            if getattr(layer, b) is not None:
                _update_f32(h, getattr(layer, b))
    _update_f32(h, w.final_norm)
    if w.lm_head is not None:
        _update_f32(h, w.lm_head)
    return bytes(h.digest())
