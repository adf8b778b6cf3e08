"""bench/plot.py on sample output in the benches' own formats: pa_bench_decode's lines (the printf
format of bench/decode_bench.cu), bench/anchors.py's table lines, and the prefill CSV. Checks the
parsed figures and that each chart is written as a PNG. Usage: test_plot.py SOURCE_ROOT"""
import os
import pathlib
import shutil
import sys
import tempfile
import unittest

ROOT = pathlib.Path(sys.argv.pop(1) if len(sys.argv) > 1 else
                    pathlib.Path(__file__).resolve().parents[2])
sys.path.insert(0, str(ROOT / "bench"))
import plot  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def decode_line(label, block, us, tbps, graph_us, dtype="bf16", cache="bf16", ok=True):
    """One result line as bench/decode_bench.cu prints it (same format string)."""
    copy, ceiling, err = 4.21, 4.0, 1e-3
    graph_tbps = tbps * us / graph_us
    return ("%-28s block %3d %-4s cache %-4s: %9.1f us %6.2f TB/s %5.1f%% of copy | graph %9.2f us "
            "%5.1f%% of copy | %5.1f%% of the paged read (%.2f TB/s)  err %.1e %s"
            % (label, block, dtype, cache, us, tbps, 100.0 * tbps / copy, graph_us,
               100.0 * graph_tbps / copy, 100.0 * tbps / ceiling, ceiling, err,
               "ok" if ok else "FAILED CHECK"))


DECODE_OUT = "\n".join([
    "device NVIDIA H200, 132 SMs; device-to-device copy 4.21 TB/s (read + write)",
    decode_line("32/8 d128 64x4k", 16, 301.2, 3.57, 290.9),
    decode_line("32/8 d128 64x4k", 64, 298.1, 3.60, 280.0),
    decode_line("32/8 d128 256x4k", 16, 1109.0, 3.87, 1118.7),
    decode_line("32/8 d128 1x128k", 16, 159.1, 3.38, 153.6),
    decode_line("32/8 d128 32x32k", 16, 1080.1, 3.98, 1077.3, ok=False),
    decode_line("64/8 d64 64x8k", 16, 327.6, 3.28, 322.8),
    decode_line("32/8 d128 1x128k+63x2k", 16, 296.8, 3.59, 292.9),
    decode_line("32/8 d128 64x4k", 16, 237.8, 2.26, 230.0, cache="int8"),
    decode_line("32/8 d128 1x1k (latency)", 16, 21.1, 0.8, 16.37),
]) + "\n"

ANCHORS_OUT = """torch 2.11.0+cu130, NVIDIA H200; device-to-device copy (torch copy_) 4.26 TB/s (read + write)
32/8 d128 64x4k            | flex page 16:    460.2 us  2.33 TB/s | flex page 64:    264.5 us  4.06 TB/s | sdpa contiguous:    402.5 us  2.67 TB/s
32/8 d128 256x4k           | flex page 16: n/a (BLOCK_N 16: failed) | flex page 64:   1024.0 us  4.19 TB/s | sdpa: n/a (ragged)
"""

# as pa_bench_prefill --csv writes it (bench/prefill_bench.cu), plus an anchor row added by hand
PREFILL_CSV = """label,backend,us,tflops,tbps,pct
"32/8 d128 4x2k causal",PREFILL,310.500,442.100,0.5000,55.96
"32/8 d128 4x2k causal",AUTO (PREFILL),311.000,441.400,0.5000,55.87
"32/8 d128 4x2k causal",UNFUSED,,,,
"32/8 d128 1x8k causal",PREFILL,1290.000,426.000,0.3000,53.92
# anchor, from bench/anchors.py --prefill
"32/8 d128 1x8k causal",cudnn,,615.0,,
"""


class Plot(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pagedattn-plot-")
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def assertPng(self, path):
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), PNG_MAGIC, path)
        self.assertGreater(os.path.getsize(path), 10000, path)

    def test_decode_lines_parse(self):
        device, copy, rows = plot.read_decode(self.write("decode.txt", DECODE_OUT))
        self.assertEqual((device, copy), ("NVIDIA H200", 4.21))
        self.assertEqual(len(rows), 8)  # the failed check is left out
        label, block, dtype, cache, eager, graph = rows[0]
        self.assertEqual((label, block, dtype, cache, eager), ("32/8 d128 64x4k", 16, "bf16", "bf16",
                                                               3.57))
        self.assertAlmostEqual(graph, 3.57 * 301.2 / 290.9, places=6)

    def test_anchor_lines_parse(self):
        anchors = plot.read_anchors(self.write("anchors.txt", ANCHORS_OUT))
        self.assertEqual(anchors["32/8 d128 64x4k"],
                         {"flex page 16": 2.33, "flex page 64": 4.06, "sdpa contiguous": 2.67})
        self.assertEqual(anchors["32/8 d128 256x4k"], {"flex page 64": 4.19})

    def test_decode_series(self):
        _, _, rows = plot.read_decode(self.write("decode.txt", DECODE_OUT))
        anchors = plot.read_anchors(self.write("anchors.txt", ANCHORS_OUT))
        panels = plot.decode_series(rows, anchors, "eager")
        # the ragged and latency rows have no single B x L; 64/8 d64 has one shape
        self.assertEqual(list(panels), ["32/8 d128", plot.OTHER_CONFIGS])
        self.assertEqual(panels["32/8 d128"]["DECODE block 16 (eager)"],
                         [(4096, 64, "64x4k", 3.57), (4096, 256, "256x4k", 3.87),
                          (131072, 1, "1x128k", 3.38)])
        self.assertEqual(panels["32/8 d128"]["FlexAttention page 64"],
                         [(4096, 64, "64x4k", 4.06), (4096, 256, "256x4k", 4.19)])
        self.assertEqual(panels[plot.OTHER_CONFIGS]["DECODE block 16 (eager)"],
                         [(8192, 64, "64/8 d64\n64x8k", 3.28)])

    def test_decode_chart(self):
        out = os.path.join(self.dir, "decode.png")
        self.assertEqual(plot.main(["decode", self.write("decode.txt", DECODE_OUT), "--anchors",
                                    self.write("anchors.txt", ANCHORS_OUT), "-o", out]), 0)
        self.assertPng(out)

    def test_prefill_chart(self):
        rows = plot.read_prefill(self.write("prefill.csv", PREFILL_CSV))
        self.assertEqual(len(rows), 4)  # the untimed UNFUSED row is left out
        self.assertEqual(rows[1], ("32/8 d128 4x2k causal", "AUTO (PREFILL)", 441.4, 311.0))
        self.assertEqual(rows[3], ("32/8 d128 1x8k causal", "cudnn", 615.0, None))
        out = os.path.join(self.dir, "prefill.png")
        self.assertEqual(plot.main(["prefill", self.write("prefill.csv", PREFILL_CSV), "--peak",
                                    "790", "-o", out]), 0)
        self.assertPng(out)

    def test_wrong_input_is_an_error_naming_the_file(self):
        not_bench = self.write("other.txt", "hello\n")
        with self.assertRaises(plot.FormatError) as ctx:
            plot.read_decode(not_bench)
        self.assertIn(not_bench, str(ctx.exception))
        bad_csv = self.write("bad.csv", "label,backend,us\nx,y,1\n")
        with self.assertRaises(plot.FormatError) as ctx:
            plot.read_prefill(bad_csv)
        self.assertIn("missing tflops", str(ctx.exception))
        self.assertEqual(plot.main(["prefill", bad_csv, "-o", os.path.join(self.dir, "x.png")]), 1)


if __name__ == "__main__":
    unittest.main(verbosity=1)
