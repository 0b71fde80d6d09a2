# kvtier: the Python client of kvtierd, the tiered KV-cache daemon. The
# compiled half (kvtier._native) sits beside these modules: in an installed
# package (pip install .), or in <build>/python/kvtier/ where CMake builds it
# and links the sources. docs/PYTHON.md describes the API.
from .errors import *  # noqa: F401,F403 -- Error and one class per status code
from .errors import Error  # noqa: F401


def _native_missing(e):
    """Why kvtier._native did not import, and how to get one that does."""
    import glob
    import os
    import sys
    import sysconfig
    here = os.path.dirname(os.path.abspath(__file__))
    built = sorted(os.path.basename(p) for p in glob.glob(os.path.join(here, "_native*.so")))
    mine = (f"{sys.executable} (Python {sys.version_info.major}.{sys.version_info.minor}, "
            f"which loads _native{sysconfig.get_config_var('EXT_SUFFIX')})")
    how = (f"build it for this interpreter: `{sys.executable} -m pip install "
           "--no-build-isolation .` in the kvtier checkout, or configure CMake with "
           f"-DPython3_EXECUTABLE={sys.executable}")
    if built:
        return ImportError(f"kvtier's extension in {here} was built for another Python "
                           f"({', '.join(built)}); this is {mine}: {how} ({e})")
    return ImportError(f"kvtier's extension kvtier._native is not in {here}: {how}, or put "
                       f"<build>/python (after building the kvtier_python target) on "
                       f"PYTHONPATH ({e})")


try:
    from . import _native
except ImportError as e:  # pragma: no cover -- depends on the build
    raise _native_missing(e) from e

from ._native import (  # noqa: F401
    Layout, ShmBuffer, LookupResult, PutResult, PrefetchResult, LookupFuture, Xxh3_128,
    page_keys, pack_keys, xxh3_128, cuda_available, built_with_cuda, default_endpoint)
from .client import Client, Region  # noqa: F401
from .keys import external_keys, KEY_BYTES  # noqa: F401

# Tier names as the calls return them (None is a miss).
TIERS = ("hbm", "host", "nvme", "remote")
# GET policies: read every present page / only pages in RAM now / wait up to timeout_ms.
GET_POLICIES = ("wait", "best_effort", "timeout")

# CMake's project(VERSION), compiled into the extension: one version source.
__version__ = _native.__version__
