# kvtier.model: a small PyTorch Llama-style decoder whose KV cache is paged in
# kvtier's page layout and restored through kvtierd before prefill; its pages
# and keys are interchangeable with the C++ decoder's (kvtier-generate).
# Modules: config, safetensors, weights, paged_kv, llama, prefix_store,
# generator, generate (the CLI: python3 -m kvtier.model.generate --help).
