#!/usr/bin/env python3
"""Offline checks of Parley's Grafana dashboards (deploy/grafana/*.json).

Grafana itself is not needed: this checks that each file is a dashboard
Grafana can import and that it reads only Parley's series. The dashboard is
valid JSON with a uid, a title and a schemaVersion; panel ids are unique;
panels lie inside the 24-column grid without overlapping; every query panel
uses the ${datasource} variable and has targets with distinct refIds and an
expression; every $variable an expression names is defined by the dashboard
or is one of Grafana's own; every series it names starts with parley_.

    python3 grafana.py DASHBOARD.json... [--rules OUT.yml]

--rules writes every expression, variables replaced by sample values, as a
Prometheus rule file for `promtool check rules`, which parses the PromQL.
(internal/learnerd's TestMetricsAfterTraffic checks that every parley_ series
named here is one the code exports.) Prints one line per failed check and a
summary; exits 1 if any failed.
"""

import argparse
import json
import re
import sys

GRAFANA_VARIABLES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
VARIABLE = re.compile(r"\$\{?(\w+)\}?")
# Label lists of aggregations and joins, label matchers and durations are no series.
NOT_SERIES = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)|\{[^}]*\}|\[[^\]]*\]")
# An identifier not followed by "(" (a function) is a series.
SERIES = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset"}


def panels_of(dash):
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])


def check(path, rules):
    errors = []
    try:
        with open(path, encoding="utf-8") as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        return [f"{path}: not a JSON file: {e}"]
    for field in ("uid", "title", "schemaVersion", "panels"):
        if not dash.get(field):
            errors.append(f"{path}: no {field}")
    variables = {v.get("name") for v in (dash.get("templating") or {}).get("list", [])}
    if "datasource" not in variables:
        errors.append(f"{path}: no datasource variable: the dashboard would be tied to one Prometheus")
    ids, cells = set(), {}
    for p in panels_of(dash):
        title = p.get("title", "?")
        where = f"{path}: panel {p.get('id')} {title!r}"
        if p.get("id") in ids:
            errors.append(f"{where}: duplicate panel id")
        ids.add(p.get("id"))
        g = p.get("gridPos") or {}
        x, y, w, h = (g.get(k, -1) for k in ("x", "y", "w", "h"))
        if min(x, y, w, h) < 0 or x + w > 24 or w == 0 or h == 0:
            errors.append(f"{where}: gridPos {g} is outside the 24-column grid")
        for cx in range(max(x, 0), max(x + w, 0)):
            for cy in range(max(y, 0), max(y + h, 0)):
                if (cx, cy) in cells:
                    errors.append(f"{where}: overlaps panel {cells[(cx, cy)]}")
                    break
                cells[(cx, cy)] = p.get("id")
            else:
                continue
            break
        if p.get("type") == "row":
            continue
        if (p.get("datasource") or {}).get("uid") != "${datasource}":
            errors.append(f"{where}: datasource is not ${{datasource}}")
        targets = p.get("targets") or []
        if not targets:
            errors.append(f"{where}: no targets")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs):
            errors.append(f"{where}: refIds {refs} repeat")
        for t in targets:
            expr = t.get("expr", "")
            if not expr.strip():
                errors.append(f"{where}: target {t.get('refId')} has no expr")
                continue
            for v in VARIABLE.findall(expr):
                if v not in variables and v not in GRAFANA_VARIABLES:
                    errors.append(f"{where}: expr names ${v}, which the dashboard does not define")
            for s in SERIES.findall(NOT_SERIES.sub(" ", expr)):
                if s not in PROMQL_WORDS and not s.startswith("parley_"):
                    errors.append(f"{where}: expr reads {s}, not a Parley series")
            sample = VARIABLE.sub(lambda m: GRAFANA_VARIABLES.get(m.group(1), ".*"), expr)
            rules.append({"record": f"check:panel_{p.get('id')}_{t.get('refId')}", "expr": sample})
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dashboards", nargs="+")
    ap.add_argument("--rules", help="write the expressions as a Prometheus rule file")
    args = ap.parse_args()
    errors, rules = [], []
    for path in args.dashboards:
        errors += check(path, rules)
    if args.rules:
        with open(args.rules, "w", encoding="utf-8") as f:
            json.dump({"groups": [{"name": "dashboard-expressions", "rules": rules}]}, f, indent=1)
    for e in errors:
        print(e)
    print(f"grafana: {len(args.dashboards)} dashboard(s), {len(rules)} expressions, {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
