# Engine block hashes -> kvtier page keys. Engines that already hash their
# blocks by prefix (vLLM's request.block_hashes, SGLang's chained SHA-256 hex
# strings) can use those hashes as keys once they are mapped into kvtier's
# 16-byte key space with the model identity and the layout folded in, so two
# models (or two layouts of one model) never share a key. The encoding follows
# api/page_key.cc: SHA-256 over tagged, length-prefixed fields, truncated.
import hashlib
import struct

KEY_BYTES = 16

_DOMAIN = b"kvtier/external-key"
_VERSION = 1
# Field tags. The engine hash's tag says its type, so the int 5, the bytes
# b"\x05" and the string "5" are three different keys.
_TAG_DOMAIN, _TAG_VERSION, _TAG_LAYOUT, _TAG_MODEL = 0x00, 0x01, 0x02, 0x03
_TAG_BYTES, _TAG_INT, _TAG_STR = 0x10, 0x11, 0x12


def _field(tag, data):
    return struct.pack("<BI", tag, len(data)) + data


def _hash_field(h, i):
    # vLLM < 0.10 wraps the int in a BlockHashType (hash_value, token_ids, ...).
    if hasattr(h, "hash_value"):
        h = h.hash_value
    if isinstance(h, (bytes, bytearray, memoryview)):
        return _field(_TAG_BYTES, bytes(h))
    if isinstance(h, bool):
        raise TypeError(f"hashes[{i}] is a bool, not a block hash")
    if isinstance(h, int):
        # Two's complement, big-endian, shortest form (Python's hash() is signed).
        n = max(1, (h.bit_length() + 8) // 8)
        return _field(_TAG_INT, h.to_bytes(n, "big", signed=True))
    if isinstance(h, str):
        return _field(_TAG_STR, h.encode("utf-8"))
    raise TypeError(f"hashes[{i}] must be bytes, int or str, got {type(h).__name__}")


def external_keys(hashes, model, layout):
    """Page keys for engine-provided block hashes, one per hash, in order.

    hashes: an iterable of block hashes as the engine made them — bytes (vLLM >= 0.10
      BlockHash), int (older vLLM, or an object with .hash_value), or str (SGLang's hex
      SHA-256 chain). Each must already identify its whole prefix (engines chain them).
    model: a string naming the model and its weights (e.g. "meta-llama/Llama-3.1-8B@<rev>"
      or a weights fingerprint); keys of different models never collide.
    layout: the kvtier.Layout (its layout id is folded in) or the layout id as an int.

    key = SHA-256( 0x00|"kvtier/external-key", 0x01|u32 1, 0x02|u64 layout_id,
                   0x03|model utf-8, 0x10|bytes or 0x11|int or 0x12|str )[:16],
    each field tag (1 byte) | length (u32 LE) | value; ints LE, the engine int as
    signed big-endian two's complement of its shortest length.
    """
    if not isinstance(model, str) or not model:
        raise ValueError("model must be a non-empty str naming the model (and its weights)")
    layout_id = layout if isinstance(layout, int) else layout.layout_id
    if not 0 <= layout_id < 1 << 64:
        raise ValueError(f"layout id {layout_id} is not a u64")
    base = hashlib.sha256()
    base.update(_field(_TAG_DOMAIN, _DOMAIN))
    base.update(_field(_TAG_VERSION, struct.pack("<I", _VERSION)))
    base.update(_field(_TAG_LAYOUT, struct.pack("<Q", layout_id)))
    base.update(_field(_TAG_MODEL, model.encode("utf-8")))
    out = []
    for i, h in enumerate(hashes):
        d = base.copy()
        d.update(_hash_field(h, i))
        out.append(d.digest()[:KEY_BYTES])
    return out
