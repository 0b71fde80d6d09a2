# The package as a package: its type stub matches the extension, and an
# interpreter the extension was not built for gets an error that names both
# Pythons and how to build for its own. (The wheel / venv / uninstall path is
# tests/python/package_test.sh.)
import os
import shutil
import subprocess
import sys
import sysconfig

import kvtier

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.dirname(os.path.abspath(kvtier.__file__))


def test_stub_matches_the_extension(tmp_path):
    out = tmp_path / "_native.pyi"
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "gen_native_stubs.py"), str(out)],
                   check=True, env=dict(os.environ, PYTHONPATH=os.path.dirname(PKG)))
    committed = os.path.join(REPO, "client", "python", "kvtier", "_native.pyi")
    with open(committed) as f:
        want = f.read()
    assert out.read_text() == want, (
        "client/python/kvtier/_native.pyi is stale: regenerate it with "
        "`PYTHONPATH=build/python /usr/bin/python3 scripts/gen_native_stubs.py "
        "client/python/kvtier/_native.pyi`")
    assert os.path.exists(os.path.join(PKG, "py.typed"))
    assert os.path.exists(os.path.join(PKG, "_native.pyi"))


def test_an_extension_for_another_python_is_named(tmp_path):
    # A copy of the package whose extension claims another CPython: what an
    # interpreter the build was not made for sees.
    pkg = tmp_path / "kvtier"
    shutil.copytree(PKG, pkg, symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "_native*.so"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    other = "_native.cpython-39-x86_64-linux-gnu.so"
    assert other != "_native" + suffix
    (pkg / other).write_bytes(b"")
    r = subprocess.run([sys.executable, "-c", "import kvtier"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert r.returncode != 0
    assert "built for another Python" in r.stderr, r.stderr
    assert other in r.stderr and ("_native" + suffix) in r.stderr, r.stderr
    assert "pip install" in r.stderr and "Python3_EXECUTABLE" in r.stderr, r.stderr


def test_version_is_cmakes():
    import importlib.metadata
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        text = f.read()
    import re
    want = re.search(r"project\(\s*kvtier\b[^)]*?\bVERSION\s+([0-9][0-9.]*)", text).group(1)
    assert kvtier.__version__ == want
    if os.environ.get("KVTIER_TEST_INSTALLED") == "1":  # only an installed package has metadata
        assert importlib.metadata.version("kvtier") == want
