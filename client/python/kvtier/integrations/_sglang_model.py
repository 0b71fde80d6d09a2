# The model identity KvtierStorage folds into its keys. SGLang's page hashes
# (get_hash_str in python/sglang/srt/mem_cache/hicache_storage.py, v0.5.3 ...
# v0.5.6.post1) cover the tokens only, so every server setting that changes
# the KV bytes of a page for one model name goes into the key here, read from
# SGLang's server args, plus what the user names in extra_config["model_config"].
import dataclasses
import hashlib
import json
import logging

log = logging.getLogger("kvtier.integrations.sglang")

# ServerArgs fields (v0.5.4 ... v0.5.6.post1, python/sglang/srt/server_args.py)
# that change a page's bytes: the weights (path, revision, loader, per-version
# label), their precision and quantization, the KV cache dtype and its scales,
# HF config overrides (RoPE, window, layers...), the model implementation and
# LoRA. Not here: context_length (bounds the length, leaves RoPE as the config
# says), parallelism (the deployment string has it), kernels and schedulers.
KV_SERVER_ARGS = ("model_path", "revision", "load_format", "weight_version", "dtype",
                  "quantization", "quantization_param_path", "modelopt_quant", "torchao_config",
                  "kv_cache_dtype", "json_model_override_args", "model_impl", "enable_lora",
                  "lora_paths")


def read_server_args():
    """SGLang's ServerArgs of this (scheduler) process, or (None, why).
    get_global_server_args() exists from v0.5.4 and is set by ModelRunner
    before the scheduler builds HiRadixCache and with it this backend; v0.5.3
    (the first with a `dynamic` backend) has only schedule_batch's
    global_server_args_dict, which holds none of KV_SERVER_ARGS but
    torchao_config."""
    try:
        from sglang.srt.server_args import get_global_server_args
    except ImportError as e:
        return None, f"this SGLang has no get_global_server_args ({e}; it exists from v0.5.4)"
    try:
        return get_global_server_args(), None
    except (ValueError, RuntimeError) as e:
        return None, f"SGLang's server args are not set in this process ({e})"


def _lora_ref(v):
    # LoRARef (lora/lora_registry.py) carries a lora_id made by uuid4 in every
    # process: the adapter is its name and path.
    return {"lora_name": getattr(v, "lora_name", None), "lora_path": getattr(v, "lora_path")}


def canonical(v):
    """v as JSON-able data that is equal for equal settings in any process:
    dicts by sorted key (json.dumps sorts), sets and adapter lists sorted,
    JSON strings (json_model_override_args) parsed, LoRA refs by name and path."""
    if v is None or isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, str):
        if v.startswith(("{", "[")):
            try:
                return {"json": canonical(json.loads(v))}
            except ValueError:
                pass
        return v
    if isinstance(v, dict):
        return {str(k): canonical(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        items = [canonical(x) for x in v]
        if isinstance(v, (set, frozenset)) or all(hasattr(x, "lora_path") for x in v):
            items.sort(key=lambda x: json.dumps(x, sort_keys=True))
        return items
    if hasattr(v, "lora_path"):
        return _lora_ref(v)
    if dataclasses.is_dataclass(v):
        return {f.name: canonical(getattr(v, f.name)) for f in dataclasses.fields(v)}
    return f"{type(v).__name__}:{v}"


def check_model_config(value):
    """extra_config["model_config"]: None, a non-empty str, or JSON-able data."""
    if value is None or (isinstance(value, str) and value):
        return value
    if isinstance(value, (dict, list)):
        try:
            json.dumps(value, sort_keys=True, allow_nan=False)
            return value
        except (TypeError, ValueError) as e:
            raise ValueError(f"extra_config['model_config'] is not JSON data: {e}") from e
    raise ValueError(f"extra_config['model_config'] = {value!r}: a non-empty str or a JSON "
                     "object naming what changes the KV that SGLang does not say")


def model_identity(model, model_config=None):
    """`model` with a digest of the KV-changing server settings and the user's
    model_config. When the server args cannot be read, warns (once: this is
    built once per scheduler process) naming what is not folded; the digest
    then says "unknown", so such a backend never shares pages with one that
    read them."""
    args, why = read_server_args()
    if args is None:
        log.warning("kvtier: %s, so these SGLang settings are NOT folded into kvtier's keys: "
                    "%s. Deployments of %r that differ in them would share pages: name them "
                    "in extra_config[\"model_config\"] (a string or JSON object)",
                    why, ", ".join(KV_SERVER_ARGS), model)
        server = "unknown"
    else:
        server = {name: canonical(getattr(args, name, None)) for name in KV_SERVER_ARGS}
    factors = {"server_args": server, "model_config": canonical(model_config)}
    blob = json.dumps(factors, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return f"{model}|{hashlib.sha256(blob.encode()).hexdigest()[:32]}"
