#!/usr/bin/python3
"""Metric names in PromQL, for scripts/check_monitoring.sh.

Every expression of the alert rules (YAML) and of the Grafana dashboard (JSON)
must query only metrics a live kvtierd exposes: a renamed metric would leave a
panel empty or an alert silent without any error. This extracts the names a
PromQL expression selects (a small tokenizer, not a full parser: strings, label
matchers, range/offset brackets and label lists are removed, then every
identifier not followed by "(" and not a keyword is a metric name) and compares
them with the sample names of a /metrics scrape.

  promql_names.py check SCRAPE RULES.yml DASHBOARD.json
      prints each name and where it is used; exit 1 if one is missing
  promql_names.py dashboard-rules DASHBOARD.json OUT.yml
      the dashboard's expressions as recording rules, so `promtool check rules`
      checks their syntax too (Grafana variables replaced by plain values)
"""
import json
import re
import sys

import yaml

KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
    "and", "or", "unless", "atan2", "inf", "nan",
}
# Series Prometheus makes itself for every target; no exporter has them.
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}

IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# A number (1e-9, 0x1F, 0.5) or an identifier: numbers go first, so the "e" of
# an exponent is never taken for a name.
TOKEN = re.compile(r"(?P<num>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
                   r"|(?P<id>[a-zA-Z_:][a-zA-Z0-9_:]*)")


def grafana_to_promql(expr):
    """Grafana's variables replaced by values PromQL accepts."""
    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    expr = expr.replace("$__range", "1h")
    return re.sub(r"\$\{?([a-zA-Z_][a-zA-Z0-9_]*)\}?", ".*", expr)


def names_in_expr(expr):
    s = grafana_to_promql(expr)
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', s)  # string literals
    s = re.sub(r"'(?:[^'\\]|\\.)*'", "''", s)
    s = re.sub(r"`[^`]*`", "``", s)
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges and subqueries
    # Label lists: by (...), without (...), on (...), ignoring (...), group_x (...).
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\boffset\s+-?[0-9a-z]+", " ", s)
    names = set()
    for m in TOKEN.finditer(s):
        if m.group("num"):
            continue
        word = m.group("id")
        rest = s[m.end():].lstrip()
        if rest.startswith("("):
            continue  # a function or aggregation
        if word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def rule_exprs(path):
    with open(path) as f:
        doc = yaml.safe_load(f)
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            yield rule.get("alert") or rule.get("record"), rule["expr"]


def dashboard_exprs(path):
    with open(path) as f:
        doc = json.load(f)

    def panels(items):
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(doc.get("panels", [])):
        for t in p.get("targets", []):
            if t.get("expr"):
                yield f'panel "{p.get("title")}"', t["expr"]
    for v in doc.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.match(r"\s*label_values\((.*),\s*[a-zA-Z_]+\)\s*$", q or "")
        if m:
            yield f'variable "{v["name"]}"', m.group(1)


def scrape_names(path):
    """Names that have at least one sample in a text-format scrape."""
    names = set()
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            names.add(IDENT.match(line).group(0))
    return names


def check(scrape, rules, dashboard):
    have = scrape_names(scrape)
    used = {}
    for where, expr in list(rule_exprs(rules)) + list(dashboard_exprs(dashboard)):
        names = names_in_expr(expr)
        if not names:
            print(f"promql_names: {where}: no metric found in {expr!r}")
            return 1
        for n in names:
            used.setdefault(n, []).append(where)
    missing = sorted(n for n in used if n not in have and n not in SYNTHETIC)
    for n in sorted(used):
        state = "MISSING" if n in missing else ("synthetic" if n in SYNTHETIC else "ok")
        print(f"{state:9s} {n}  ({len(used[n])} uses)")
    for n in missing:
        print(f"promql_names: {n} is not on /metrics; used by {', '.join(sorted(set(used[n])))}")
    print(f"promql_names: {len(used)} metric names queried, {len(missing)} missing")
    return 1 if missing else 0


def dashboard_rules(dashboard, out):
    rules = [{"record": f"kvtier_dashboard:expr_{i}", "expr": grafana_to_promql(expr)}
             for i, (_, expr) in enumerate(dashboard_exprs(dashboard))]
    with open(out, "w") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f, sort_keys=False)
    return 0


def main(argv):
    if argv[1:2] in (["-h"], ["--help"]):  # not an output path
        print(__doc__.strip())
        return 0
    if len(argv) == 5 and argv[1] == "check":
        return check(argv[2], argv[3], argv[4])
    if len(argv) == 4 and argv[1] == "dashboard-rules":
        return dashboard_rules(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
