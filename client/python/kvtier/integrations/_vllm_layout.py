# Which dims a vLLM attention backend gives each layer's KV tensor. The
# backends disagree: FlashAttention allocates (2, num_blocks, block_size,
# num_kv_heads, head_size), FlashInfer (num_blocks, 2, block_size, num_kv_heads,
# head_size) (vllm/v1/attention/backends/{flash_attn,flashinfer}.py,
# get_kv_cache_shape, v0.11.1). A wrong guess would gather the wrong bytes into
# every page, so the layout is asked of the backend itself, or read off the
# tensors when that is unambiguous, or refused.
import logging

log = logging.getLogger("kvtier.integrations.vllm")

# The layouts of the backends kvtier was checked against, by name.
KNOWN_DIMS = {"2BTHD": "FlashAttention", "B2THD": "FlashInfer"}
AUTO = "auto"


def _backend_of(vllm_config, layer_name):
    """The attention backend class vLLM chose for a layer, or None. vLLM puts
    every Attention layer in compilation_config.static_forward_context under
    its name; the layer holds its backend class as `attn_backend`."""
    cc = getattr(vllm_config, "compilation_config", None)
    ctx = getattr(cc, "static_forward_context", None) or {}
    layer = ctx.get(layer_name)
    backend = getattr(layer, "attn_backend", None)
    if backend is None and callable(getattr(layer, "get_attn_backend", None)):
        backend = layer.get_attn_backend()
    return backend


def dims_from_backend(backend, block_size, kv_heads, head_dim):
    """Asks backend.get_kv_cache_shape where it puts each dim, with a block
    count no other dim can equal; None when the answer is not a plain
    permutation of the five (e.g. an MLA backend)."""
    get_shape = getattr(backend, "get_kv_cache_shape", None)
    if get_shape is None:
        return None
    # Sizes no two dims share (the backend only arranges them): a block count
    # and a head count unlike the rest; block and head size stay the model's
    # (backends check those). Only block_size == head_dim can tie: both known
    # layouts put the token dim first.
    probe = max(2, block_size, kv_heads, head_dim) + 1
    heads = next(h for h in range(3, 100) if h not in (probe, block_size, head_dim))
    try:
        shape = tuple(get_shape(probe, block_size, heads, head_dim))
    except Exception as e:  # noqa: BLE001 -- a backend refusing the probe: fall back
        log.info("kvtier: %s.get_kv_cache_shape refused a probe (%s)", _name(backend), e)
        return None
    sizes = {"2": 2, "B": probe, "T": block_size, "H": heads, "D": head_dim}
    letters = []
    for n in shape:
        match = [c for c in "2BTHD" if sizes[c] == n and c not in letters]
        if not match:
            return None
        letters.append(match[0])
    dims = "".join(letters)
    return dims if sorted(dims) == sorted("2BTHD") else None


def dims_from_shape(shape, block_size, kv_heads, head_dim):
    """The known layouts that fit a tensor shape, given the model's sizes."""
    fits = []
    for dims in KNOWN_DIMS:
        sizes = {"2": 2, "T": block_size, "H": kv_heads, "D": head_dim}
        if len(shape) == 5 and all(shape[dims.index(c)] == s for c, s in sizes.items()):
            fits.append(dims)
    return fits


def _name(backend):
    return getattr(backend, "__name__", type(backend).__name__)


def resolve_kv_dims(configured, vllm_config, layer_name, shape, block_size, kv_heads, head_dim):
    """The dims string for PagedKv: the configured one, or (configured
    "auto") the backend's, or the one known layout the shape fits. Raises
    ValueError naming kv_dims when none can be told."""
    if configured != AUTO:
        return configured
    backend = _backend_of(vllm_config, layer_name)
    if backend is not None:
        dims = dims_from_backend(backend, block_size, kv_heads, head_dim)
        if dims is not None:
            log.info("kvtier: KV layout %s from %s.get_kv_cache_shape", dims, _name(backend))
            return dims
    fits = dims_from_shape(tuple(shape), block_size, kv_heads, head_dim)
    if len(fits) == 1:
        log.info("kvtier: KV layout %s (%s) read off the KV tensors' shape %s", fits[0],
                 KNOWN_DIMS[fits[0]], tuple(shape))
        return fits[0]
    known = ", ".join(f"{d!r} ({b})" for d, b in KNOWN_DIMS.items())
    why = ("fits more than one known layout" if fits else "fits no known layout")
    raise ValueError(
        f"KvtierConnector cannot tell the KV layout of layer {layer_name!r}: its shape "
        f"{tuple(shape)} {why} for the model config (block_size {block_size}, {kv_heads} KV "
        f"heads, head size {head_dim}) and the attention backend did not say. Set "
        f"kv_connector_extra_config.kv_dims to the tensor's dims: {known}")
