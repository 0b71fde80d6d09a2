#!/usr/bin/env bash
# The install path, end to end: `cmake --install` into a temporary prefix;
# an out-of-tree program built against that prefix twice (find_package(kvtier)
# and pkg-config) and run against the *installed* kvtierd on a private ipc
# socket; the installed systemd unit verified; the installed Python package
# imported from the prefix and pinged through. Exit 0 when everything held.
#   install_test.sh --build DIR --source CONSUMER_DIR --cmake CMAKE --python ON|OFF
#                   [--python-dir RELATIVE_DIR]   (default lib/python3/dist-packages)
#                   [--sanitize address|thread|undefined]   (the build's KVTIER_SANITIZE)
#                   --version MAJOR.MINOR   (the build's; find_package asks for it)
set -euo pipefail

build="" source="" cmake=cmake python=OFF python_dir=lib/python3/dist-packages sanitize="" version=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --source) source=$2; shift 2 ;;
    --cmake) cmake=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --python-dir) python_dir=$2; shift 2 ;;
    --sanitize) sanitize=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    *) echo "install_test: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -d $build && -f $source/main.cc && -n $version ]] ||
  { echo "install_test: need --build, --source and --version" >&2; exit 2; }

work=$(mktemp -d /tmp/kvtier-install-XXXXXX)
prefix=$work/prefix
daemon_pid=""
cleanup() {
  if [[ -n $daemon_pid ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -KILL "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
die() {
  echo "install_test: FAIL: $*" >&2
  [[ -f $work/kvtierd.log ]] && { echo "--- kvtierd log" >&2; cat "$work/kvtierd.log" >&2; }
  exit 1
}
step() { echo "install_test: $*"; }

step "cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; die "cmake --install failed"; }

# The library directory is lib/ (GNUInstallDirs; lib/<multiarch> when the
# build was configured for /usr): where the .pc file went.
pc=$(find "$prefix" -name kvtier-client.pc -path '*/pkgconfig/*' | head -n1)
[[ -n $pc ]] || die "kvtier-client.pc was not installed"
libdir=$(dirname "$(dirname "$pc")")
# What a user of the prefix relies on.
for f in bin/kvtierd bin/kvtierctl bin/kvtier-stress bin/kvtier-generate \
         bin/kvtier-make-checkpoint include/kvtier/client.h include/kvtier/layout.h \
         include/kvtier/page_key.h lib/systemd/system/kvtierd.service etc/default/kvtierd \
         "${libdir#"$prefix"/}"/cmake/kvtier/kvtierConfig.cmake \
         "${libdir#"$prefix"/}"/cmake/kvtier/kvtierConfigVersion.cmake \
         "${libdir#"$prefix"/}"/libkvtier-client.so; do
  [[ -e $prefix/$f ]] || die "$f was not installed"
done
# Every kvtier header an installed header names (by #include or in a
# comment that sends the reader there) is installed too.
for h in "$prefix"/include/kvtier/*.h; do
  for named in $(grep -oh 'kvtier/[a-z_]*\.h' "$h" | sort -u); do
    [[ -e $prefix/include/$named ]] || die "$(basename "$h") names $named, which was not installed"
  done
done
# The licence, the DEB's copyright file, the changelog and the monitoring kit.
for f in share/doc/kvtier/LICENSE share/doc/kvtier/copyright share/doc/kvtier/CHANGELOG.md \
         share/kvtier/monitoring/grafana-kvtier.json share/kvtier/monitoring/kvtier-alerts.yml \
         share/doc/kvtier/README.md share/doc/kvtier/OPERATIONS.md share/doc/kvtier/PROTOCOL.md \
         share/doc/kvtier/SECURITY.md share/doc/kvtier/PYTHON.md share/doc/kvtier/INTEGRATIONS.md \
         share/doc/kvtier/BENCHMARKS.md share/doc/kvtier/TOOLS.md; do
  [[ -s $prefix/$f ]] || die "$f was not installed"
done
# Man pages from --help (help2man, when the build found it).
if command -v help2man >/dev/null; then
  for f in share/man/man8/kvtierd.8 share/man/man1/kvtierctl.1 share/man/man1/kvtier-stress.1; do
    [[ -s $prefix/$f ]] || die "$f was not installed"
  done
  grep -q -- "max_sessions" "$prefix/share/man/man8/kvtierd.8" || die "kvtierd.8 lacks its flags"
fi
# The library's SONAME carries the ABI (major.minor before 1.0).
soname=$(readelf -d "$libdir/libkvtier-client.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[[ $soname =~ ^libkvtier-client\.so\.[0-9]+\.[0-9]+$ ]] || die "unexpected SONAME '$soname'"
[[ -e $libdir/$soname ]] || die "$soname (the SONAME) is not installed"
# The unit names the installed binary and environment file of this prefix.
unit=$prefix/lib/systemd/system/kvtierd.service
grep -q "^ExecStart=$prefix/bin/kvtierd " "$unit" || die "the unit's ExecStart is not $prefix/bin/kvtierd"
grep -q "^EnvironmentFile=-$prefix/etc/default/kvtierd$" "$unit" ||
  die "the unit's EnvironmentFile is not $prefix/etc/default/kvtierd"
if command -v systemd-analyze >/dev/null; then
  # --man=no: the Documentation= files are not on this machine's man path.
  # It exits 0 on unknown or misspelt settings and only warns: any output fails.
  if ! systemd-analyze verify --man=no "$unit" >"$work/verify.log" 2>&1 || [[ -s $work/verify.log ]]; then
    cat "$work/verify.log" >&2
    die "systemd-analyze verify objects to the unit"
  fi
  step "systemd-analyze verify: OK"
else
  step "SKIP systemd-analyze verify: systemd-analyze is not installed"
fi

# A sanitized libkvtier-client needs its runtime loaded first: the consumers
# are built with the same -fsanitize (and the Python step cannot run).
cxxflags=""
[[ -n $sanitize ]] && cxxflags="-fsanitize=$sanitize"

step "consumer with find_package(kvtier CONFIG) -> kvtier::client"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
"$cmake" "${generator[@]}" -S "$source" -B "$work/consumer-build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_FLAGS="$cxxflags" -DKVTIER_WANT_VERSION="$version" \
  >"$work/consumer.log" 2>&1 ||
  { cat "$work/consumer.log" >&2; die "configuring the consumer failed"; }
"$cmake" --build "$work/consumer-build" >>"$work/consumer.log" 2>&1 ||
  { cat "$work/consumer.log" >&2; die "building the consumer failed"; }
consumer_cmake=$work/consumer-build/kvtier-consumer

step "consumer with pkg-config kvtier-client"
export PKG_CONFIG_PATH=$libdir/pkgconfig
pc_flags=$(pkg-config --cflags --libs kvtier-client) || die "pkg-config kvtier-client failed"
pc_libdir=$(pkg-config --variable=libdir kvtier-client)
[[ $(realpath "$pc_libdir") == "$(realpath "$libdir")" ]] || die "pkg-config libdir $pc_libdir is not $libdir"
consumer_pc=$work/kvtier-consumer-pc
# shellcheck disable=SC2086  # pkg-config output is a list of flags
g++ -O1 $cxxflags -o "$consumer_pc" "$source/main.cc" $pc_flags -Wl,-rpath,"$pc_libdir" \
  >"$work/consumer-pc.log" 2>&1 || { cat "$work/consumer-pc.log" >&2; die "g++ with pkg-config flags failed"; }
for exe in "$consumer_cmake" "$consumer_pc"; do
  needed=$(readelf -d "$exe" | grep NEEDED || true)
  grep -q "libkvtier-client.so" <<<"$needed" || die "$(basename "$exe") does not link libkvtier-client.so"
  ! grep -Eq "libzmq|libprotobuf" <<<"$needed" || die "$(basename "$exe") links our private deps: $needed"
done

step "installed kvtierd on a private ipc socket"
socket=$work/run/kvtierd.sock
"$prefix/bin/kvtierd" --socket="$socket" --state_dir="$work/state" --host_bytes=64MiB \
  --host_slab_bytes=1MiB --hugepages=off --nvme_bytes=0 --copy_threads=1 \
  >"$work/kvtierd.log" 2>&1 &
daemon_pid=$!
# Ready when the socket exists (it is bound before the frontend runs).
for _ in $(seq 1 200); do
  [[ -S $socket ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || die "kvtierd exited during startup"
  sleep 0.05
done
[[ -S $socket ]] || die "kvtierd did not bind $socket within 10 s"

"$consumer_cmake" "ipc://$socket" || die "the find_package consumer failed"
"$consumer_pc" "ipc://$socket" || die "the pkg-config consumer failed"

if [[ $python == ON && -n $sanitize ]]; then
  step "SKIP python: a -fsanitize=$sanitize extension cannot load into /usr/bin/python3"
elif [[ $python == ON ]]; then
  step "installed Python package from $prefix/$python_dir"
  # From an empty directory with no user site, so only the prefix provides kvtier.
  (cd "$work" && PYTHONPATH=$prefix/$python_dir /usr/bin/python3 -s - \
      "$prefix" "ipc://$socket" <<'EOF'
import os
import sys

import kvtier

prefix, endpoint = os.path.realpath(sys.argv[1]), sys.argv[2]
for what, path in (("kvtier", kvtier.__file__), ("kvtier._native", kvtier._native.__file__)):
    if not os.path.realpath(path).startswith(prefix + os.sep):
        sys.exit(f"{what} was imported from {path}, not from the installed prefix {prefix}")
client = kvtier.Client(endpoint=endpoint, client_name="install_test")
reply = client.ping()
client.close()
if not reply.get("version"):
    sys.exit(f"ping through the installed package returned {reply!r}")
print(f"install_test: python: kvtier from {os.path.dirname(kvtier.__file__)}, "
      f"ping -> kvtierd {reply['version']}")
EOF
  ) || die "the installed Python package failed"
else
  step "SKIP python: this build has no kvtier_python target (needs python3-dev and pybind11-dev)"
fi

step "SIGTERM: kvtierd stops cleanly"
kill -TERM "$daemon_pid"
rc=0
wait "$daemon_pid" || rc=$?
daemon_pid=""
[[ $rc -eq 0 ]] || die "kvtierd exited $rc after SIGTERM"
step "OK"
