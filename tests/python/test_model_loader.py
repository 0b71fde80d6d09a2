# The Python model's checkpoint loader against what Hugging Face does with the
# same files (the C++ loader's tests are tests/decoder/loader_test.cc): q/k/v/o
# and MLP biases and a config.json sliding window, checked against a float64
# HF-Llama forward written here and against kvtier-generate (same tokens, and
# pages one stores the other restores); a bias the config does not declare
# refused by name; unused tensors of any dtype skipped; absent keys taking
# LlamaConfig's defaults; max_position_embeddings ending generation like EOS.
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from kvtier.model.config import ConfigError, ModelConfig, parse_config_json
from kvtier.model.generate import Session
from kvtier.model.safetensors import SafetensorsError, SafetensorsFile, write_safetensors
from kvtier.model.weights import _slots, load_checkpoint
from model_helpers import run_cpp_generate

TPP = 16


def small_config(**kw):
    c = ModelConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    rms_norm_eps=float(torch.tensor(1e-5, dtype=torch.float32)), eos_token_id=-1,
                    bos_token_id=-1)
    for k, v in kw.items():
        setattr(c, k, v)
    return c


def write_model(d, c, seed=1, extra=None):
    """A random checkpoint of config `c` in directory d (fp32), plus raw
    `extra` tensors {name: (dtype, shape, bytes)} in the same file."""
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape, _ in _slots(c):
        t = torch.randn(shape, generator=g) * (0.3 if len(shape) == 1 else 0.1)
        tensors[name] = t + 1 if name.endswith("norm.weight") else t
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(c.to_json())
    path = os.path.join(d, "model.safetensors")
    write_safetensors(path, tensors)
    if extra:
        _append_raw(path, extra)
    return str(d)


def _append_raw(path, extra):
    with SafetensorsFile(path) as f:
        header = {n: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [t.begin, t.end]}
                  for n, t in f.tensors.items()}
        data = bytes(f._map[f._data_start:])
    for name, (dtype, shape, raw) in extra.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    with open(path, "wb") as out:
        out.write(len(h).to_bytes(8, "little") + h + data)


def reference_logits(w, tokens, window=0):
    """HF LlamaForCausalLM's forward in float64 (biases where present)."""
    c, n = w.config, len(tokens)
    hd, H, K = c.head_dim, c.num_attention_heads, c.num_key_value_heads
    dbl = lambda t: None if t is None else t.double()

    def lin(x, wt, b):
        y = x @ dbl(wt).T
        return y if b is None else y + dbl(b)

    def norm(x, g):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + c.rms_norm_eps) * dbl(g)

    inv = c.rope_theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]

    def rope(t, heads):
        t = t.view(n, heads, hd)
        return t * cos + torch.cat([-t[..., hd // 2:], t[..., :hd // 2]], -1) * sin

    i = torch.arange(n)
    mask = i[None, :] > i[:, None]
    if window:
        mask |= i[None, :] <= i[:, None] - window
    x = dbl(w.embed)[torch.tensor(tokens)]
    for l in w.layers:
        h = norm(x, l.input_norm)
        q, k = rope(lin(h, l.q_proj, l.q_bias), H), rope(lin(h, l.k_proj, l.k_bias), K)
        v = lin(h, l.v_proj, l.v_bias).view(n, K, hd)
        k, v = k.repeat_interleave(H // K, 1), v.repeat_interleave(H // K, 1)
        s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
        p = torch.softmax(s.masked_fill(mask, float("-inf")), -1)
        x = x + lin(torch.einsum("hqk,khd->qhd", p, v).reshape(n, H * hd), l.o_proj, l.o_bias)
        h = norm(x, l.post_norm)
        f = torch.nn.functional.silu(lin(h, l.gate_proj, l.gate_bias)) * lin(h, l.up_proj, l.up_bias)
        x = x + lin(f, l.down_proj, l.down_bias)
    return lin(norm(x, w.final_norm), w.lm_head_or_embed(), None)


def all_logits(d, tokens, **kw):
    s = Session(d, tokens_per_page=TPP, kv_dtype="fp32", kv_pages=16, use_daemon=False, **kw)
    return s, s.model.forward(s.cache.add_sequence(), tokens, all_logits=True)


PROMPT = [(i * 37 + 11) % 251 for i in range(45)]


@pytest.mark.parametrize("attention_bias,mlp_bias,window", [(True, True, 0), (True, False, 0),
                                                              (False, False, 20), (True, True, 20)])
def test_matches_float64_reference(tmp_path, attention_bias, mlp_bias, window):
    c = small_config(attention_bias=attention_bias, mlp_bias=mlp_bias, sliding_window=window)
    d = write_model(tmp_path / "m", c)
    s, got = all_logits(d, PROMPT)
    assert s.weights.layers[1].q_bias is not None if attention_bias else s.weights.layers[1].q_bias is None
    assert s.model.sliding_window == window
    want = reference_logits(s.weights, PROMPT, window)
    assert (got.double() - want).abs().max().item() < 2e-3
    # The feature matters: leaving it out is far off.
    plain = reference_logits(load_checkpoint(write_model(tmp_path / "p", small_config())), PROMPT)
    assert (got.double() - plain).abs().max().item() > 0.1


def test_window_override(tmp_path):
    d = write_model(tmp_path / "m", small_config(sliding_window=20))
    s, got = all_logits(d, PROMPT, sliding_window=0)  # --sliding_window=0: full attention
    assert (got.double() - reference_logits(s.weights, PROMPT)).abs().max().item() < 2e-3


def test_cpp_agrees_and_pages_cross(tmp_path, kvtierd):
    """Same tokens as kvtier-generate on a biased, windowed checkpoint, and the
    pages it stores (all of them, the window's freed ones too) restore here."""
    d = write_model(tmp_path / "m", small_config(attention_bias=True, mlp_bias=True,
                                                 sliding_window=24))
    ids = ",".join(map(str, PROMPT))
    want = run_cpp_generate(d, f"--prompt_ids={ids}", "--max_new_tokens=8",
                            f"--tokens_per_page={TPP}", endpoint=kvtierd.endpoint)[1]
    assert want["pages_put"] == 3
    s = Session(d, tokens_per_page=TPP, kv_pages=16, endpoint=kvtierd.endpoint)
    r = s.generator().generate(PROMPT, 8)
    s.close()
    assert r.tokens == want["tokens"]
    assert r.stats.restored_tokens == 32 and r.stats.reuse_note == ""


def test_biases_and_config_must_agree(tmp_path):
    d = write_model(tmp_path / "m", small_config(attention_bias=True))
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(small_config().to_json())
    with pytest.raises(SafetensorsError, match=r'tensor "model.layers.0.self_attn.k_proj.bias" is a '
                       r"projection bias the model does not use \(config.json has attention_bias false\)"):
        load_checkpoint(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(small_config(attention_bias=True, mlp_bias=True).to_json())
    with pytest.raises(SafetensorsError, match=r'missing tensor "model.layers.0.mlp.gate_proj.bias" '
                       r"\(config.json has mlp_bias true\)"):
        load_checkpoint(d)


def test_unused_tensors_of_any_dtype_are_skipped(tmp_path):
    d = write_model(tmp_path / "m", small_config(), extra={
        "model.layers.0.self_attn.rotary_emb.inv_freq": ("I64", [8], b"\1" * 64),
        "model.position_ids": ("I32", [1, 4], b"\0" * 16),
        "model.extra_scale": ("F8_E8M0", [3], b"\0" * 3)})
    w = load_checkpoint(d)
    assert w.layers[1].v_proj.shape == (32, 64)
    with SafetensorsFile(os.path.join(d, "model.safetensors")) as f:
        with pytest.raises(SafetensorsError, match='"model.position_ids" has dtype I32; the decoder '
                                                   "reads F32, F16 or BF16"):
            f.read("model.position_ids", (1, 4))


SIZES = ('"vocab_size": 300, "hidden_size": 128, "intermediate_size": 256, '
         '"num_hidden_layers": 2, "num_attention_heads": 4')


def test_absent_keys_take_hf_defaults():
    c = parse_config_json("{" + SIZES + "}")
    assert c.rms_norm_eps == float(torch.tensor(1e-6, dtype=torch.float32))
    assert (c.rope_theta, c.num_key_value_heads, c.head_dim, c.max_position_embeddings) == (
        10000.0, 4, 32, 2048)
    assert not (c.tie_word_embeddings or c.attention_bias or c.mlp_bias or c.sliding_window)
    assert (c.bos_token_id, c.eos_token_id) == (1, 2)
    n = parse_config_json("{" + SIZES + ', "bos_token_id": null, "eos_token_id": null}')
    assert (n.bos_token_id, n.eos_token_id) == (-1, -1)
    assert parse_config_json(n.to_json()).to_json() == n.to_json()
    with pytest.raises(ConfigError, match='"mlp_bias" must be true or false'):
        parse_config_json("{" + SIZES + ', "mlp_bias": 1}')


@pytest.mark.parametrize("more,window", [
    (', "sliding_window": 64', 64), (', "sliding_window": null', 0),
    (', "model_type": "mistral", "num_key_value_heads": 4', 4096),
    (', "model_type": "mistral", "num_key_value_heads": 4, "sliding_window": null', 0),
    (', "sliding_window": 64, "use_sliding_window": false', 0),
])
def test_sliding_window_from_config(more, window):
    c = parse_config_json("{" + SIZES + more + "}")
    assert c.sliding_window == window
    assert parse_config_json(c.to_json()).sliding_window == window


def test_max_positions_ends_generation(tmp_path):
    d = write_model(tmp_path / "m", small_config(max_position_embeddings=24))
    s = Session(d, tokens_per_page=TPP, kv_pages=8, use_daemon=False)
    r = s.generator().generate(PROMPT[:20], 10, stop_at_eos=False)
    assert len(r.tokens) == 5 and r.stats.new_tokens == 5  # positions 20..23, then a 5th token
    assert "reached max_position_embeddings (24)" in r.stats.stop_note
    assert s.cache.free_pages == 8
    want = run_cpp_generate(d, "--prompt_ids=" + ",".join(map(str, PROMPT[:20])),
                            "--max_new_tokens=10", f"--tokens_per_page={TPP}")[1]
    assert r.tokens == want["tokens"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.run([sys.executable, "-m", "kvtier.model.generate", f"--model={d}",
                        "--prompt_ids=" + ",".join(map(str, PROMPT[:20])), "--max_new_tokens=10",
                        f"--tokens_per_page={TPP}", "--no_daemon", "--print_ids"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "run 1: 5 new tokens" in p.stdout
    assert "reached max_position_embeddings (24)" in p.stderr
