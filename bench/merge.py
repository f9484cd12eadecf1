#!/usr/bin/env python3
"""Merge linerate-bench csv files (LABEL:FILE ...) into the seed's table layout (markdown: one
row per size and op, one MB/s column per target/digest/connections, CPU us/KB alongside) and
one SVG of MB/s against block size with a line per configuration."""
import csv
import math
import sys


def size_name(n):
    n = int(n)
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k"
    return str(n)


def load(specs):
    cells, configs = {}, []
    for spec in specs:
        label, path = spec.split(":", 1)
        with open(path) as f:
            for r in csv.DictReader(f):
                cfg = (label, r["digest"], r["connections"])
                if cfg not in configs:
                    configs.append(cfg)
                cells[(cfg, r["size"], r["rw"])] = r
    return cells, configs


def cfg_name(cfg):
    label, dig, conns = cfg
    return f"{label} digest {dig}, {conns} conn{'s' if conns != '1' else ''}"


def markdown(cells, configs, out):
    rows = []
    for rw in ("read", "write", "randread", "randwrite", "mixed"):
        sizes = sorted({int(k[1]) for k in cells if k[2] == rw})
        rows += [(str(s), rw) for s in sizes]
    lines = ["| test | " + " | ".join(cfg_name(c) + " MB/s" for c in configs) + " |",
             "|---|" + "---:|" * len(configs)]
    for size, rw in rows:
        vals = []
        for c in configs:
            r = cells.get((c, size, rw))
            vals.append(r["mb_per_s"] if r and r["mb_per_s"] else "-")
        lines.append(f"| {size_name(size)}-{rw} | " + " | ".join(vals) + " |")
    lines += ["", "CPU per KB moved (us/KB, initiator / target), netperf's service demand:", "",
              "| test | " + " | ".join(cfg_name(c) for c in configs) + " |",
              "|---|" + "---:|" * len(configs)]
    for size, rw in rows:
        vals = []
        for c in configs:
            r = cells.get((c, size, rw))
            vals.append(f"{r['initiator_us_per_kb'] or '-'} / {r['target_us_per_kb'] or '-'}"
                        if r else "-")
        lines.append(f"| {size_name(size)}-{rw} | " + " | ".join(vals) + " |")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def svg(cells, configs, out):
    W, H, L, R, T, B = 960, 600, 80, 330, 50, 70
    pw, ph = W - L - R, H - T - B
    sizes = sorted({int(k[1]) for k in cells})
    vals = [float(r["mb_per_s"]) for r in cells.values() if r["mb_per_s"]]
    ymax = max(vals or [1]) * 1.05
    p = 10 ** math.floor(math.log10(ymax))
    ymax = next(s * p for s in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if s * p >= ymax)
    x0, x1 = math.log2(sizes[0]), math.log2(sizes[-1]) if len(sizes) > 1 else math.log2(sizes[0]) + 1
    X = lambda s: L + (math.log2(s) - x0) / (x1 - x0) * pw
    Y = lambda v: T + ph - v / ymax * ph
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
              "#17becf", "#7f7f7f", "#bcbd22", "#393b79", "#637939"]
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'font-family="sans-serif" font-size="12">',
         '<rect width="100%" height="100%" fill="white"/>',
         f'<text x="{L + pw / 2}" y="24" font-size="16" text-anchor="middle">'
         'MB/s against block size (loopback, qd 32)</text>',
         f'<line x1="{L}" y1="{T + ph}" x2="{L + pw}" y2="{T + ph}" stroke="#000"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{T + ph}" stroke="#000"/>']
    for k in range(6):
        v = ymax * k / 5
        o.append(f'<line x1="{L}" y1="{Y(v):.1f}" x2="{L + pw}" y2="{Y(v):.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{L - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    for s in sizes:
        o.append(f'<text x="{X(s):.1f}" y="{T + ph + 20}" text-anchor="middle">{size_name(s)}</text>')
    o.append(f'<text x="{L + pw / 2}" y="{H - 20}" text-anchor="middle">block size (bytes, log scale)</text>')
    o.append(f'<text x="20" y="{T + ph / 2}" text-anchor="middle" transform="rotate(-90 20 {T + ph / 2})">MB/s</text>')
    line = 0
    for c in configs:
        for rw in ("read", "write", "randread", "randwrite", "mixed"):
            pts = [(int(k[1]), float(r["mb_per_s"])) for k, r in cells.items()
                   if k[0] == c and k[2] == rw and r["mb_per_s"]]
            if not pts:
                continue
            pts.sort()
            col = colors[line % len(colors)]
            dash = "6,3" if "write" in rw else ""
            o.append(f'<polyline fill="none" stroke="{col}" stroke-width="2" stroke-dasharray="{dash}" points="'
                     + " ".join(f"{X(s):.1f},{Y(v):.1f}" for s, v in pts) + '"/>')
            ly = T + 10 + line * 18
            o.append(f'<line x1="{L + pw + 15}" y1="{ly}" x2="{L + pw + 45}" y2="{ly}" stroke="{col}" '
                     f'stroke-width="2" stroke-dasharray="{dash}"/>')
            o.append(f'<text x="{L + pw + 50}" y="{ly + 4}">{rw}, {cfg_name(c)}</text>')
            line += 1
    o.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(o) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("usage: merge.py OUT.md OUT.svg LABEL:FILE.csv ...")
    cells, configs = load(sys.argv[3:])
    markdown(cells, configs, sys.argv[1])
    svg(cells, configs, sys.argv[2])
