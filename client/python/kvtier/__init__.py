# kvtier: the Python client of kvtierd, the tiered KV-cache daemon. The
# compiled half (kvtier._native, built by CMake into <build>/python/kvtier/)
# and these modules form one package; docs/PYTHON.md describes the API.
from pkgutil import extend_path

# The extension lives in the build tree (or beside us once installed).
__path__ = extend_path(__path__, __name__)

from .errors import *  # noqa: E402,F401,F403 -- Error and one class per status code
from .errors import Error  # noqa: E402,F401

try:
    from . import _native  # noqa: E402
except ImportError as e:  # pragma: no cover -- depends on the build
    raise ImportError(
        "kvtier's extension kvtier._native is not built or not on the path: build the "
        "`kvtier_python` target (cmake + ninja) and put <build>/python and client/python on "
        f"PYTHONPATH, or `cmake --install` the package ({e})") from e

from ._native import (  # noqa: E402,F401
    Layout, ShmBuffer, LookupResult, PutResult, PrefetchResult, LookupFuture, Xxh3_128,
    page_keys, pack_keys, xxh3_128, cuda_available, built_with_cuda, default_endpoint)
from .client import Client, Region  # noqa: E402,F401
from .keys import external_keys, KEY_BYTES  # noqa: E402,F401

# Tier names as the calls return them (None is a miss).
TIERS = ("hbm", "host", "nvme", "remote")
# GET policies: read every present page / only pages in RAM now / wait up to timeout_ms.
GET_POLICIES = ("wait", "best_effort", "timeout")

# CMake's project(VERSION), compiled into the extension: one version source.
__version__ = _native.__version__
