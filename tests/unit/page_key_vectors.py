#!/usr/bin/env python3
"""Reference implementation of kvtier page keys and layout ids in plain Python.

It is independent of the C++ code (hashlib only) and prints the fixed test
vectors that tests/unit/api_test.cc checks, so a Python client can reproduce
keys byte for byte. Encoding (docs/PROTOCOL.md): SHA-256 over tagged fields,
each `tag (1 byte) | length (u32 LE) | bytes`.
"""
import hashlib
import struct


def field(tag, data):
    return bytes([tag]) + struct.pack("<I", len(data)) + data


def layout_id(layers, kv_heads, head_dim, tokens_per_page, dtype):
    msg = field(0, b"kvtier/layout")
    for tag, v in enumerate([layers, kv_heads, head_dim, tokens_per_page, dtype], start=1):
        msg += field(tag, struct.pack("<I", v))
    return struct.unpack("<Q", hashlib.sha256(msg).digest()[:8])[0]


def page_key(lid, parent, tokens):
    msg = field(0, b"kvtier/page-key") + field(1, struct.pack("<I", 1))
    msg += field(2, struct.pack("<Q", lid)) + field(3, parent)
    msg += field(4, b"".join(struct.pack("<I", t) for t in tokens))
    return hashlib.sha256(msg).digest()[:16]


def chain(lid, tpp, tokens):
    keys, parent = [], bytes(16)
    for start in range(0, len(tokens) - tpp + 1, tpp):
        parent = page_key(lid, parent, tokens[start:start + tpp])
        keys.append(parent)
    return keys


if __name__ == "__main__":
    # Layout {layers=2 kv_heads=4 head_dim=64 tokens_per_page=4 dtype=fp16(2)}
    lid = layout_id(2, 4, 64, 4, 2)
    print(f"layout_id = 0x{lid:016x}")
    tokens = list(range(1, 11))  # 10 tokens: 2 full pages of 4, 2 left over
    for i, k in enumerate(chain(lid, 4, tokens)):
        print(f"key[{i}] = {k.hex()}")
    print(f"single = {page_key(lid, bytes(16), [0xFFFFFFFF, 0, 7, 42]).hex()}")
