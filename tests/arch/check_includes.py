#!/usr/bin/python3
"""Fails when a dependency arrow that DESIGN.md rules out appears.

Scans every #include in api/ kernels/ tiers/ prefetch/ daemon/ client/ tools/
and every target_link_libraries() in their CMake files, maps each to the
top-level folder that owns it, and reports FILE:LINE and the forbidden arrow.

Where an include comes from:
  "tiers/tier.h"        a path from the repository root (or from the including
                        file's folder or one above it, as the -I dirs allow);
  "kvtier/client.h"     a public header: the folder whose include/ tree (at any
                        depth, e.g. client/decoder/include/) holds that file;
  "kvtier.pb.h"         generated from a .proto: the folder holding the .proto;
  anything else         a third-party header (absl, zmq, ...), not checked.

Usage: check_includes.py [--root DIR]   check a tree (default: this repository)
       check_includes.py --self-test    check fabricated trees: one clean, one
                                        with each kind of forbidden arrow
"""
import argparse
import os
import re
import shutil
import sys
import tempfile

FOLDERS = ("api", "kernels", "tiers", "prefetch", "daemon", "client", "tools")
SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh", ".inc")

# owner -> folders it may never reach (DESIGN.md, "Arrows that must never
# exist", and the layout: api/ depends on nothing of ours, kernels/ only on
# api/; prefetch/ is the store too, so it may not reach the daemon or clients).
# Tools speak to the daemon through the client library, never by linking the
# store; kvtier-sim (tools/sim/) may use tiers/ and prefetch/.
FORBIDDEN = {
    "api": set(FOLDERS) - {"api"},
    "kernels": set(FOLDERS) - {"api", "kernels"},
    "tiers": {"daemon", "client", "prefetch", "tools"},
    "prefetch": {"daemon", "client", "tools"},
    "client": {"tiers", "daemon", "prefetch", "tools"},
    "daemon": {"client", "tools"},
    "tools": {"tiers", "prefetch", "daemon"},
}
# (path prefix of the including file or CMake file, folder it may reach anyway)
EXCEPTIONS = (
    ("tools/sim/", "tiers"),
    ("tools/sim/", "prefetch"),
)

# Inside tiers/ (DESIGN.md, "Arrows that must never exist"): each tier's
# folder and the shared cache know no store; the store's internal headers
# (tiers/store/internal/) are the store's alone. part -> parts it may not reach.
TIERS_PARTS = ("host", "hbm", "nvme", "store", "shared_cache", "remote")
TIERS_FORBIDDEN = {
    "host": {"store", "shared_cache"},
    "hbm": {"store", "shared_cache"},
    "nvme": {"store", "shared_cache"},
    "shared_cache": {"store"},
    "remote": {"store"},
}
STORE_INTERNAL = "tiers/store/internal/"

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
TARGET_DEF_RE = re.compile(r"\b(?:add_library|add_executable|kvtier_test)\s*\(\s*(?:NAME\s+)?([A-Za-z0-9_.+-]+)")
LINK_RE = re.compile(r"\btarget_link_libraries\s*\(([^)]*)\)", re.S)
LINK_KEYWORDS = {"PUBLIC", "PRIVATE", "INTERFACE", "LINK_PUBLIC", "LINK_PRIVATE", "debug",
                 "optimized", "general"}


def owner_of(rel):
    top = rel.split("/", 1)[0]
    return top if top in FOLDERS else None


def tiers_part(rel):
    parts = rel.split("/")
    if len(parts) > 2 and parts[0] == "tiers" and parts[1] in TIERS_PARTS:
        return parts[1]
    return None


def tiers_problem(src_rel, target_rel):
    """Why src_rel may not include target_rel (both repository paths), or None."""
    if target_rel.startswith(STORE_INTERNAL) and not src_rel.startswith("tiers/store/"):
        return "the store's internal header %s outside tiers/store/" % target_rel
    frm, to = tiers_part(src_rel), tiers_part(target_rel)
    if frm and to and frm != to and to in TIERS_FORBIDDEN.get(frm, ()):
        return "forbidden arrow tiers/%s -> tiers/%s" % (frm, to)
    return None


def allowed(src_rel, frm, to):
    if frm is None or to is None or frm == to or to not in FORBIDDEN.get(frm, ()):
        return True
    return any(src_rel.startswith(prefix) and to == target for prefix, target in EXCEPTIONS)


class Tree:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.files = []        # repository-relative source files, scanned
        self.public = {}       # "kvtier/client.h" -> set of owning folders
        self.protos = {}       # "kvtier" (stem) -> owning folder
        self.cmake = []        # repository-relative CMake files
        for top in FOLDERS:
            base = os.path.join(self.root, top)
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                rel_dir = os.path.relpath(dirpath, self.root)
                for name in sorted(filenames):
                    rel = os.path.join(rel_dir, name).replace(os.sep, "/")
                    if name.endswith(SOURCE_EXT):
                        self.files.append(rel)
                    elif name.endswith(".proto"):
                        self.protos[name[:-len(".proto")]] = top
                    elif name == "CMakeLists.txt" or name.endswith(".cmake"):
                        self.cmake.append(rel)
                parts = rel_dir.replace(os.sep, "/").split("/")
                if "include" in parts:
                    inc_root = "/".join(parts[: parts.index("include") + 1])
                    for name in filenames:
                        rel = os.path.join(rel_dir, name).replace(os.sep, "/")
                        self.public.setdefault(rel[len(inc_root) + 1:], set()).add(top)

    def exists(self, rel):
        return os.path.isfile(os.path.join(self.root, rel))

    def resolve(self, src_rel, header, quoted):
        """Owning folder of `header` included from src_rel; None: third party.
        A header found by path leaves that path in self.last_path."""
        self.last_path = None
        if quoted:
            # The including file's folder, then each folder above it up to the
            # root: the project's -I dirs (root, tools/, kernels/) are among them.
            d = os.path.dirname(src_rel)
            while True:
                cand = os.path.normpath(os.path.join(d, header)).replace(os.sep, "/")
                if not cand.startswith("..") and self.exists(cand):
                    self.last_path = cand
                    return owner_of(cand), None
                if not d:
                    break
                d = os.path.dirname(d)
        owners = self.public.get(header)
        if owners:
            if len(owners) > 1:
                return None, "public header %s is in several folders: %s" % (
                    header, ", ".join(sorted(owners)))
            return next(iter(owners)), None
        base = os.path.basename(header)
        if base.endswith(".pb.h") and base[: -len(".pb.h")] in self.protos:
            return self.protos[base[: -len(".pb.h")]], None
        return None, None


def check_includes(tree):
    problems = []
    for rel in tree.files:
        frm = owner_of(rel)
        with open(os.path.join(tree.root, rel), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                header = m.group(2)
                to, err = tree.resolve(rel, header, m.group(1) == '"')
                if err:
                    problems.append("%s:%d: %s" % (rel, lineno, err))
                elif not allowed(rel, frm, to):
                    problems.append('%s:%d: forbidden arrow %s -> %s (#include "%s")' % (
                        rel, lineno, frm, to, header))
                elif tree.last_path and tiers_problem(rel, tree.last_path):
                    problems.append('%s:%d: %s (#include "%s")' % (
                        rel, lineno, tiers_problem(rel, tree.last_path), header))
    return problems


def strip_cmake_comments(text):
    return "\n".join(re.sub(r"#.*", "", line) for line in text.splitlines())


def check_cmake(tree):
    """target_link_libraries(T ... D ...): owner(T) may not reach owner(D)."""
    texts = {}
    targets = {}  # target name -> (folder owning it, CMake file defining it)
    for rel in tree.cmake:
        with open(os.path.join(tree.root, rel), encoding="utf-8", errors="replace") as f:
            texts[rel] = strip_cmake_comments(f.read())
        for m in TARGET_DEF_RE.finditer(texts[rel]):
            targets.setdefault(m.group(1), (owner_of(rel), rel))
    problems = []
    for rel, text in texts.items():
        for m in LINK_RE.finditer(text):
            words = m.group(1).split()
            if not words or words[0] not in targets:
                continue
            frm, def_file = targets[words[0]]
            lineno = text.count("\n", 0, m.start()) + 1
            for dep in words[1:]:
                if dep in LINK_KEYWORDS or dep not in targets:
                    continue
                to = targets[dep][0]
                if not allowed(def_file, frm, to):
                    problems.append("%s:%d: forbidden arrow %s -> %s (%s links %s)" % (
                        rel, lineno, frm, to, words[0], dep))
    return problems


def check(root):
    tree = Tree(root)
    problems = check_includes(tree) + check_cmake(tree)
    return tree, problems


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def fabricate(root, bad):
    """A small tree shaped like this repository; `bad` adds forbidden arrows."""
    write(root, "api/include/kvtier/page_key.h", "#pragma once\n#include <cstdint>\n")
    write(root, "api/proto/kvtier.proto", 'syntax = "proto3";\n')
    write(root, "api/CMakeLists.txt", "add_library(kvtier_api STATIC page_key.cc)\n")
    write(root, "client/include/kvtier/client.h", '#include "kvtier/page_key.h"\n')
    write(root, "client/CMakeLists.txt",
          "add_library(kvtier_client STATIC client.cc)\n"
          "target_link_libraries(kvtier_client PUBLIC kvtier_api)\n")
    write(root, "tiers/tier.h", '#include "kvtier/page_key.h"\n#include "kvtier.pb.h"\n')
    write(root, "tiers/nvme/device.h", '#include "tiers/tier.h"\n#include "absl/status/status.h"\n')
    write(root, "tiers/CMakeLists.txt",
          "add_library(kvtier_tiers STATIC tier.cc)\n"
          "target_link_libraries(kvtier_tiers\n  PUBLIC kvtier_api absl::status)\n")
    write(root, "daemon/daemon.h", '#include "tiers/tier.h"\n#include <zmq.h>\n')
    write(root, "daemon/CMakeLists.txt",
          "add_library(kvtier_daemon STATIC daemon.cc)\n"
          "target_link_libraries(kvtier_daemon PUBLIC kvtier_tiers)\n")
    write(root, "tools/sim/sim.cc", '#include "tiers/tier.h"\n')
    write(root, "tools/bench/bench.cc", '#include "kvtier/client.h"\n')
    write(root, "tiers/store/internal/store_impl.h", '#include "tiers/tier.h"\n')
    write(root, "tiers/store/tier_manager.h", '#include "tiers/tier.h"\n')
    write(root, "tiers/store/eviction.cc", '#include "tiers/store/internal/store_impl.h"\n')
    write(root, "daemon/store_user.cc", '#include "tiers/store/tier_manager.h"\n')
    if bad:
        # A public header mapped to its folder: tiers -> client.
        write(root, "tiers/hbm/bench/hbm_bench.cc", '#include "kvtier/client.h"\n')
        # A root-relative path: api -> tiers.
        write(root, "api/layout.cc", '#  include "tiers/nvme/device.h"\n')
        # Outside tools/sim, a tool may not use the store.
        write(root, "tools/bench/nvme_bench.cc", '#include "tiers/nvme/device.h"\n')
        # A tier's folder reaching the store; the daemon reaching its internals.
        write(root, "tiers/nvme/nvme_tier.cc", '#include "tiers/store/tier_manager.h"\n')
        write(root, "daemon/peek.cc", '#include "tiers/store/internal/store_impl.h"\n')
        # Only CMake says it: tiers links the daemon.
        write(root, "tiers/nvme/CMakeLists.txt",
              "add_library(kvtier_nvme STATIC nvme.cc)\n"
              "target_link_libraries(kvtier_nvme PRIVATE kvtier_tiers kvtier_daemon)\n")


def self_test():
    expected = [
        "tiers/hbm/bench/hbm_bench.cc:1: forbidden arrow tiers -> client",
        "api/layout.cc:1: forbidden arrow api -> tiers",
        "tools/bench/nvme_bench.cc:1: forbidden arrow tools -> tiers",
        "tiers/nvme/nvme_tier.cc:1: forbidden arrow tiers/nvme -> tiers/store",
        "daemon/peek.cc:1: the store's internal header tiers/store/internal/store_impl.h outside tiers/store/",
        "tiers/nvme/CMakeLists.txt:2: forbidden arrow tiers -> daemon (kvtier_nvme links kvtier_daemon)",
    ]
    ok = True
    with tempfile.TemporaryDirectory(prefix="kvtier-arch-") as tmp:
        clean, bad = os.path.join(tmp, "clean"), os.path.join(tmp, "bad")
        fabricate(clean, bad=False)
        shutil.copytree(clean, bad)
        fabricate(bad, bad=True)
        tree, problems = check(clean)
        if problems or len(tree.files) < 5:
            ok = False
            print("self-test: the clean tree should pass (%d files): %s" % (len(tree.files), problems))
        _, problems = check(bad)
        for want in expected:
            if not any(p.startswith(want) for p in problems):
                ok = False
                print("self-test: missed: %s" % want)
        if len(problems) != len(expected):
            ok = False
            print("self-test: expected %d problems, got %d:" % (len(expected), len(problems)))
            for p in problems:
                print("  " + p)
    print("check_includes self-test: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", ".."))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    tree, problems = check(args.root)
    for p in problems:
        print(p)
    if problems:
        print("check_includes: %d forbidden arrows (DESIGN.md, 'Arrows that must never exist')"
              % len(problems))
        return 1
    print("check_includes: OK, %d files and %d CMake files, no forbidden arrow"
          % (len(tree.files), len(tree.cmake)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
