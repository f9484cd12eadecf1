#!/usr/bin/env python3
"""The user docs hold together: every relative link in README.md, docs/*.md and bench/README.md
points at a file of the repository that exists and, for a link to a heading of a Markdown
file, at a heading that is there (GitHub's anchor rule: lower case, punctuation dropped,
spaces as '-'). And the docs stay about the project, not its history: no issue numbers
("issue 13"), no path outside the repository (`../x` in the prose) and no link out of it. bench/results/ (the run history) is not
checked. Usage: doc_links.py SOURCE-DIR"""
import glob
import os
import re
import sys

root = os.path.realpath(sys.argv[1])
fails = []


def anchors(path):
    found, code = set(), False
    with open(path, encoding='utf-8') as f:
        for line in f:
            if line.startswith('```'):
                code = not code
            elif not code and re.match(r'#+ ', line):
                text = line.lstrip('#').strip().lower()
                found.add(re.sub(r'[^\w\- ]', '', text).replace(' ', '-'))
    return found


files = [os.path.join(root, 'README.md'), os.path.join(root, 'bench', 'README.md')]
files += sorted(glob.glob(os.path.join(root, 'docs', '*.md')))
links = 0
for path in files:
    name = os.path.relpath(path, root)
    with open(path, encoding='utf-8') as f:
        text = f.read()
    prose = re.sub(r'```.*?```', '', text, flags=re.S)
    for m in re.finditer(r'\bissue[ -]?#?\d+', prose, flags=re.I):
        fails.append(f'{name}: names an issue ("{m.group(0)}"): say what it is instead')
    for m in re.finditer(r'(?<![\w.(])\.\./[\w./-]*', re.sub(r'\]\([^)]*\)', ']', prose)):
        if not m.group(0).startswith('../linerate_'):  # where `make deb` leaves the .deb
            fails.append(f'{name}: names a path outside the repository ({m.group(0)})')
    for m in re.finditer(r'\]\(([^)\s]+)\)', prose):
        url = m.group(1)
        if re.match(r'[a-z][a-z0-9+.-]*:', url):
            continue  # http:, https:, mailto:
        links += 1
        target, _, frag = url.partition('#')
        dest = os.path.realpath(os.path.join(os.path.dirname(path), target)) if target else path
        if dest != root and not dest.startswith(root + os.sep):
            fails.append(f'{name}: {url} points out of the repository')
        elif not os.path.exists(dest):
            fails.append(f'{name}: {url}: no such file')
        elif frag and dest.endswith('.md') and frag not in anchors(dest):
            fails.append(f'{name}: {url}: no heading with that anchor')

for msg in fails:
    print('FAIL:', msg, file=sys.stderr)
if links < 50:
    fails.append(f'only {links} links found: the extraction broke')
    print('FAIL:', fails[-1], file=sys.stderr)
print(f'{"not ok" if fails else "ok"}: {links} relative links in {len(files)} files')
sys.exit(1 if fails else 0)
