#!/usr/bin/env python3
"""Charts of the benchmarks for doc/performance.md, as PNG files (matplotlib).

  bench/plot.py decode DECODE_OUT [--anchors ANCHORS_OUT] [--timing graph|eager] [-o decode.png]
  bench/plot.py prefill PREFILL_CSV [--peak TFLOPS] [-o prefill.png]

decode: DECODE_OUT is what `pa_bench_decode` prints (redirect its stdout to a file), ANCHORS_OUT what
`bench/anchors.py` prints in the same session. One panel per head configuration (the label without
its "BxL" part, e.g. "32/8 d128") that has several B x L shapes, their shapes along x in order of
context length L (then batch B); the configurations measured on one shape share a last panel. y: TB/s
of K + V read. One line per block size (bf16 cache; the CUDA-graph timing by default, like the
anchors), the anchors dashed (FlexAttention per page size, SDPA on a contiguous copy), and the
device-to-device copy of the decode run as a dotted line. Ragged batches and the latency row are
left out (their labels have no single B x L).

prefill: a CSV file with a header line, as `pa_bench_prefill --csv FILE` writes it
(label,backend,us,tflops,tbps,pct); '#' starts a comment line. Required columns: `label` (the
shape), `backend` (e.g. "PREFILL", "AUTO (PREFILL)", "UNFUSED", or an anchor's name such as "cudnn"
for rows added by hand) and `tflops` (TFLOP/s of the admitted (query, key) pairs, as the bench
counts them); rows with an empty `tflops` (not timed) are left out with a note. Optional: `us`,
printed on the bars. One group of bars per label (in file order), one bar per backend; --peak
draws the dense GEMM peak (the bench prints the one of its run).
"""
import argparse
import collections
import csv
import math
import re
import sys

DECODE_LINE = re.compile(
    r"^(?P<label>.+?)\s+block\s+(?P<block>\d+)\s+(?P<dtype>\S+)\s+cache\s+(?P<cache>\S+):\s+"
    r"(?P<us>[\d.]+) us\s+(?P<tbps>[\d.]+) TB/s\s+[\d.]+% of copy \| graph\s+(?P<graph_us>[\d.]+) us")
DEVICE_LINE = re.compile(r"^device (?P<device>.+), \d+ SMs; device-to-device copy "
                         r"(?P<copy>[\d.]+) TB/s")
ANCHOR_CELL = re.compile(r"^(?P<name>flex page \d+|sdpa contiguous): +(?P<us>[\d.]+) us +"
                         r"(?P<tbps>[\d.]+) TB/s$")
SHAPE = re.compile(r"^(?P<config>\S.*?)\s+(?P<batch>\d+)x(?P<length>\d+)(?P<unit>k?)$")


class FormatError(Exception):
    """A file that is not the output this script reads; the message names the file and line."""


def split_label(label):
    """'32/8 d128 64x4k' -> ('32/8 d128', 64, 4096); None for a label without one B x L (a ragged
    batch such as '1x128k+63x2k', or the latency row)."""
    m = SHAPE.match(label.strip())
    if not m:
        return None
    length = int(m.group("length")) * (1024 if m.group("unit") else 1)
    return m.group("config"), int(m.group("batch")), length


def read_decode(path):
    """(device, copy TB/s, rows): rows of (label, block, dtype, cache, eager TB/s, graph TB/s)."""
    device, copy, rows = None, None, []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            m = DEVICE_LINE.match(line)
            if m:
                device, copy = m.group("device"), float(m.group("copy"))
                continue
            m = DECODE_LINE.match(line)
            if not m:
                continue
            if line.rstrip().endswith("FAILED CHECK"):
                print("%s:%d: skipped, it failed its correctness check: %s" % (path, number, line),
                      file=sys.stderr)
                continue
            us, graph_us, tbps = float(m.group("us")), float(m.group("graph_us")), float(m.group("tbps"))
            rows.append((m.group("label").strip(), int(m.group("block")), m.group("dtype"),
                         m.group("cache"), tbps, tbps * us / graph_us))
    if not rows:
        raise FormatError("%s: no pa_bench_decode result line (expected 'LABEL block N T cache C: "
                          "... us ... TB/s ... | graph ... us ...')" % path)
    return device, copy, rows


def read_anchors(path):
    """{label: {anchor name: TB/s}} from bench/anchors.py's table lines (n/a cells are left out)."""
    anchors = {}
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.rstrip("\n").split("|")]
            if len(cells) < 2:
                continue
            found = {}
            for cell in cells[1:]:
                m = ANCHOR_CELL.match(cell)
                if m:
                    found[m.group("name")] = float(m.group("tbps"))
            if found:
                anchors[cells[0]] = found
    if not anchors:
        raise FormatError("%s: no bench/anchors.py result line (expected 'LABEL | flex page 16: "
                          "... us ... TB/s | ...')" % path)
    return anchors


def shape_name(batch, length):
    """(64, 4096) -> '64x4k'."""
    return "%dx%s" % (batch, "%dk" % (length // 1024) if length % 1024 == 0 else str(length))


OTHER_CONFIGS = "other head configurations"


def decode_series(rows, anchors, timing):
    """{panel: {series name: [(L, B, x tick, TB/s)]}}, each series sorted by L then B. A panel per
    head configuration with several B x L shapes; the configurations with one shape share the panel
    OTHER_CONFIGS, whose ticks name the configuration too."""
    points = collections.OrderedDict()  # config -> series -> [(L, B, TB/s)]

    def add(label, name, tbps):
        shape = split_label(label)
        if shape is not None:
            config, batch, length = shape
            points.setdefault(config, collections.OrderedDict()).setdefault(name, []).append(
                (length, batch, tbps))

    for label, block, dtype, cache, eager, graph in rows:
        if cache == dtype:  # bf16 / fp16 caches, not the 8-bit ones
            add(label, "DECODE block %d (%s)" % (block, timing),
                graph if timing == "graph" else eager)
    for label, found in anchors.items():
        for name, tbps in found.items():
            add(label, {"sdpa contiguous": "SDPA, contiguous copy"}.get(
                name, name.replace("flex page", "FlexAttention page")), tbps)
    panels = collections.OrderedDict()
    for config, series in points.items():
        shapes = {(length, batch) for pts in series.values() for length, batch, _ in pts}
        single = len(shapes) == 1
        panel = panels.setdefault(OTHER_CONFIGS if single else config, collections.OrderedDict())
        for name, pts in series.items():
            for length, batch, tbps in pts:
                tick = shape_name(batch, length)
                panel.setdefault(name, []).append(
                    (length, batch, config + "\n" + tick if single else tick, tbps))
    if OTHER_CONFIGS in panels:  # last
        panels.move_to_end(OTHER_CONFIGS)
    for series in panels.values():
        for pts in series.values():
            pts.sort()
    return panels


def plot_decode(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    device, copy, rows = read_decode(args.decode_out)
    anchors = read_anchors(args.anchors) if args.anchors else {}
    panels = decode_series(rows, anchors, args.timing)
    if not panels:
        raise FormatError("%s: no uniform B x L shape to plot" % args.decode_out)
    columns = min(len(panels), 2)
    lines = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(lines, columns, figsize=(7 * columns, 4.6 * lines), squeeze=False)
    for ax, (title, series) in zip(axes.flat, panels.items()):
        ticks = sorted({(p[0], p[1], p[2]) for pts in series.values() for p in pts})
        where = {tick: x for x, (_, _, tick) in enumerate(ticks)}
        connect = title != OTHER_CONFIGS  # one configuration: its shapes in order of L
        for name, pts in series.items():
            decode = name.startswith("DECODE")
            style = ("-o" if decode else "--s") if connect else ("o" if decode else "s")
            ax.plot([where[p[2]] for p in pts], [p[3] for p in pts], style, label=name,
                    markersize=5 if decode else 4)
        if copy:
            ax.axhline(copy, linestyle=":", color="gray", label="device copy %.2f TB/s" % copy)
        ax.set_xticks(range(len(ticks)))
        ax.set_xticklabels([t[2] for t in ticks], fontsize=8)
        ax.set_xlim(-0.5, len(ticks) - 0.5)
        ax.set_xlabel("shape B x L (sequences x context length), in order of L"
                      if connect else "configuration and shape")
        ax.set_ylabel("TB/s of K + V read")
        ax.set_ylim(bottom=0)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle("decode, bf16 cache%s" % (" — " + device if device else ""))
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print("wrote %s (%d panels)" % (args.output, len(panels)))


def read_prefill(path):
    """[(label, backend, TFLOP/s, us or None)] in file order."""
    with open(path) as f:
        lines = [line for line in f if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader(lines)
    missing = {"label", "backend", "tflops"} - set(reader.fieldnames or ())
    if missing:
        raise FormatError("%s: the header must name the columns label, backend and tflops; "
                          "missing %s (header: %s)" % (path, ", ".join(sorted(missing)),
                                                       reader.fieldnames))
    rows = []
    for number, row in enumerate(reader, 2):
        if not (row.get("tflops") or "").strip():
            print("%s: data row %d (%s, %s) has no tflops (not timed): left out"
                  % (path, number, row["label"], row["backend"]), file=sys.stderr)
            continue
        try:
            tflops = float(row["tflops"])
            us = float(row["us"]) if row.get("us") not in (None, "") else None
        except ValueError as e:
            raise FormatError("%s: data row %d: %s" % (path, number, e)) from None
        rows.append((row["label"].strip(), row["backend"].strip(), tflops, us))
    if not rows:
        raise FormatError("%s: no data row" % path)
    return rows


def plot_prefill(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_prefill(args.prefill_csv)
    labels = list(collections.OrderedDict.fromkeys(r[0] for r in rows))
    backends = list(collections.OrderedDict.fromkeys(r[1] for r in rows))
    values = {(r[0], r[1]): (r[2], r[3]) for r in rows}
    width = 0.8 / len(backends)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(labels) * max(1, len(backends) / 2)), 4.5))
    for i, backend in enumerate(backends):
        xs = [x + (i - (len(backends) - 1) / 2) * width for x in range(len(labels))
              if (labels[x], backend) in values]
        ys = [values[(label, backend)][0] for label in labels if (label, backend) in values]
        bars = ax.bar(xs, ys, width, label=backend)
        for bar, label in zip(bars, [l for l in labels if (l, backend) in values]):
            us = values[(label, backend)][1]
            ax.annotate("%.0f" % bar.get_height() + ("\n%.0f us" % us if us else ""),
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    if args.peak:
        ax.axhline(args.peak, linestyle=":", color="gray", label="dense GEMM peak %.0f" % args.peak)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("TFLOP/s")
    ax.set_ylim(bottom=0)
    ax.set_title("prefill")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print("wrote %s (%d shapes x %d backends)" % (args.output, len(labels), len(backends)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 2)[2])
    commands = parser.add_subparsers(dest="chart", required=True)
    decode = commands.add_parser("decode", help="bandwidth against context length")
    decode.add_argument("decode_out", help="pa_bench_decode's output")
    decode.add_argument("--anchors", help="bench/anchors.py's output (same session)")
    decode.add_argument("--timing", choices=("graph", "eager"), default="graph",
                        help="DECODE's timing to plot (the anchors are graph-timed)")
    decode.add_argument("-o", "--output", default="decode.png")
    prefill = commands.add_parser("prefill", help="TFLOP/s per shape and backend")
    prefill.add_argument("prefill_csv")
    prefill.add_argument("--peak", type=float, help="dense GEMM peak TFLOP/s, drawn as a line")
    prefill.add_argument("-o", "--output", default="prefill.png")
    args = parser.parse_args(argv)
    try:
        (plot_decode if args.chart == "decode" else plot_prefill)(args)
    except (FormatError, OSError) as e:
        print("plot.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
