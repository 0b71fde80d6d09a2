#!/usr/bin/python3
"""Files and functions over a size limit, for the house rules of STYLE.md.

Counts lines of every C++ source under the given folders (default: the
project's own: api kernels tiers prefetch daemon client tools), and the lines
of every function body as Universal Ctags sees them (its `end` field), and
prints the ones over --file_lines and --function_lines, largest first, with
totals. Issue 27 reports these before and after a restructuring.

Usage: code_sizes.py [--file_lines=400] [--function_lines=60] [--json] [DIR...]
"""
import argparse
import json
import os
import subprocess
import sys

SOURCE_EXT = (".h", ".cc", ".cu", ".cuh")
DEFAULT_DIRS = ("api", "kernels", "tiers", "prefetch", "daemon", "client", "tools")


def sources(dirs):
    for top in dirs:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.endswith(SOURCE_EXT):
                    yield os.path.join(dirpath, name)


def functions(paths):
    """(path, qualified name, first line, lines) of each function definition."""
    cmd = ["ctags", "--languages=C++", "--langmap=C++:+.cu.cuh", "--c++-kinds=f",
           "--fields=+ne", "--output-format=json", "-f", "-"] + list(paths)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        tag = json.loads(line)
        if tag.get("_type") != "tag" or "end" not in tag:
            continue
        name = tag["name"]
        if tag.get("scope"):
            name = tag["scope"].split("::")[-1] + "::" + name
        yield tag["path"], name, tag["line"], tag["end"] - tag["line"] + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", default=list(DEFAULT_DIRS))
    ap.add_argument("--file_lines", type=int, default=400)
    ap.add_argument("--function_lines", type=int, default=60)
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = ap.parse_args()
    paths = [p for p in sources(args.dirs)]
    if not paths:
        print("code_sizes: no C++ sources under %s" % " ".join(args.dirs), file=sys.stderr)
        return 2
    sizes = {}
    for p in paths:
        with open(p, encoding="utf-8", errors="replace") as f:
            sizes[p] = sum(1 for _ in f)
    big_files = sorted(((n, p) for p, n in sizes.items() if n > args.file_lines), reverse=True)
    funcs = list(functions(paths))
    big_funcs = sorted(((n, p, name, line) for p, name, line, n in funcs
                        if n > args.function_lines), reverse=True)
    lines = sorted(sizes.values())
    flines = sorted(n for _, _, _, n in funcs)
    summary = {
        "files": len(paths), "file_median": lines[len(lines) // 2],
        "files_over": len(big_files), "file_limit": args.file_lines,
        "functions": len(funcs), "function_median": flines[len(flines) // 2] if flines else 0,
        "functions_over": len(big_funcs), "function_limit": args.function_lines,
    }
    if args.json:
        summary["big_files"] = [{"path": p, "lines": n} for n, p in big_files]
        summary["big_functions"] = [{"path": p, "function": name, "line": line, "lines": n}
                                    for n, p, name, line in big_funcs]
        print(json.dumps(summary, indent=1))
        return 0
    print("%d files, median %d lines; %d over %d lines:" % (
        summary["files"], summary["file_median"], summary["files_over"], args.file_lines))
    for n, p in big_files:
        print("  %5d  %s" % (n, p))
    print("%d functions, median %d lines; %d over %d lines:" % (
        summary["functions"], summary["function_median"], summary["functions_over"],
        args.function_lines))
    for n, p, name, line in big_funcs:
        print("  %5d  %s:%d  %s" % (n, p, line, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
