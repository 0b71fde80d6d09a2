# The Python Llama model (kvtier.model) against the C++ decoder and a real
# kvtierd: (1) its greedy tokens equal kvtier-generate's on a checkpoint
# kvtier-make-checkpoint wrote; (2) a prompt restored from the daemon gives
# the same tokens as a run without reuse, and prefill computes only the
# tokens not restored; (3) pages cross between the two decoders in both
# directions (same keys, same layout, page bytes within fp16 rounding);
# (4) a bad config or a broken checkpoint is a clear exception.
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from kvtier.model.config import ConfigError, UnsupportedConfigError, load_config
from kvtier.model.generate import Session, mt19937
from kvtier.model.llama import ModelError, greedy
from kvtier.model.safetensors import SafetensorsError, SafetensorsFile, write_safetensors
from kvtier.model.weights import load_checkpoint, model_fingerprint
from model_helpers import make_checkpoint, parse_runs, run_cpp_generate

TPP = 16      # small pages: a 100-token prompt spans 6 full pages and a partial one
NEW = 14      # new tokens per run: decode completes a 7th page of a 100-token prompt
SEEDS = (7, 11)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """The C++ tool's tiny checkpoint (2 layers, GQA 4:2, head_dim 64, bf16)."""
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny")


def prompt_of(n, seed=7):
    """kvtier-generate --random_prompt_tokens=n --prompt_seed=seed."""
    return [x % 256 for x in mt19937(seed, n)]


def session(ckpt, endpoint=None, pages=16, dtype="fp16", timeout_ms=10000, attention="kernel"):
    return Session(ckpt, tokens_per_page=TPP, kv_dtype=dtype, kv_pages=pages,
                   use_daemon=endpoint is not None, endpoint=endpoint, timeout_ms=timeout_ms,
                   attention=attention)


def cpp(ckpt, n, seed=7, endpoint=None, runs=1, extra=()):
    return run_cpp_generate(ckpt, f"--random_prompt_tokens={n}", f"--prompt_seed={seed}",
                            f"--max_new_tokens={NEW}", f"--tokens_per_page={TPP}",
                            f"--runs={runs}", *extra, endpoint=endpoint)


# -- (1) same greedy tokens as the C++ decoder ---------------------------------

@pytest.mark.parametrize("n,seed", [(1, 7), (37, 7), (100, 7), (100, 11), (160, 3)])
def test_greedy_tokens_equal_cpp(ckpt, n, seed):
    want = cpp(ckpt, n, seed)[1]["tokens"]
    s = session(ckpt)
    got = s.generator().generate(prompt_of(n, seed), NEW).tokens
    assert got == want


@pytest.mark.parametrize("n,seed", [(100, 7), (160, 3)])
def test_torch_attention_gives_the_cpp_tokens_too(ckpt, n, seed):
    """attention="torch" (the pages gathered to fp32, a masked softmax in torch)
    is the same model as the default kernels: the C++ tokens, and logits within
    fp32 rounding of the kernels'."""
    want = cpp(ckpt, n, seed)[1]["tokens"]
    assert session(ckpt, attention="torch").generator().generate(
        prompt_of(n, seed), NEW).tokens == want
    logits = []
    for attention in ("kernel", "torch"):
        s = session(ckpt, attention=attention)
        seq = s.cache.add_sequence()
        logits.append(s.model.forward(seq, prompt_of(n, seed)))
    assert torch.allclose(logits[0], logits[1], atol=1e-3, rtol=1e-4)
    with pytest.raises(ModelError, match="attention 'flash' is not one of kernel, torch"):
        session(ckpt, attention="flash")


def test_mt19937_matches_std():
    # std::mt19937 with the default seed 5489: its 10000th output is 4123659995 (C++11 §26.5.5).
    assert mt19937(5489, 10000)[-1] == 4123659995


def test_fp32_and_bf16_pages_run(ckpt):
    """Other page dtypes the C++ cache supports give the C++ tokens too."""
    for dtype in ("fp32", "bf16"):
        want = cpp(ckpt, 50, extra=(f"--kv_dtype={dtype}",))[1]["tokens"]
        assert session(ckpt, dtype=dtype).generator().generate(prompt_of(50), NEW).tokens == want


# -- (2) restore from the daemon ---------------------------------------------------

@pytest.mark.parametrize("n", [100, 96])
@pytest.mark.parametrize("layerwise", [False, True])
def test_restore_same_tokens_and_prefill_only_the_rest(ckpt, kvtierd, n, layerwise):
    prompt = prompt_of(n)
    baseline = session(ckpt).generator().generate(prompt, NEW).tokens
    s = session(ckpt, kvtierd.endpoint)
    g = s.generator()
    first = g.generate(prompt, NEW, layerwise=layerwise)
    assert first.tokens == baseline and first.stats.restored_tokens == 0
    assert first.stats.pages_put >= n // TPP and not first.stats.reuse_note
    second = g.generate(prompt, NEW, layerwise=layerwise)
    st = second.stats
    assert second.tokens == baseline
    full = n // TPP * TPP
    # A prompt restored whole still computes its last token (its logits start decoding).
    assert st.restored_tokens == min(full, n - 1)
    assert st.restored_from == ["host"] * (n // TPP)
    assert st.computed_tokens == n - st.restored_tokens
    assert st.prefill_forward_tokens == st.computed_tokens  # counted in the model itself
    assert st.layerwise == layerwise and st.redone_tokens == 0


@pytest.mark.parametrize("layerwise", [False, True])
def test_restore_survives_a_lost_daemon(ckpt, kvtierd, layerwise):
    """Store failures never fail generation: reuse turns off and the note says why."""
    prompt = prompt_of(100)
    s = session(ckpt, kvtierd.endpoint, timeout_ms=1000)
    want = s.generator().generate(prompt, NEW).tokens
    kvtierd.kill()
    r = s.generator().generate(prompt, NEW, layerwise=layerwise)
    assert r.tokens == want and r.stats.restored_tokens == 0
    assert r.stats.prefill_forward_tokens == 100
    assert "restore failed" in r.stats.reuse_note
    assert s.cache.free_pages == 16  # nothing leaked


# -- (3) C++ <-> Python cross-restore ---------------------------------------------

def _sha_field(h, tag, data):
    h.update(bytes([tag]) + len(data).to_bytes(4, "little") + data)


def _layout_id(layers, kv_heads, head_dim, tpp, dtype_code):
    """Layout::Id() from docs/PROTOCOL.md, independently of the extension."""
    h = hashlib.sha256()
    _sha_field(h, 0, b"kvtier/layout")
    for tag, v in enumerate((layers, kv_heads, head_dim, tpp, dtype_code), start=1):
        _sha_field(h, tag, v.to_bytes(4, "little"))
    return int.from_bytes(h.digest()[:8], "little")


def _chain(layout_id, tpp, tokens, root):
    keys, parent = [], root
    for i in range(0, len(tokens) - tpp + 1, tpp):
        h = hashlib.sha256()
        _sha_field(h, 0, b"kvtier/page-key")
        _sha_field(h, 1, (1).to_bytes(4, "little"))
        _sha_field(h, 2, layout_id.to_bytes(8, "little"))
        _sha_field(h, 3, parent)
        _sha_field(h, 4, b"".join(t.to_bytes(4, "little") for t in tokens[i:i + tpp]))
        parent = h.digest()[:16]
        keys.append(parent)
    return keys


def _torch_blas_is_openblas():
    """The C++ decoder links OpenBLAS; torch's linear layers match it bit for bit
    only when torch's BLAS (Debian's libblas.so.3 alternative) is OpenBLAS too."""
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line}
    return any(os.path.basename(os.path.realpath(p)).startswith("libopenblas") for p in libs)


def _python_pages(s, tokens):
    """The fp16 pages the Python model writes for `tokens`: prefill of the prompt
    part then one decode step per generated token, as a generation run does."""
    seq = s.cache.add_sequence()
    prompt, gen = tokens[:100], tokens[100:]
    s.model.forward(seq, prompt)
    for t in gen:
        s.model.forward(seq, [t])
    pages = [s.cache.pages[p].clone() for p in s.cache.block_table(seq)]
    s.cache.remove_sequence(seq)
    return pages[:len(tokens) // TPP]


def test_cpp_pages_restore_in_python(ckpt, kvtierd):
    prompt = prompt_of(100)
    run = cpp(ckpt, 100, endpoint=kvtierd.endpoint)[1]
    assert run["restored"] == 0 and run["pages_put"] == (100 + NEW - 1) // TPP  # 6 prompt + 1 decode
    s = session(ckpt, kvtierd.endpoint)
    # Same keys: the C++ run's pages (prompt and decode ones) all hit under the
    # Python keys, which match the protocol's SHA-256 chain computed here by hand.
    tokens = prompt + run["tokens"][:-1]  # the last new token's K/V is never written
    keys = s.store.keys(tokens)
    lid = _layout_id(2, 2, 64, TPP, 2)
    assert s.layout.layout_id == lid
    assert keys == _chain(lid, TPP, tokens, s.fingerprint)
    assert s.store.client.lookup(keys).hits == len(keys) == run["pages_put"]
    # Same bytes: GET the C++ pages and compare with the pages Python computes.
    mine = _python_pages(s, tokens)
    seq = s.cache.add_sequence()
    s.cache.reserve(seq, len(keys) * TPP)
    table = s.cache.block_table(seq)
    tiers = s.store.client.get(keys, s.store.buffer_id, [s.cache.page_offset(p) for p in table])
    assert tiers == ["host"] * len(keys)
    theirs = [s.cache.pages[p].clone() for p in table]
    s.cache.remove_sequence(seq)
    exact_layer0 = _torch_blas_is_openblas()
    differ = 0
    for i, (a, b) in enumerate(zip(mine, theirs)):
        # Layer 0's K/V come before any attention: embedding, RMSNorm, k/v_proj
        # through the same OpenBLAS sgemm, RoPE, fp16 rounding -> equal bits.
        if exact_layer0:
            assert torch.equal(a[0], b[0]), f"page {i} layer 0 differs"
        # Later layers follow attention (torch softmax here, the C++ online-softmax
        # kernel there): fp32 rounding differences, a few fp16 ulps on a few elements.
        torch.testing.assert_close(a.float(), b.float(), rtol=4e-3, atol=1e-3)
        differ += int((a.view(torch.int16) != b.view(torch.int16)).sum())
    assert differ <= 0.05 * sum(a.numel() for a in mine)  # rounding, not a wrong layout
    # Same tokens: a Python run restores the C++ prompt pages and generates the C++ tokens.
    r = s.generator().generate(prompt, NEW)
    assert r.stats.restored_tokens == 96 and r.stats.prefill_forward_tokens == 4
    assert r.tokens == run["tokens"]


def test_python_pages_restore_in_cpp(ckpt, kvtierd):
    prompt = prompt_of(100, seed=11)
    want = cpp(ckpt, 100, seed=11)[1]["tokens"]  # no daemon: computed
    s = session(ckpt, kvtierd.endpoint)
    first = s.generator().generate(prompt, NEW)
    assert first.tokens == want and first.stats.pages_put == (100 + NEW - 1) // TPP
    run = cpp(ckpt, 100, seed=11, endpoint=kvtierd.endpoint)[1]
    assert run["restored"] == 96 and run["computed"] == 4
    assert run["tiers"] == ["host"] * 6
    assert run["tokens"] == want
    # every page it completed (one in decode) the Python run had stored already
    assert run["pages_put"] == 0 and run["deduplicated"] == 1
    assert "reuse_note" not in run


# -- (4) bad config, broken checkpoints ----------------------------------------------

def _copy(ckpt, tmp_path):
    d = tmp_path / "ck"
    shutil.copytree(ckpt, d)
    return d


def _edit_config(d, **changes):
    path = d / "config.json"
    j = json.loads(path.read_text())
    for k, v in changes.items():
        if v is None:
            j.pop(k, None)
        else:
            j[k] = v
    path.write_text(json.dumps(j))


@pytest.mark.parametrize("changes,exc,why", [
    ({"hidden_size": None}, ConfigError, 'missing field "hidden_size"'),
    ({"num_hidden_layers": 0}, ConfigError, '"num_hidden_layers" must be a positive integer'),
    ({"vocab_size": 2.0}, ConfigError, '"vocab_size" must be a positive integer'),
    ({"vocab_size": True}, ConfigError, '"vocab_size" must be a positive integer'),
    ({"num_key_value_heads": 3}, ConfigError, "not a multiple of num_key_value_heads 3"),
    ({"head_dim": 63}, ConfigError, "head_dim 63 is odd"),
    ({"rms_norm_eps": 0}, ConfigError, "rms_norm_eps and rope_theta must be > 0"),
    ({"rope_theta": "big"}, ConfigError, '"rope_theta" must be a number'),
    ({"model_type": "gpt2"}, UnsupportedConfigError, 'model_type "gpt2"'),
    ({"rope_scaling": {"type": "linear"}}, UnsupportedConfigError, "rope_scaling"),
    ({"hidden_act": "gelu"}, UnsupportedConfigError, 'hidden_act "gelu"'),
])
def test_bad_config(ckpt, tmp_path, changes, exc, why):
    d = _copy(ckpt, tmp_path)
    _edit_config(d, **changes)
    with pytest.raises(exc) as e:
        load_checkpoint(d)
    assert why in str(e.value) and "config.json" in str(e.value)


def test_config_not_json_and_missing(ckpt, tmp_path):
    d = _copy(ckpt, tmp_path)
    (d / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not a JSON object"):
        load_checkpoint(d)
    (d / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_checkpoint(d)


def test_config_text_is_the_cpp_text(ckpt):
    """to_json() is what C++ ToJson() wrote (it is hashed into the fingerprint)."""
    with open(os.path.join(ckpt, "config.json")) as f:
        assert load_config(os.path.join(ckpt, "config.json")).to_json() + "\n" == f.read()


def test_checkpoint_that_does_not_fit_the_config(ckpt, tmp_path):
    d = _copy(ckpt, tmp_path)
    _edit_config(d, intermediate_size=256)
    with pytest.raises(SafetensorsError, match=r'"model.layers.0.mlp.gate_proj.weight" has shape'):
        load_checkpoint(d)
    _edit_config(d, intermediate_size=512, tie_word_embeddings=True, num_hidden_layers=3)
    with pytest.raises(SafetensorsError, match='missing tensor "model.layers.2.'):
        load_checkpoint(d)


def test_truncated_and_corrupt_weights(ckpt, tmp_path):
    d = _copy(ckpt, tmp_path)
    st = d / "model.safetensors"
    raw = st.read_bytes()
    st.write_bytes(raw[:len(raw) // 2])
    with pytest.raises(SafetensorsError, match="truncated"):
        load_checkpoint(d)
    st.write_bytes(raw[:8] + b"#" + raw[9:])  # the header's first byte
    with pytest.raises(SafetensorsError, match="not a JSON object"):
        load_checkpoint(d)
    st.unlink()
    with pytest.raises(FileNotFoundError):
        load_checkpoint(d)


def test_sharded_checkpoint(ckpt, tmp_path):
    """Shards named by model.safetensors.index.json load as the single file (the
    fingerprint hashes fp32 values, so F32 shards of the bf16 weights agree)."""
    d = tmp_path / "sharded"
    d.mkdir()
    shutil.copy(os.path.join(ckpt, "config.json"), d)
    with SafetensorsFile(os.path.join(ckpt, "model.safetensors")) as f:
        ts = {n: f.read(n) for n in sorted(f.tensors)}
    names, half = list(ts), len(ts) // 2
    write_safetensors(d / "a.safetensors", {n: ts[n] for n in names[:half]})
    write_safetensors(d / "b.safetensors", {n: ts[n] for n in names[half:]})
    index = {"weight_map": {n: "a.safetensors" if i < half else "b.safetensors"
                            for i, n in enumerate(names)}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    assert model_fingerprint(load_checkpoint(d)) == model_fingerprint(load_checkpoint(ckpt))
    write_safetensors(d / "b.safetensors", {n: ts[n] for n in names[half - 1:]})
    with pytest.raises(SafetensorsError, match="more than one shard"):
        load_checkpoint(d)
    index["weight_map"][names[0]] = "../a.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SafetensorsError, match="bad entry"):
        load_checkpoint(d)


def test_bad_tokens_are_model_errors(ckpt):
    s = session(ckpt)
    seq = s.cache.add_sequence()
    for bad in ([256], [-1], [1.5], []):
        with pytest.raises(ModelError):
            s.model.forward(seq, bad)
    assert s.cache.length(seq) == 0 and s.cache.free_pages == 16  # nothing leaked
    with pytest.raises(ModelError, match="max_position_embeddings"):
        s.model.forward(seq, [1] * 2049)
    assert greedy(s.model.forward(seq, [1, 2, 3])) >= 0


def test_cli_help_and_run(ckpt, kvtierd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cmd = [sys.executable, "-m", "kvtier.model.generate"]
    h = subprocess.run(cmd + ["--help"], capture_output=True, text=True, env=env, timeout=120)
    assert h.returncode == 0 and "--random_prompt_tokens" in h.stdout and "--endpoint" in h.stdout
    p = subprocess.run(cmd + [f"--model={ckpt}", "--random_prompt_tokens=100",
                              f"--max_new_tokens={NEW}", f"--tokens_per_page={TPP}", "--runs=2",
                              "--print_ids", f"--endpoint={kvtierd.endpoint}", "--json"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    runs = parse_runs(p.stdout)
    assert runs[1]["tokens"] == runs[2]["tokens"] == cpp(ckpt, 100)[1]["tokens"]
    assert runs[1]["restored"] == 0 and runs[2]["restored"] == 96 and runs[2]["computed"] == 4
    j = [json.loads(l[len("json: "):]) for l in p.stdout.splitlines() if l.startswith("json: ")]
    assert [x["prefill_forward_tokens"] for x in j] == [100, 4]


def test_a_window_override_never_restores_across_windows(ckpt, kvtierd):
    """--sliding_window changes every page's KV past the window, so it is in
    the fingerprint (C++ and Python alike): pages stored under one window are
    restored under that window only, never under another or under none."""
    prompt = prompt_of(100, seed=5)
    first = cpp(ckpt, 100, seed=5, endpoint=kvtierd.endpoint, extra=("--sliding_window=40",))[1]
    assert first["restored"] == 0 and first["pages_put"] > 0
    for other in ("--sliding_window=24", "--sliding_window=0"):
        run = cpp(ckpt, 100, seed=5, endpoint=kvtierd.endpoint, extra=(other,))[1]
        assert run["restored"] == 0, f"{other} restored pages stored under --sliding_window=40"
    again = cpp(ckpt, 100, seed=5, endpoint=kvtierd.endpoint, extra=("--sliding_window=40",))[1]
    assert again["restored"] > 0
    # Python computes the same keys for the same window, other keys for another.
    n_pages = 100 // TPP

    def hits(window):
        s = Session(ckpt, tokens_per_page=TPP, kv_pages=16, endpoint=kvtierd.endpoint,
                    sliding_window=window)
        try:
            return s.fingerprint, s.store.client.lookup(s.store.keys(prompt)[:n_pages]).hits
        finally:
            s.close()

    fp40, h40 = hits(40)
    fp31, h31 = hits(31)
    fp_none, _ = hits(None)
    assert h40 == n_pages and h31 == 0
    assert len({fp40, fp31, fp_none}) == 3


def _ckpt_variant(ckpt, tmp_path, name, **config_changes):
    """A copy of the checkpoint with `config_changes` in its config.json."""
    out = tmp_path / name
    shutil.copytree(ckpt, out)
    with open(out / "config.json") as f:
        config = json.load(f)
    config.update(config_changes)
    with open(out / "config.json", "w") as f:
        json.dump(config, f, indent=2)
    return str(out)


# Every setting that changes a page's bytes, each changed alone: (name, how to
# make the checkpoint, C++ flags, Python Session arguments).
KV_SETTINGS = [
    ("weights", lambda c, t: make_checkpoint(t / "seed2", seed=2), (), {}),
    ("rope_theta", lambda c, t: _ckpt_variant(c, t, "rope", rope_theta=20000.0), (), {}),
    ("rms_norm_eps", lambda c, t: _ckpt_variant(c, t, "eps", rms_norm_eps=1e-6), (), {}),
    ("sliding_window", lambda c, t: c, ("--sliding_window=40",), {"sliding_window": 40}),
    ("kv_dtype", lambda c, t: c, ("--kv_dtype=fp32",), {"kv_dtype": "fp32"}),
    ("tokens_per_page", lambda c, t: c, ("--tokens_per_page=32",), {"tokens_per_page": 32}),
]


@pytest.mark.parametrize("name,make,flags,py", KV_SETTINGS, ids=[s[0] for s in KV_SETTINGS])
def test_every_kv_setting_changes_the_keys(ckpt, kvtierd, tmp_path, name, make, flags, py):
    """Pages stored under one value of a setting that changes KV bytes are
    never restored under another, in either decoder; and for each value the
    C++ and the Python decoder compute the same keys (each finds the pages
    the other stored)."""
    other = make(ckpt, tmp_path)
    prompt = prompt_of(100, seed=9)
    base = cpp(ckpt, 100, seed=9, endpoint=kvtierd.endpoint)[1]
    assert base["restored"] == 0 and base["pages_put"] > 0
    changed = cpp(other, 100, seed=9, endpoint=kvtierd.endpoint, extra=flags)[1]
    assert changed["restored"] == 0, f"{name}: restored pages stored under the other value"
    assert cpp(other, 100, seed=9, endpoint=kvtierd.endpoint, extra=flags)[1]["restored"] > 0

    def python_hits(model_dir, **kw):
        args = dict(tokens_per_page=TPP, kv_pages=16, endpoint=kvtierd.endpoint)
        args.update(kw)
        s = Session(model_dir, **args)
        try:
            n = 100 // args["tokens_per_page"]
            return s.fingerprint, s.layout.layout_id, s.store.client.lookup(
                s.store.keys(prompt)[:n]).hits, n
        finally:
            s.close()

    fp_a, lid_a, hits_a, n_a = python_hits(ckpt)
    fp_b, lid_b, hits_b, n_b = python_hits(other, **py)
    assert hits_a == n_a, f"{name}: Python's keys miss the C++ run's pages (base)"
    assert hits_b == n_b, f"{name}: Python's keys miss the C++ run's pages (changed)"
    assert (fp_a, lid_a) != (fp_b, lid_b), f"{name}: same fingerprint and layout for both values"
