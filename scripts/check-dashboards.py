#!/usr/bin/env python3
"""Checks the Grafana dashboards in dashboards/*.json (stdlib only).

    scripts/check-dashboards.py [DIR]     # DIR defaults to dashboards/

For every dashboard:
  - it is JSON with a uid (unique across files), a title and
    schemaVersion >= 39;
  - templating has `datasource` (type datasource, query prometheus) and
    `job`, `instance` and `gpu` query variables built from label_values(...);
  - no panel expression or query variable names a job literally
    (`job="vramd"`): vramd may be scraped under any job name, which the
    `job` variable selects;
  - every panel, recursing into rows (collapsed rows keep theirs in
    `panels`), has a title; every panel other than a row also has a
    description, a unit (fieldConfig.defaults.unit) and at least one target,
    and every target has a non-empty `expr`;
  - every datasource reference anywhere in the file (panels, targets,
    variables) is the variable: {"type": "prometheus", "uid": "${datasource}"};
  - template variables are only used in regex matchers (=~ or !~), so that
    multi-value and "All" selections work.

Prints every problem found (not just the first) and exits 1 if there are
any. tests/prometheus.rs runs it; it also runs every expression against a
real Prometheus.
"""

import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MIN_SCHEMA_VERSION = 39
# A job matcher with a literal value, not the `job` variable.
LITERAL_JOB = re.compile(r'\bjob\s*(=~|!~|!=|=)\s*"(?![^"]*\$)')
DATASOURCE_UIDS = {"${datasource}", "$datasource"}
# A label matcher whose value uses a template variable: `label OP "…$var…"`.
VARIABLE_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"[^"]*\$(?!__)')


def datasource_problems(node, where):
    """Every `datasource` value under node must be the ${datasource} variable."""
    problems = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                uid = value.get("uid") if isinstance(value, dict) else value
                kind = value.get("type") if isinstance(value, dict) else "prometheus"
                if uid not in DATASOURCE_UIDS or kind != "prometheus":
                    problems.append(f"{where}: datasource {json.dumps(value)} is not "
                                    '{"type": "prometheus", "uid": "${datasource}"}')
            else:
                problems.extend(datasource_problems(value, f"{where}.{key}"))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            problems.extend(datasource_problems(item, f"{where}[{index}]"))
    return problems


def panels(dashboard):
    """Every panel, depth first, including the panels inside rows."""
    stack = list(reversed(dashboard.get("panels") or []))
    while stack:
        panel = stack.pop()
        yield panel
        stack.extend(reversed(panel.get("panels") or []))


def check_variables(dashboard, name):
    problems = []
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append(f"{name}: no `datasource` variable of type datasource, query prometheus")
    for variable_name, variable in variables.items():
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if variable.get("type") == "query" and isinstance(query, str) and LITERAL_JOB.search(query):
            problems.append(f"{name}: variable `{variable_name}` names a job literally; select "
                            'job=~"$job" (or no job) so any scrape job name works')
    for required in ("job", "instance", "gpu"):
        variable = variables.get(required)
        query = (variable or {}).get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if not variable or variable.get("type") != "query" or not str(query).startswith("label_values("):
            problems.append(f"{name}: no `{required}` query variable built from label_values(...)")
    return problems


def check_panel(panel, where):
    problems = []
    if not str(panel.get("title") or "").strip():
        problems.append(f"{where}: no title")
    if panel.get("type") == "row":
        return problems
    if not str(panel.get("description") or "").strip():
        problems.append(f"{where}: no description")
    unit = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
    if not isinstance(unit, str) or not unit.strip():
        problems.append(f"{where}: no fieldConfig.defaults.unit")
    if "datasource" not in panel:
        problems.append(f"{where}: no datasource (must be the ${{datasource}} variable)")
    targets = panel.get("targets") or []
    if not targets:
        problems.append(f"{where}: no targets")
    for target in targets:
        ref = target.get("refId", "?")
        expr = target.get("expr")
        if not isinstance(expr, str) or not expr.strip():
            problems.append(f"{where}, target {ref}: no expr")
            continue
        if LITERAL_JOB.search(expr):
            problems.append(f"{where}, target {ref}: names a job literally; select "
                            'job=~"$job" so any scrape job name works')
        for label, op in VARIABLE_MATCHER.findall(expr):
            if op not in ("=~", "!~"):
                problems.append(f"{where}, target {ref}: `{label}{op}` uses a template "
                                "variable; use =~ so multi-value and All selections work")
    return problems


def check_file(path, seen_uids):
    name = path.name
    try:
        dashboard = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return [f"{name}: not readable JSON: {error}"], 0, 0
    problems = []
    uid = dashboard.get("uid")
    if not uid:
        problems.append(f"{name}: no uid")
    elif uid in seen_uids:
        problems.append(f"{name}: uid {uid!r} also used by {seen_uids[uid]}")
    else:
        seen_uids[uid] = name
    if not dashboard.get("title"):
        problems.append(f"{name}: no title")
    version = dashboard.get("schemaVersion")
    if not isinstance(version, int) or version < MIN_SCHEMA_VERSION:
        problems.append(f"{name}: schemaVersion {version!r}, expected >= {MIN_SCHEMA_VERSION}")
    problems.extend(check_variables(dashboard, name))
    problems.extend(datasource_problems(dashboard, name))
    count = targets = 0
    ids = set()
    for panel in panels(dashboard):
        count += 1
        where = f"{name}: panel {panel.get('id')} {panel.get('title')!r}"
        if panel.get("id") in ids:
            problems.append(f"{where}: duplicate panel id")
        ids.add(panel.get("id"))
        problems.extend(check_panel(panel, where))
        targets += len(panel.get("targets") or [])
    if count == 0:
        problems.append(f"{name}: no panels")
    return problems, count, targets


def main():
    directory = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "dashboards"
    files = sorted(directory.glob("*.json"))
    if not files:
        print(f"check-dashboards: no *.json in {directory}", file=sys.stderr)
        return 1
    problems, panel_count, target_count, seen = [], 0, 0, {}
    for path in files:
        found, count, targets = check_file(path, seen)
        problems.extend(found)
        panel_count += count
        target_count += targets
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"check-dashboards: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check-dashboards: {len(files)} dashboards, {panel_count} panels, "
          f"{target_count} targets: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
