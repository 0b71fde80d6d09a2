#!/usr/bin/env bash
# kvtier installed the Python way (issue 25): builds the wheel with pip from
# the repository (offline, Debian's /usr/bin/python3, no build isolation;
# KVTIER_BUILD_DIR lets setup.py build the extension incrementally in this
# build), installs it into a fresh `venv --system-site-packages`, runs the
# Python suites against that install (not the build tree), and checks that
# `pip uninstall` leaves no file of it behind.
# Usage: package_test.sh BUILD_DIR [pytest args...]
set -euo pipefail
BUILD="$(cd "${1:?usage: $0 BUILD_DIR [pytest args]}" && pwd)"
shift
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
PY=/usr/bin/python3
"$PY" -m pip --version >/dev/null 2>&1 || { echo "SKIP: python3-pip missing"; exit 77; }
"$PY" -c 'import venv, ensurepip' 2>/dev/null || { echo "SKIP: python3-venv missing"; exit 77; }
TMP="$(mktemp -d /tmp/kvtier-pkg.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT

echo "== pip wheel"
KVTIER_BUILD_DIR="$BUILD" "$PY" -m pip wheel --no-build-isolation --no-deps --no-index \
  -w "$TMP/dist" "$SRC" >"$TMP/wheel.log" 2>&1 || { cat "$TMP/wheel.log"; exit 1; }
WHEEL="$(ls "$TMP"/dist/kvtier-*.whl)"
echo "   $(basename "$WHEEL")"

echo "== install into a fresh venv"
"$PY" -m venv --system-site-packages "$TMP/venv"
VPY="$TMP/venv/bin/python"
# No index, and dependencies (numpy) from the system's packages.
"$VPY" -m pip install --no-index "$WHEEL" >"$TMP/install.log" 2>&1 || { cat "$TMP/install.log"; exit 1; }
SITE="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$VPY" - "$SITE" <<'PY'
import importlib.metadata, os, sys
import kvtier
site = sys.argv[1]
assert os.path.dirname(os.path.dirname(os.path.abspath(kvtier.__file__))) == os.path.abspath(site), \
    f"imported {kvtier.__file__}, not the venv's install in {site}"
files = importlib.metadata.files("kvtier")
names = {str(f) for f in files}
for want in ("kvtier/__init__.py", "kvtier/py.typed", "kvtier/_native.pyi",
             "kvtier/integrations/vllm.py", "kvtier/model/llama.py"):
    assert want in names, f"{want} not in the wheel"
assert any(n.startswith("kvtier/_native.") and n.endswith(".so") for n in names)
assert not any("standin" in n for n in names), "test stand-ins must not ship in the package"
print("   kvtier", importlib.metadata.version("kvtier"), "from", kvtier.__file__)
PY
printf '%s\n' "$SITE" >"$TMP/site"

echo "== the Python suites against the install"
cd "$SRC/tests/python"
env -u PYTHONPATH KVTIER_TEST_INSTALLED=1 KVTIER_BUILD_DIR="$BUILD" PYTHONDONTWRITEBYTECODE=1 \
  "$VPY" -m pytest -q -p no:cacheprovider "$@"

echo "== pip uninstall"
"$VPY" -m pip uninstall -y kvtier >"$TMP/uninstall.log" 2>&1 || { cat "$TMP/uninstall.log"; exit 1; }
LEFT="$(find "$SITE" -iname '*kvtier*' | head -5)"
[ -z "$LEFT" ] || { echo "FAIL: pip uninstall left: $LEFT"; exit 1; }
echo "   nothing of kvtier left in $SITE"
