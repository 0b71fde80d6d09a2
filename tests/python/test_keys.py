# Page keys, engine-hash keys and xxh3 from Python: the chain reproduces the
# C++ derivation (the test vectors in docs/PROTOCOL.md), engine hashes map to
# distinct keys per model and layout, and xxh3-128 matches the reference.
import hashlib
import struct

import numpy as np
import pytest
import torch

import kvtier

# docs/PROTOCOL.md, "Page keys".
VECTOR_LAYOUT = dict(layers=2, kv_heads=4, head_dim=64, tokens_per_page=4, dtype="fp16")
VECTOR_LAYOUT_ID = 0x552141601F62C93F
VECTOR_KEYS = ["8496de4aca900290c039826d1d5cc69f", "737bf54be7c67275451dbc738ce8cd9a"]


def vector_layout():
    return kvtier.Layout(**VECTOR_LAYOUT)


def test_layout_id_matches_protocol_vector():
    layout = vector_layout()
    assert layout.layout_id == VECTOR_LAYOUT_ID
    assert (layout.layers, layout.kv_heads, layout.head_dim, layout.tokens_per_page) == (2, 4, 64, 4)
    assert layout.dtype == "fp16"
    # page-first: layers x {K,V} x heads x tokens x dim x 2 bytes
    assert layout.layer_bytes == 2 * 4 * 4 * 64 * 2
    assert layout.page_bytes == 2 * layout.layer_bytes


def test_page_keys_match_protocol_vectors():
    keys = kvtier.page_keys(vector_layout(), list(range(1, 11)))
    assert [k.hex() for k in keys] == VECTOR_KEYS  # 10 tokens: 2 full blocks, 2 left over


@pytest.mark.parametrize("tokens", [
    list(range(1, 11)), tuple(range(1, 11)), np.arange(1, 11, dtype=np.int64),
    np.arange(1, 11, dtype=np.uint32), torch.arange(1, 11)])
def test_page_keys_accept_lists_arrays_and_tensors(tokens):
    assert [k.hex() for k in kvtier.page_keys(vector_layout(), tokens)] == VECTOR_KEYS


def test_page_keys_chain_from_root():
    layout = vector_layout()
    full = kvtier.page_keys(layout, list(range(1, 11)))
    # The second block chained from the first block's key is the chain's key[1].
    tail = kvtier.page_keys(layout, list(range(5, 9)), root=full[0])
    assert tail == [full[1]]
    assert kvtier.page_keys(layout, [1, 2, 3]) == []  # no full block
    assert kvtier.page_keys(layout, []) == []


def test_page_keys_reject_bad_tokens():
    layout = vector_layout()
    with pytest.raises(ValueError, match=r"token_ids\[1\]"):
        kvtier.page_keys(layout, [1, -2, 3, 4])
    with pytest.raises(ValueError, match="uint32"):
        kvtier.page_keys(layout, [1, 2, 3, 1 << 32])
    with pytest.raises(TypeError, match="integers"):
        kvtier.page_keys(layout, [1.5, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="root must be 16 bytes"):
        kvtier.page_keys(layout, [1, 2, 3, 4], root=b"short")


def test_layout_validation_messages():
    with pytest.raises(ValueError, match="layers"):
        kvtier.Layout(0, 1, 64)
    with pytest.raises(ValueError, match="unknown dtype"):
        kvtier.Layout(2, 2, 64, dtype="fp64")
    with pytest.raises(ValueError, match="layers must be in"):
        kvtier.Layout(-1, 2, 64)
    assert kvtier.Layout(2, 2, 64, 64) == kvtier.Layout(2, 2, 64, 64, "float16")
    assert kvtier.Layout(2, 2, 64, 64) != kvtier.Layout(2, 2, 64, 64, "bf16")


def reference_external_key(h, model, layout_id):
    """Independent re-statement of the external-key encoding (kvtier/keys.py)."""
    def field(tag, data):
        return bytes([tag]) + struct.pack("<I", len(data)) + data
    if isinstance(h, bytes):
        tagged = field(0x10, h)
    elif isinstance(h, int):
        tagged = field(0x11, h.to_bytes(max(1, (h.bit_length() + 8) // 8), "big", signed=True))
    else:
        tagged = field(0x12, h.encode())
    msg = (field(0x00, b"kvtier/external-key") + field(0x01, struct.pack("<I", 1)) +
           field(0x02, struct.pack("<Q", layout_id)) + field(0x03, model.encode()) + tagged)
    return hashlib.sha256(msg).digest()[:16]


# Fixed vectors (model "m", the PROTOCOL.md layout): a change of the encoding
# orphans every stored key, so it must be deliberate and documented.
EXTERNAL_VECTORS = [
    (12345, "71d9caa3c4c85d0afe108f1b44ec468b"),
    ("ab", "2408437194d6a091533b1f6a61a5ed97"),
    (b"\x01" * 32, "e079590bb0069eb0815315e908dfcdd2"),
    (-7, "9ee8d2d6f952e618118bbd5719bbb757"),
]


def test_external_keys_encoding_and_vectors():
    layout = vector_layout()
    hashes = [b"\x01" * 32, 12345, -7, "9f86d081884c7d659a2feaa0c55ad015", 0]
    keys = kvtier.external_keys(hashes, "tiny-llama@abc", layout)
    assert keys == [reference_external_key(h, "tiny-llama@abc", layout.layout_id) for h in hashes]
    assert all(len(k) == 16 for k in keys)
    assert len(set(keys)) == len(keys)
    assert kvtier.external_keys([12345], "tiny-llama@abc", layout.layout_id) == [keys[1]]
    for h, want in EXTERNAL_VECTORS:
        assert kvtier.external_keys([h], "m", layout)[0].hex() == want


def test_external_keys_separate_models_layouts_and_types():
    a = kvtier.Layout(2, 4, 64, 4)
    b = kvtier.Layout(2, 4, 64, 8)
    h = [5]
    assert kvtier.external_keys(h, "model-a", a) != kvtier.external_keys(h, "model-b", a)
    assert kvtier.external_keys(h, "model-a", a) != kvtier.external_keys(h, "model-a", b)
    # The int 5, the bytes b"\x05" and the str "5" are different hashes.
    forms = [kvtier.external_keys([x], "m", a)[0] for x in (5, b"\x05", "5")]
    assert len(set(forms)) == 3
    # vLLM < 0.10's BlockHashType carries the int in .hash_value.
    class BlockHashType:
        hash_value = 5
    assert kvtier.external_keys([BlockHashType()], "m", a) == kvtier.external_keys([5], "m", a)


def test_external_keys_reject_bad_input():
    layout = vector_layout()
    with pytest.raises(TypeError, match=r"hashes\[1\]"):
        kvtier.external_keys([1, 2.5], "m", layout)
    with pytest.raises(TypeError, match=r"hashes\[0\] is a bool"):
        kvtier.external_keys([True], "m", layout)
    with pytest.raises(ValueError, match="model"):
        kvtier.external_keys([1], "", layout)


def test_xxh3_128_reference_vectors():
    # XXH3-128 (seed 0), canonical big-endian bytes as xxhsum -H2 prints them.
    assert kvtier.xxh3_128(b"").hex() == "99aa06d3014798d86001c324468d497f"
    assert kvtier.xxh3_128(b"abc").hex() == "06b05ab6733a618578af5f94892f3950"
    assert kvtier.xxh3_128(b"abc", seed=1) != kvtier.xxh3_128(b"abc")


def test_xxh3_streaming_equals_one_shot():
    data = np.arange(100000, dtype=np.float32)
    h = kvtier.Xxh3_128()
    for part in np.array_split(data, 7):
        h.update(part.tobytes())
    assert h.digest() == kvtier.xxh3_128(data.tobytes())
    assert h.hexdigest() == h.digest().hex()
    # Any bytes-like object: numpy arrays and memoryviews hash their raw bytes.
    assert kvtier.xxh3_128(data) == kvtier.xxh3_128(memoryview(data.tobytes()))


def test_pack_keys():
    keys = kvtier.page_keys(vector_layout(), list(range(1, 11)))
    assert kvtier.pack_keys(keys) == keys[0] + keys[1]
    assert kvtier.pack_keys(keys[0] + keys[1]) == keys[0] + keys[1]
