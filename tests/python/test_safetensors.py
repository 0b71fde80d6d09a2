# The Python model's safetensors reader (kvtier.model.safetensors): exact
# round trips for F32/F16/BF16, and a clear SafetensorsError naming the file
# and the problem for every kind of malformed file (truncation, bad JSON,
# duplicate names, bad shapes/offsets for any dtype, overlaps, gaps).
import json
import os

import pytest
import torch

from kvtier.model.safetensors import SafetensorsError, SafetensorsFile, write_safetensors
from model_helpers import make_checkpoint


@pytest.fixture(scope="module")
def cpp_checkpoint(tmp_path_factory):
    """A tiny random checkpoint written by the C++ kvtier-make-checkpoint (bf16)."""
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny")


def _raw(path, header, data=b"", length=None):
    """Writes a file from a header (dict or raw bytes) and data bytes."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write((len(h) if length is None else length).to_bytes(8, "little"))
        f.write(h)
        f.write(data)
    return path


def _entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def _open_error(path):
    with pytest.raises(SafetensorsError) as e:
        SafetensorsFile(path)
    assert str(path) in str(e.value)  # every error names the file
    return str(e.value)


@pytest.mark.parametrize("dtype,torch_dtype", [("F32", torch.float32), ("F16", torch.float16),
                                               ("BF16", torch.bfloat16)])
def test_round_trip_is_exact(tmp_path, dtype, torch_dtype):
    g = torch.Generator().manual_seed(3)
    tensors = {"a": torch.randn(3, 5, generator=g), "b": torch.randn(7, generator=g) * 1e3,
               "empty": torch.zeros(0, 4), "scalar": torch.tensor(2.5)}
    path = tmp_path / "m.safetensors"
    write_safetensors(path, tensors, dtype, metadata={"format": "pt"})
    with SafetensorsFile(path) as f:
        assert set(f.tensors) == set(tensors)
        for name, t in tensors.items():
            got = f.read(name, t.shape)
            assert got.dtype == torch.float32 and got.shape == t.shape
            # widening the stored dtype to fp32 is exact
            assert torch.equal(got, t.to(torch_dtype).float()), name


def test_subnormal_and_special_halves(tmp_path):
    bits = torch.tensor([0x0001, 0x03FF, 0x0400, 0x7BFF, 0x8001, 0x7C00, 0xFC00, 0x0000, 0x8000],
                        dtype=torch.int32).to(torch.int16)
    path = _raw(tmp_path / "h.safetensors", {"h": _entry("F16", [9], 0, 18)},
                bits.numpy().tobytes())
    with SafetensorsFile(path) as f:
        got = f.read("h")
    assert torch.equal(got, bits.view(torch.float16).float())
    assert got[0].item() == 2.0 ** -24 and got[5].item() == float("inf")


def test_read_errors_name_the_tensor(tmp_path):
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"w": torch.ones(2, 3)})
    with SafetensorsFile(path) as f:
        with pytest.raises(SafetensorsError, match='missing tensor "nope"'):
            f.read("nope")
        with pytest.raises(SafetensorsError, match=r'"w" has shape \[2, 3\], expected \[3, 2\]'):
            f.read("w", (3, 2))
    with pytest.raises(SafetensorsError, match="closed"):
        f.read("w")


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        SafetensorsFile(tmp_path / "absent.safetensors")


def test_truncated_header(tmp_path):
    p = tmp_path / "t.safetensors"
    p.write_bytes(b"\x10\x00\x00")
    assert "truncated header" in _open_error(p)
    _raw(p, {"a": _entry("F32", [1], 0, 4)}, b"\0" * 4, length=10 ** 6)
    assert "header length 1000000" in _open_error(p)
    _raw(p, b"{}", length=(1 << 64) - 1)
    assert "truncated header" in _open_error(p)


@pytest.mark.parametrize("header,why", [
    (b"[1, 2]", "not a JSON object"),
    (b"{\"a\": ", "not valid JSON"),
    (b"\xff\xfe{}", "not a JSON object"),
    (b"{\"a\": NaN}", "not valid JSON"),
    (b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
     b'"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', "duplicate key"),
    (b'{"__metadata__": {"a": 1}}', "__metadata__"),
])
def test_bad_header_json(tmp_path, header, why):
    p = _raw(tmp_path / "j.safetensors", header, b"\0" * 4)
    assert why in _open_error(p)


@pytest.mark.parametrize("entry,why", [
    # Dtypes the model never converts are listed (unused tensors are skipped),
    # but their bytes are still checked against their shape.
    (_entry("I8", [5], 0, 4), "span 4 bytes but shape [5] of I8 needs 5"),
    (_entry("F64", [1], 0, 4), "span 4 bytes but shape [1] of F64 needs 8"),
    ({"dtype": 3, "shape": [1], "data_offsets": [0, 4]}, "dtype is not a string"),
    ({"dtype": "F32", "shape": [1]}, "exactly dtype, shape and data_offsets"),
    (dict(_entry("F32", [1], 0, 4), extra=1), "exactly dtype, shape and data_offsets"),
    (_entry("F32", [-1], 0, 4), "non-negative integers"),
    (_entry("F32", [1.0], 0, 4), "non-negative integers"),
    (_entry("F32", [True], 0, 4), "non-negative integers"),
    ({"dtype": "F32", "shape": [1], "data_offsets": [0]}, "data_offsets must be"),
    ({"dtype": "F32", "shape": [1], "data_offsets": [0, -4]}, "data_offsets must be"),
    (_entry("F32", [1], 4, 0), "end before begin"),
    (_entry("F32", [2], 0, 4), "span 4 bytes but shape [2] of F32 needs 8"),
    (_entry("F32", [2], 0, 8), "truncated file?"),
])
def test_bad_entry(tmp_path, entry, why):
    p = _raw(tmp_path / "e.safetensors", {"t": entry}, b"\0" * 4)
    msg = _open_error(p)
    assert why in msg and '"t"' in msg


def test_overlap_gap_and_trailing_bytes(tmp_path):
    p = tmp_path / "o.safetensors"
    _raw(p, {"a": _entry("F32", [2], 0, 8), "b": _entry("F32", [1], 4, 8)}, b"\0" * 8)
    assert "overlaps" in _open_error(p)
    _raw(p, {"a": _entry("F32", [1], 0, 4), "b": _entry("F32", [1], 8, 12)}, b"\0" * 12)
    assert "belong to no tensor" in _open_error(p)
    _raw(p, {"a": _entry("F32", [1], 0, 4)}, b"\0" * 9)
    assert "trailing bytes" in _open_error(p)


def test_truncated_data(tmp_path):
    src = tmp_path / "full.safetensors"
    write_safetensors(src, {"a": torch.ones(16), "b": torch.ones(16)})
    raw = src.read_bytes()
    for cut in (len(raw) - 1, len(raw) - 64, 12):
        p = tmp_path / f"cut{cut}.safetensors"
        p.write_bytes(raw[:cut])
        msg = _open_error(p)
        assert "truncated" in msg, msg


def test_reads_the_cpp_writer(tmp_path, cpp_checkpoint):
    """A file kvtier-make-checkpoint wrote opens, and every tensor covers the data."""
    with SafetensorsFile(os.path.join(cpp_checkpoint, "model.safetensors")) as f:
        assert "model.embed_tokens.weight" in f
        assert f.tensors["model.embed_tokens.weight"].dtype == "BF16"
        t = f.read("model.layers.0.input_layernorm.weight")
        assert torch.equal(t, torch.ones_like(t))  # RandomWeights sets norms to 1
