# Stand-ins for the inference engines kvtier's connectors plug into, one module
# per engine version (vllm_v0_11_0.py, sglang_v0_5_5.py, ...), each built from
# that version's source (its header names the files and the tag). vLLM and
# SGLang cannot be installed on kvtier's build machines; these let the tests
# run each connector against the interface of each version it names. They are
# not the engines: nothing here ran inside vLLM or SGLang.
#
# A stand-in module lists, in MODULES, the engine modules it replaces and the
# names each one exports. installed() puts them in sys.modules (only the tests
# do this, never the kvtier package) and re-imports the connectors against
# them, so a connector sees exactly one engine version at a time.
import contextlib
import importlib
import sys
import types

# The connector modules that import an engine when they are imported.
CONNECTORS = ("kvtier.integrations.vllm", "kvtier.integrations.sglang")


def _purge(prefixes):
    for name in list(sys.modules):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            del sys.modules[name]
            # `from pkg import mod` reads pkg.mod before sys.modules: drop it too.
            parent, _, leaf = name.rpartition(".")
            if parent in sys.modules and hasattr(sys.modules[parent], leaf):
                delattr(sys.modules[parent], leaf)


def _restore(saved):
    sys.modules.update(saved)
    for name, mod in saved.items():
        parent, _, leaf = name.rpartition(".")
        if parent in sys.modules and mod is not None:
            setattr(sys.modules[parent], leaf, mod)


@contextlib.contextmanager
def installed(standin_name):
    """Installs tests/python/standins/<standin_name>.py as its engine's
    modules for the duration; yields the stand-in module."""
    standin = importlib.import_module(f"standins.{standin_name}")
    absent = list(getattr(standin, "ROOTS_ABSENT", ()))
    roots = sorted({m.split(".")[0] for m in standin.MODULES} | set(absent))
    saved = {n: m for n, m in sys.modules.items()
             if any(n == r or n.startswith(r + ".") for r in roots) or n in CONNECTORS}
    _purge(roots + list(CONNECTORS))
    try:
        for name in absent:
            sys.modules[name] = None  # `import name` raises ImportError
        for name, exports in standin.MODULES.items():
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # parents first, as packages
                pkg = ".".join(parts[:i])
                if pkg not in sys.modules:
                    mod = types.ModuleType(pkg)
                    mod.__path__ = []  # a package: submodules resolve through sys.modules
                    sys.modules[pkg] = mod
                    if i > 1:
                        setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], mod)
            mod = sys.modules[name]
            for attr in exports:
                setattr(mod, attr, getattr(standin, attr))
        yield standin
    finally:
        _purge(roots + list(CONNECTORS))
        _restore(saved)
