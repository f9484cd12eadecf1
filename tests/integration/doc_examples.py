#!/usr/bin/env python3
"""Every config snippet and every linerate-target command line that README.md, docs/*.md, the
man pages, --help and examples/ show is read by `linerate-target --check` and taken (issue 34, item 1:
the shipped example did not load and nothing noticed). The snippets are taken from the files
themselves, so an edit there is checked here. The only changes made to them: a chap-secrets
path points at a secrets file made here (mode 600, the users the snippet names), a --config
path that names no file of the same document is the shipped example, and the trailing `&` of
a command goes. Also: the man page README.md says to read from a source build exists there,
its version filled in.

usage: doc_examples.py BUILD_DIR SOURCE_DIR
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

build, src = sys.argv[1], sys.argv[2]
target = os.path.join(build, 'linerate-target')
example = os.path.join(src, 'examples', 'linerate.conf')
tmp = tempfile.mkdtemp(prefix='lt-doc-examples.')
secrets = os.path.join(tmp, 'chap-secrets')
fd = os.open(secrets, os.O_WRONLY | os.O_CREAT, 0o600)
# every CHAP user the documents name, each with a secret of 16 characters
os.write(fd, b''.join(b'%s 0123456789abcde%d\n' % (u, i) for i, u in
                      enumerate([b'host-a', b'host-b', b'linerate', b'target'])))
os.close(fd)

failures = []
checked = {'config': 0, 'command': 0}


def check(where, args):
    r = subprocess.run([target, '--check'] + args, capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or ': OK: ' not in r.stdout:
        failures.append('%s: linerate-target %s --check: exit %d: %s%s' %
                        (where, ' '.join(args), r.returncode, r.stdout, r.stderr))


def check_config(where, text):
    text = re.sub(r'(?m)^(\s*chap-secrets\s*=\s*)\S+', lambda m: m.group(1) + secrets, text)
    path = os.path.join(tmp, 'snippet-%d.conf' % checked['config'])
    with open(path, 'w') as f:
        f.write(text)
    checked['config'] += 1
    check(where, ['--config', path])
    return path


def check_command(where, line, files):
    if '[--' in line:  # a synopsis ("[--threads N]"), not an example
        return
    words = shlex.split(line, comments=True)
    if words and words[-1] == '&':
        words.pop()
    args = words[1:]
    for i, w in enumerate(args[:-1]):
        if w == '--config':
            args[i + 1] = files.get(args[i + 1], example)
        elif w == '--chap-secrets':
            args[i + 1] = secrets
    checked['command'] += 1
    check(where, args)


def joined_lines(lines):
    """Lines with their `\\` continuations joined, each with its first line number."""
    out, cur, start = [], '', 0
    for n, line in lines:
        if not cur:
            start = n
        if line.rstrip().endswith('\\'):
            cur += line.rstrip()[:-1] + ' '
            continue
        out.append((start, cur + line))
        cur = ''
    return out


def from_markdown(name):
    """```ini blocks are config files; in the other blocks, here-documents are config files
    and lines that run linerate-target are command lines."""
    lines = open(os.path.join(src, name)).read().split('\n')
    i = 0
    while i < len(lines):
        m = re.match(r'^```(\w*)\s*$', lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1), i + 1
        j = start
        while j < len(lines) and not lines[j].startswith('```'):
            j += 1
        block = [(k + 1, lines[k]) for k in range(start, j)]
        i = j + 1
        if lang == 'ini':
            check_config('%s:%d' % (name, start), '\n'.join(t for _, t in block) + '\n')
            continue
        files = {}
        k = 0
        while k < len(block):
            n, t = block[k]
            h = re.match(r"^cat >(\S+) <<'?(\w+)'?\s*$", t)
            if h:
                end = k + 1
                while end < len(block) and block[end][1] != h.group(2):
                    end += 1
                body = '\n'.join(x for _, x in block[k + 1:end]) + '\n'
                files[h.group(1)] = check_config('%s:%d' % (name, n), body)
                k = end + 1
                continue
            k += 1
        for n, t in joined_lines(block):
            if re.match(r'^\s*(build/)?linerate-target(\s|$)', t):
                check_command('%s:%d' % (name, n), t.strip(), files)


def roff_text(s):
    return s.replace('\\-', '-').replace('\\(aq', "'").replace('\\e', '\\')


def from_man(name):
    """.EX/.EE blocks: under .SH EXAMPLE of linerate.conf(5) a config file, elsewhere the
    lines that run linerate-target."""
    lines = open(os.path.join(src, 'man', name)).read().split('\n')
    section, k = '', 0
    while k < len(lines):
        if lines[k].startswith('.SH '):
            section = lines[k][4:].strip('"')
        if lines[k] != '.EX':
            k += 1
            continue
        end = k + 1
        while lines[end] != '.EE':
            end += 1
        block = [(n + 1, roff_text(lines[n])) for n in range(k + 1, end)]
        if name.endswith('.5') and section == 'EXAMPLE':
            check_config('man/%s:%d' % (name, k + 2), '\n'.join(t for _, t in block) + '\n')
        else:
            for n, t in joined_lines(block):
                if re.match(r'^linerate-target(\s|$)', t):
                    check_command('man/%s:%d' % (name, n), t, {})
        k = end + 1


def from_help():
    text = subprocess.run([target, '--help'], capture_output=True, text=True).stdout
    for n, t in enumerate(text.split('\n'), 1):
        if re.match(r'^\s+linerate-target(\s|$)', t):
            check_command('linerate-target --help:%d' % n, t.strip(), {})


from_markdown('README.md')
for m in sorted(os.listdir(os.path.join(src, 'docs'))):
    if m.endswith('.md'):
        from_markdown(os.path.join('docs', m))
for m in sorted(os.listdir(os.path.join(src, 'man'))):
    if re.match(r'.*\.[0-9]$', m):
        from_man(m)
from_help()
for e in sorted(os.listdir(os.path.join(src, 'examples'))):
    check_config('examples/' + e, open(os.path.join(src, 'examples', e)).read())

# How README says to read the man pages of a source build: the page is there, version filled in.
man_hints = re.findall(r'`man (?:-l )?(build/[^\s`]+)`', open(os.path.join(src, 'README.md')).read())
if not man_hints:
    failures.append('README.md says nowhere how to read the man pages of a source build '
                    '(`man -l build/man/PAGE`)')
for h in man_hints:
    page = os.path.join(build, h[len('build/'):])
    if not os.path.exists(page):
        failures.append('README.md: `man %s`: no such file in the build' % h)
    elif '@VERSION@' in open(page).read():
        failures.append('README.md: `man %s`: @VERSION@ not filled in' % h)
    else:
        r = subprocess.run(['man', '--warnings', '-l', '-Tutf8', page], capture_output=True,
                           text=True) if shutil.which('man') else None
        if r is not None and r.returncode != 0:
            failures.append('man -l %s: exit %d: %s' % (page, r.returncode, r.stderr))

print('checked %d config snippets and %d command lines' % (checked['config'], checked['command']))
# A document that lost every example would pass the loop above: the floor is today's count.
if checked['config'] < 5 or checked['command'] < 10:
    failures.append('too few examples found: the extraction no longer matches the documents')
for f in failures:
    print('FAIL ' + f)
subprocess.run(['rm', '-rf', tmp])
sys.exit(1 if failures else 0)
