#!/usr/bin/env python3
"""Every config key of linerate-target's table is documented with its default.

`linerate-target --list-keys` prints the table the parser, `save` and the reload use (one
line per key: name, scope, reload, default, option). Each key must have its entry in
linerate.conf(5) (a `.BI "KEY = "` line), and where the key has a default, that entry's
paragraph must say "default" and give the value the code uses (e.g. nop-interval: 15); each
key's command-line option must be in --help and in linerate-target(8). A row added to the
table without its documentation fails here.

Usage: config_keys_doc.py LINERATE-TARGET SOURCE-DIR
"""
import re
import subprocess
import sys


def plain(troff):
    """The text of a troff paragraph, without font escapes and macros."""
    out = []
    for line in troff:
        line = re.sub(r"^\.(B|I|BI|BR|IR|RB|RI|TQ)\s*", "", line)
        if line.startswith("."):
            continue
        line = line.replace("\\-", "-").replace("\\(dq", '"')
        line = re.sub(r"\\f[BIRP]", "", line)
        out.append(line.replace('"', ""))
    return " ".join(out)


def entries(page):
    """KEY -> the plain text of each of its entries in linerate.conf(5) (from its `.TP`
    heading line to the next `.TP`, `.PP` or `.SH`; a `.TQ` pair shares one paragraph)."""
    lines = page.splitlines()
    found = {}
    for i, line in enumerate(lines):
        m = re.match(r'^\.B[IR] "([a-z0-9\\-]+) = "', line)
        if not m:
            continue
        key = m.group(1).replace("\\-", "-")
        j = i + 1
        while j < len(lines) and not re.match(r"^\.(TP|PP|SH)\b", lines[j]):
            j += 1
        found.setdefault(key, []).append(plain(lines[i:j]))
    return found


def main():
    target, src = sys.argv[1], sys.argv[2]
    listing = subprocess.run([target, "--list-keys"], capture_output=True, text=True, check=True)
    rows = [line.split("\t") for line in listing.stdout.splitlines()]
    if len(rows) < 40 or any(len(r) != 5 for r in rows):
        sys.exit(f"FAIL: --list-keys printed {len(rows)} rows, not 40 or more of 5 columns")
    conf = entries(open(f"{src}/man/linerate.conf.5", encoding="utf-8").read())
    target_page = open(f"{src}/man/linerate-target.8", encoding="utf-8").read().replace("\\-", "-")
    helptext = subprocess.run([target, "--help"], capture_output=True, text=True, check=True).stdout
    fails = []
    for name, scope, reload, default, flag in rows:
        if name not in conf:
            fails.append(f"{name}: no '.BI \"{name} = \"' entry in man/linerate.conf.5")
            continue
        if default != "-":
            word = re.compile(r"(^|[^A-Za-z0-9/.-])" + re.escape(default) + r"($|[^A-Za-z0-9/-])")
            if not any("default" in e.lower() and word.search(e) for e in conf[name]):
                fails.append(f"{name}: man/linerate.conf.5 does not give its default {default}")
        if flag != "-":
            if not re.search(re.escape(flag) + r"([^a-z0-9-]|$)", helptext):
                fails.append(f"{name}: its option {flag} is not in --help")
            if not re.search(re.escape(flag) + r"([^a-z0-9-]|$)", target_page):
                fails.append(f"{name}: its option {flag} is not in man/linerate-target.8")
    for f in fails:
        print("FAIL:", f, file=sys.stderr)
    documented = sum(1 for r in rows if r[3] != "-")
    print(f"checked {len(rows)} keys ({documented} with a default, "
          f"{sum(1 for r in rows if r[4] != '-')} with an option)")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
