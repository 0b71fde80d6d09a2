# No engine at all: vllm and sglang are not importable (a None entry in
# sys.modules makes `import vllm` raise ImportError), as on a machine without
# them, to check what importing a connector then says.
vllm = sglang = None
MODULES = {}
ROOTS_ABSENT = ("vllm", "sglang")
