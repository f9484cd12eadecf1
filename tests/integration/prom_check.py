#!/usr/bin/env python3
"""A strict checker of the Prometheus text exposition format (version 0.0.4), for
target_metrics.sh where promtool (Debian's prometheus package, ~100 MB and a daemon) is not
installed. It enforces what promtool's `check metrics` and the format's parser do, and a bit
more: every line parses; metric and label names are valid; label values are correctly escaped
and no label repeats; HELP and TYPE come at most once per family and before its samples; a
family's samples are contiguous; no series repeats; values are floats; counters are not
negative and end in _total; a histogram has _bucket series with an le label whose values are
floats in increasing order ending at +Inf, cumulative counts never decreasing, and _count equal
to the +Inf bucket, with a _sum.

Usage: prom_check.py FILE [--dump OUT.json]   (exit 0 when valid; errors on stderr)
--dump writes {series: value} with series as 'name{k="v",...}' (labels sorted)."""
import json
import math
import re
import sys

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*$")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_value(s):
    if s in ("+Inf", "Inf"):
        return math.inf
    if s == "-Inf":
        return -math.inf
    if s == "NaN":
        return math.nan
    if not re.match(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$", s):
        raise ValueError(f"bad value {s!r}")
    return float(s)


def parse_labels(s, i):
    """s[i] == '{'; returns (labels dict, index after '}')."""
    labels = {}
    i += 1
    while True:
        if s[i] == "}":
            return labels, i + 1
        m = re.match(r"[a-zA-Z_][a-zA-Z0-9_]*", s[i:])
        if not m:
            raise ValueError(f"bad label name at column {i}")
        name = m.group(0)
        i += len(name)
        if s[i : i + 2] != '="':
            raise ValueError(f"expected =\" after label {name}")
        i += 2
        val = []
        while True:
            c = s[i]
            if c == "\\":
                n = s[i + 1]
                if n not in '\\"n':
                    raise ValueError(f"bad escape \\{n} in label {name}")
                val.append("\n" if n == "n" else n)
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == "\n":
                raise ValueError("newline in a label value")
            else:
                val.append(c)
                i += 1
        if name in labels:
            raise ValueError(f"label {name} repeated")
        labels[name] = "".join(val)
        if s[i] == ",":
            i += 1
        elif s[i] != "}":
            raise ValueError(f"expected , or }} at column {i}")


def family_of(name, types):
    for suf in ("_bucket", "_sum", "_count"):
        if name.endswith(suf) and types.get(name[: -len(suf)]) in ("histogram", "summary"):
            return name[: -len(suf)]
    return name


def check(text):
    errors = []
    types, helps, series = {}, {}, {}
    seen_families, current = set(), None
    samples = {}  # family -> list of (name, labels, value)
    if text and not text.endswith("\n"):
        errors.append("the last line has no newline")
    for ln, line in enumerate(text.split("\n")[:-1], 1):
        try:
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    fam = parts[2]
                    if not NAME.match(fam):
                        raise ValueError(f"bad metric name {fam!r}")
                    if fam in samples:
                        raise ValueError(f"{parts[1]} for {fam} after its samples")
                    d = helps if parts[1] == "HELP" else types
                    if fam in d:
                        raise ValueError(f"second {parts[1]} for {fam}")
                    if parts[1] == "TYPE":
                        if len(parts) != 4 or parts[3] not in TYPES:
                            raise ValueError(f"bad TYPE line")
                        d[fam] = parts[3]
                    else:
                        d[fam] = parts[3] if len(parts) == 4 else ""
                continue
            m = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
            if not m:
                raise ValueError("no metric name")
            name = m.group(0)
            i = len(name)
            labels = {}
            if i < len(line) and line[i] == "{":
                labels, i = parse_labels(line, i)
            if i >= len(line) or line[i] != " ":
                raise ValueError("expected a space before the value")
            rest = line[i + 1 :].split(" ")
            if len(rest) not in (1, 2):
                raise ValueError("expected VALUE [TIMESTAMP]")
            value = parse_value(rest[0])
            fam = family_of(name, types)
            if fam != current:
                if fam in seen_families:
                    raise ValueError(f"samples of {fam} are not contiguous")
                seen_families.add(fam)
                current = fam
            key = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
            if key in series:
                raise ValueError(f"series {key} repeated")
            series[key] = value
            samples.setdefault(fam, []).append((name, labels, value))
            t = types.get(fam, "untyped")
            if t == "counter":
                if not name.endswith("_total"):
                    errors.append(f"line {ln}: counter {name} does not end in _total")
                if not value >= 0:
                    errors.append(f"line {ln}: counter {name} is {value}")
        except (ValueError, IndexError) as e:
            errors.append(f"line {ln}: {e}: {line[:200]!r}")
    for fam, t in types.items():
        if t != "histogram":
            continue
        groups = {}
        for name, labels, value in samples.get(fam, []):
            rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            g = groups.setdefault(rest, {"buckets": [], "sum": None, "count": None})
            if name == fam + "_bucket":
                if "le" not in labels:
                    errors.append(f"{fam}: a bucket without le")
                    continue
                g["buckets"].append((parse_value(labels["le"]), value))
            elif name == fam + "_sum":
                g["sum"] = value
            elif name == fam + "_count":
                g["count"] = value
            else:
                errors.append(f"{fam}: unexpected series {name}")
        for rest, g in groups.items():
            b = g["buckets"]
            if not b or b[-1][0] != math.inf:
                errors.append(f"{fam}{dict(rest)}: no +Inf bucket last")
                continue
            for (le0, v0), (le1, v1) in zip(b, b[1:]):
                if not le1 > le0:
                    errors.append(f"{fam}{dict(rest)}: le not increasing ({le0}, {le1})")
                if v1 < v0:
                    errors.append(f"{fam}{dict(rest)}: bucket counts decrease at le={le1}")
            if g["count"] is None or g["sum"] is None:
                errors.append(f"{fam}{dict(rest)}: no _count or no _sum")
            elif g["count"] != b[-1][1]:
                errors.append(f"{fam}{dict(rest)}: _count {g['count']} != +Inf bucket {b[-1][1]}")
    for fam in samples:
        if fam not in types:
            errors.append(f"{fam}: samples without a TYPE")
        if fam not in helps:
            errors.append(f"{fam}: samples without a HELP")
    return errors, series


def main():
    if len(sys.argv) not in (2, 4):
        print(__doc__, file=sys.stderr)
        return 2
    text = open(sys.argv[1], encoding="utf-8").read()
    errors, series = check(text)
    for e in errors:
        print("prom_check: " + e, file=sys.stderr)
    if len(sys.argv) == 4 and sys.argv[2] == "--dump":
        with open(sys.argv[3], "w") as f:
            json.dump({k: (v if math.isfinite(v) else str(v)) for k, v in series.items()}, f)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
