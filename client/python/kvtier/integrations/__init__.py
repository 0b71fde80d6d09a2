# kvtier inside inference engines: an engine-agnostic core (core.py, paging.py)
# and thin connectors for vLLM (vllm.py: KvtierConnector, a V1 KV connector)
# and SGLang (sglang.py: KvtierStorage, a HiCache storage backend). Import the
# connector modules directly; they pull in torch. See docs/INTEGRATIONS.md.
