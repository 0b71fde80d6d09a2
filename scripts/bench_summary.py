#!/usr/bin/python3
"""docs/BENCHMARKS.md's "Current figures" table, generated from docs/benchmarks.json
(one record per figure: its latest measurement), so the table follows the runs
instead of being edited by hand.

    scripts/bench_summary.py            # render the JSON into the doc's table
    scripts/bench_summary.py --check    # exit 1 when the doc's table differs
    scripts/bench_summary.py record --figure F --measured M --command C \\
        --date YYYY-MM-DD --machine M [--section S] [--baseline B] [--ratio R] \\
        [--target T] [--met yes|no] [--note N]

`record` adds the record named by --figure, or replaces it (fields left out keep
their old value), then renders the table. --met may be left out when --target
is a bare threshold such as ">= 0.8" and --ratio is given: it is then judged.
The table sits between the markers below; everything else in the doc is kept.
Exit status: 0 done, 1 --check found a difference, 2 bad input.
"""
import argparse
import datetime
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_JSON = os.path.join(ROOT, "docs", "benchmarks.json")
DEFAULT_DOC = os.path.join(ROOT, "docs", "BENCHMARKS.md")
BEGIN = "<!-- current:begin -->"
END = "<!-- current:end -->"

FIELDS = ["figure", "measured", "baseline", "ratio", "target", "met", "command", "date",
          "machine", "section", "note"]
REQUIRED = ["figure", "measured", "command", "date", "machine", "section"]
COLUMNS = ["figure", "measured", "baseline", "ratio", "target", "met", "command", "date",
           "machine"]
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# A bare threshold on the ratio: ">= 0.8", "≤ 1.2×", "<= 0.5x".
THRESHOLD_RE = re.compile(r"^\s*(>=|<=|≥|≤)\s*([0-9]*\.?[0-9]+)\s*[×x]?\s*$")


class InputError(Exception):
    """Bad JSON, bad record fields or a doc without the markers (exit 2)."""


def parse_ratio(value):
    """A ratio given on the command line: a finite number, or None for ''/'null'."""
    if value is None or value.strip().lower() in ("", "null", "none"):
        return None
    try:
        r = float(value)
    except ValueError:
        raise InputError(f"--ratio {value!r} is not a number (give e.g. 0.84, or '' for none)")
    if not math.isfinite(r):
        raise InputError(f"--ratio {value!r} is not a finite number")
    return r


def parse_met(value):
    v = value.strip().lower()
    if v in ("yes", "true", "1"):
        return True
    if v in ("no", "false", "0"):
        return False
    if v in ("", "null", "none"):
        return None
    raise InputError(f"--met {value!r}: give yes, no or none")


def judge(target, ratio):
    """True/False when target is a bare threshold and ratio a number, else None."""
    m = THRESHOLD_RE.match(target or "")
    if not m or ratio is None:
        return None
    op, bound = m.group(1), float(m.group(2))
    return ratio >= bound if op in (">=", "≥") else ratio <= bound


def validate(rec, where):
    """Raises InputError naming `where` and the field when rec is malformed."""
    if not isinstance(rec, dict):
        raise InputError(f"{where}: a record must be a JSON object")
    unknown = sorted(set(rec) - set(FIELDS))
    if unknown:
        raise InputError(f"{where}: unknown field(s) {', '.join(unknown)}")
    for f in REQUIRED:
        if not isinstance(rec.get(f), str) or not rec[f].strip():
            raise InputError(f"{where}: '{f}' is required (a non-empty string)")
    for f in ("baseline", "target", "note"):
        if not isinstance(rec.get(f, ""), str):
            raise InputError(f"{where}: '{f}' must be a string")
    ratio = rec.get("ratio")
    if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float))
                              or not math.isfinite(ratio)):
        raise InputError(f"{where}: 'ratio' must be a number or null, not {ratio!r}")
    if not DATE_RE.match(rec["date"]):
        raise InputError(f"{where}: 'date' {rec['date']!r} is not an ISO date (YYYY-MM-DD)")
    try:
        datetime.date.fromisoformat(rec["date"])
    except ValueError:
        raise InputError(f"{where}: 'date' {rec['date']!r} is not a real day")
    met = rec.get("met")
    if met is not None and not isinstance(met, bool):
        raise InputError(f"{where}: 'met' must be true, false or null")
    if rec.get("target", "") and met is None:
        raise InputError(f"{where}: has a target, so 'met' must be true or false")
    if not rec.get("target", "") and met is not None:
        raise InputError(f"{where}: has no target, so 'met' must be null")


def load_records(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}")
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON: {e}")
    if not isinstance(data, list):
        raise InputError(f"{path}: must hold a JSON list of records")
    seen = set()
    for i, rec in enumerate(data):
        validate(rec, f"{path}: record {i + 1}")
        if rec["figure"] in seen:
            raise InputError(f"{path}: figure {rec['figure']!r} appears twice")
        seen.add(rec["figure"])
    return data


def save_records(path, records):
    text = json.dumps(records, indent=2, ensure_ascii=False) + "\n"
    write_atomically(path, text)


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(doc_text):
    """{heading text: anchor} for every heading outside code blocks, duplicates -1, -2..."""
    out, counts, in_code = {}, {}, False
    for line in doc_text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        m = None if in_code else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = counts.get(base, 0)
        counts[base] = n + 1
        out.setdefault(m.group(1), base if n == 0 else f"{base}-{n}")
    return out


def cell(text):
    return str(text).replace("\n", " ").replace("|", "\\|")


def code(text):
    tick = "``" if "`" in text else "`"
    pad = " " if tick == "``" else ""
    return f"{tick}{pad}{cell(text)}{pad}{tick}"


def fmt_ratio(r):
    return "" if r is None else (f"{r:g}" if isinstance(r, float) else str(r))


def fmt_met(m):
    return "" if m is None else ("yes" if m else "**no**")


def render(records, doc_text):
    """The lines between the markers: a note, the table header and one row per record."""
    links = anchors(doc_text)
    lines = ["<!-- generated by scripts/bench_summary.py from docs/benchmarks.json: "
             "edit the JSON (or run `record`), not this table -->",
             "| " + " | ".join(COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]
    for rec in records:
        if rec["section"] not in links:
            raise InputError(f"figure {rec['figure']!r}: section {rec['section']!r} is no heading "
                             f"of the doc")
        row = [f"[{cell(rec['figure'])}](#{links[rec['section']]})", cell(rec["measured"]),
               cell(rec.get("baseline", "")), fmt_ratio(rec.get("ratio")),
               cell(rec.get("target", "")), fmt_met(rec.get("met")), code(rec["command"]),
               rec["date"], cell(rec["machine"])]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def split_doc(doc_text, path):
    """(before, current table lines, after) around the markers."""
    lines = doc_text.split("\n")
    try:
        b = lines.index(BEGIN)
        e = lines.index(END, b)
    except ValueError:
        raise InputError(f"{path}: needs the lines {BEGIN} and {END} (in that order)")
    return lines[:b + 1], lines[b + 1:e], lines[e:]


def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}")


def write_table(json_path, doc_path):
    doc = read(doc_path)
    before, _, after = split_doc(doc, doc_path)
    table = render(load_records(json_path), doc)
    write_atomically(doc_path, "\n".join(before + table + after))
    print(f"bench_summary: {len(table) - 3} figures written to {doc_path}")


def check(json_path, doc_path):
    doc = read(doc_path)
    _, found, _ = split_doc(doc, doc_path)
    want = render(load_records(json_path), doc)
    for i in range(max(len(want), len(found))):
        w = want[i] if i < len(want) else "(nothing)"
        f = found[i] if i < len(found) else "(nothing)"
        if w != f:
            print(f"bench_summary: {doc_path}'s table differs from {json_path} at table line "
                  f"{i + 1}:\n  json renders: {w}\n  doc has:      {f}\n"
                  f"regenerate with scripts/bench_summary.py", file=sys.stderr)
            return 1
    print(f"bench_summary: {doc_path} matches {json_path} ({len(want) - 3} figures)")
    return 0


def record(args):
    records = load_records(args.json)
    given = {f: getattr(args, f) for f in FIELDS if getattr(args, f) is not None}
    if "ratio" in given:
        given["ratio"] = parse_ratio(given["ratio"])
    if "met" in given:
        given["met"] = parse_met(given["met"])
    old = next((r for r in records if r["figure"] == args.figure), None)
    rec = dict(old or {})
    rec.update(given)
    if "met" not in given and rec.get("target"):
        judged = judge(rec["target"], rec.get("ratio"))
        unchanged = old is not None and not {"measured", "ratio", "target"} & set(given)
        if judged is None and not unchanged:
            raise InputError(f"figure {args.figure!r}: --target {rec['target']!r} is not a bare "
                             f"threshold on --ratio; give --met yes or --met no")
        if judged is not None:
            rec["met"] = judged
    elif "met" not in given and not rec.get("target"):
        rec["met"] = None
    rec = {f: rec.get(f, "" if f in ("baseline", "target") else None) for f in FIELDS
           if f != "note" or rec.get("note")}
    validate(rec, f"figure {args.figure!r}")
    doc = read(args.doc)
    split_doc(doc, args.doc)
    render([rec], doc)  # the section must be a heading before anything is written
    if old is None:
        records.append(rec)
    else:
        records[records.index(old)] = rec
    save_records(args.json, records)
    print(f"bench_summary: {'replaced' if old else 'added'} {args.figure!r}")
    write_table(args.json, args.doc)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default=DEFAULT_JSON,
                   help="the records (default docs/benchmarks.json)")
    p.add_argument("--doc", default=DEFAULT_DOC, help="the doc (default docs/BENCHMARKS.md)")
    p.add_argument("--check", action="store_true", help="exit 1 when the doc's table differs")
    sub = p.add_subparsers(dest="cmd")
    r = sub.add_parser("record", help="add or replace one figure, then render")
    r.add_argument("--json", default=argparse.SUPPRESS)
    r.add_argument("--doc", default=argparse.SUPPRESS)
    r.add_argument("--figure", required=True, help="what is measured, short (the record's key)")
    r.add_argument("--measured", help="value with unit, e.g. '1.08-1.58 GB/s'")
    r.add_argument("--baseline", help="what it is compared with, and its value")
    r.add_argument("--ratio", help="a number, or '' for none")
    r.add_argument("--target", help="as the issue states it, e.g. '>= 0.8'")
    r.add_argument("--met", help="yes or no (judged from --ratio for a bare threshold)")
    r.add_argument("--command", help="the exact command that reproduces it")
    r.add_argument("--date", help="day of the run, YYYY-MM-DD")
    r.add_argument("--machine", help="short, e.g. '2-vCPU Firecracker VM, AMD EPYC, 23.5 GiB'")
    r.add_argument("--section", help="the heading of docs/BENCHMARKS.md the run is written up in")
    r.add_argument("--note", help="anything a reader of the JSON needs (not shown in the table)")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    try:
        if args.cmd == "record":
            record(args)
            return 0
        if args.check:
            return check(args.json, args.doc)
        write_table(args.json, args.doc)
        return 0
    except InputError as e:
        print(f"bench_summary: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
