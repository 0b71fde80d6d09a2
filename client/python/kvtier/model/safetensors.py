# A strict safetensors reader (8-byte little-endian header length, a JSON
# header {name: {dtype, shape, data_offsets}}, then the bytes): every entry is
# validated when the file is opened, and anything malformed — truncation, bad
# JSON, duplicate names, overlapping or uncovered bytes — is a SafetensorsError
# naming the file and the tensor. Tensors of dtypes other than F32/F16/BF16
# are listed and only refused when read. No third-party package.
import json
import mmap
import os
import sys

import numpy as np
import torch

__all__ = ["SafetensorsError", "TensorInfo", "SafetensorsFile", "write_safetensors"]

_MAX_HEADER_BYTES = 100 << 20  # as the C++ reader
_DTYPES = {"F32": (4, np.float32, torch.float32), "F16": (2, np.float16, torch.float16),
           "BF16": (2, np.int16, torch.bfloat16)}  # numpy has no bf16: read the bits
# Dtypes listed but never converted (a checkpoint may carry tensors the model
# does not read: I64 position_ids, inv_freq buffers, ...): element bytes, so
# their spans are still checked. A name in neither table is only bounds-checked.
_OTHER_DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2,
                      "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


class SafetensorsError(ValueError):
    """A safetensors file is malformed or lacks what the caller needs."""


class TensorInfo:
    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name, dtype, shape, begin, end):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __repr__(self):
        return f"TensorInfo({self.name!r}, {self.dtype}, {self.shape}, [{self.begin}, {self.end}))"


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f'duplicate key "{k}"')
        out[k] = v
    return out


def _reject_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def _is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _parse_entry(name, e, data_bytes):
    def bad(why):
        return SafetensorsError(f'tensor "{name}": {why}')
    if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
        raise bad("entry must have exactly dtype, shape and data_offsets")
    dtype = e["dtype"]
    if not isinstance(dtype, str):
        raise bad("dtype is not a string")
    shape = e["shape"]
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        raise bad("shape must be a list of non-negative integers")
    off = e["data_offsets"]
    if not isinstance(off, list) or len(off) != 2 or not all(_is_uint(o) for o in off):
        raise bad("data_offsets must be [begin, end] of non-negative integers")
    t = TensorInfo(name, dtype, tuple(shape), off[0], off[1])
    if t.end < t.begin:
        raise bad("data_offsets end before begin")
    elem = _DTYPES[dtype][0] if dtype in _DTYPES else _OTHER_DTYPE_BYTES.get(dtype, 0)
    want = t.numel() * elem
    if elem and t.end - t.begin != want:
        raise bad(f"data_offsets span {t.end - t.begin} bytes but shape {list(t.shape)} of "
                  f"{dtype} needs {want}")
    if t.end > data_bytes:
        raise bad(f"data runs to byte {t.end} but the file's data section has only "
                  f"{data_bytes} (truncated file?)")
    return t


def _check_layout(tensors, data_bytes):
    """Tensors must tile the data section: no overlap (two names for one byte),
    no gap and nothing after the last tensor (bytes no header describes)."""
    at = 0
    for t in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if t.begin < at:
            raise SafetensorsError(f'tensor "{t.name}" at bytes [{t.begin}, {t.end}) overlaps '
                                   f"the tensor before it (which ends at {at})")
        if t.begin > at:
            raise SafetensorsError(f"bytes [{at}, {t.begin}) of the data section belong to no "
                                   f'tensor (before "{t.name}")')
        at = t.end
    if at != data_bytes:
        raise SafetensorsError(f"the data section has {data_bytes} bytes but its tensors end "
                               f"at {at} (trailing bytes)")


class SafetensorsFile:
    """An open, validated safetensors file. Use as a context manager or close()."""

    def __init__(self, path):
        self.path = os.fspath(path)
        if sys.byteorder != "little":
            raise SafetensorsError(f"{self.path}: only little-endian hosts are supported")
        with open(self.path, "rb") as f:  # FileNotFoundError names the path
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise SafetensorsError(f"{self.path}: truncated header: file is {size} bytes, "
                                       "less than the 8-byte length")
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self.tensors, self._data_start = self._parse(size)
        except SafetensorsError as e:
            self.close()
            raise SafetensorsError(f"{self.path}: {e}") from None

    def _parse(self, size):
        n = int.from_bytes(self._map[:8], "little")
        if n > _MAX_HEADER_BYTES or n > size - 8:
            raise SafetensorsError(f"truncated header: header length {n} but the file has "
                                   f"{size - 8} bytes after it")
        raw = self._map[8:8 + n]
        if not raw.lstrip(b" ").startswith(b"{"):
            raise SafetensorsError("header is not a JSON object")
        try:
            header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates,
                                parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise SafetensorsError(f"header is not valid JSON: {e}") from None
        if not isinstance(header, dict):
            raise SafetensorsError("header is not a JSON object")
        meta = header.pop("__metadata__", {})
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise SafetensorsError("__metadata__ must map names to strings")
        data_bytes = size - 8 - n
        tensors = {name: _parse_entry(name, e, data_bytes) for name, e in header.items()}
        _check_layout(tensors, data_bytes)
        return tensors, 8 + n

    def close(self):
        m, self._map = getattr(self, "_map", None), None
        if m is not None:
            m.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __contains__(self, name):
        return name in self.tensors

    def read(self, name, expected_shape=None):
        """Tensor `name` as a new fp32 torch tensor (fp16/bf16 widened exactly).
        KeyError-like SafetensorsError when missing or of another shape."""
        if self._map is None:
            raise SafetensorsError(f"{self.path}: file is closed")
        t = self.tensors.get(name)
        if t is None:
            raise SafetensorsError(f'{self.path}: missing tensor "{name}"')
        if expected_shape is not None and tuple(expected_shape) != t.shape:
            raise SafetensorsError(f'{self.path}: tensor "{name}" has shape {list(t.shape)}, '
                                   f"expected {list(expected_shape)}")
        if t.dtype not in _DTYPES:
            raise SafetensorsError(f'{self.path}: tensor "{name}" has dtype {t.dtype}; the '
                                   "decoder reads F32, F16 or BF16")
        _, np_dtype, torch_dtype = _DTYPES[t.dtype]
        arr = np.frombuffer(self._map, dtype=np_dtype, count=t.numel(),
                            offset=self._data_start + t.begin).copy()
        out = torch.from_numpy(arr)
        if torch_dtype == torch.bfloat16:
            out = out.view(torch.bfloat16)
        return out.float().reshape(t.shape)


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    """Writes {name: fp32 tensor} stored as `dtype` (tests and tools); tensors
    back to back in the given order, header padded to 8 bytes with spaces."""
    conv = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype]
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().to(conv).contiguous().view(torch.int16 if conv != torch.float32
                                                  else torch.int32).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = os.fspath(path) + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
