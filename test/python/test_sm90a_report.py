"""tools/sm90a-report.py's reading of nvcc -Xptxas=-v output: each kernel's registers and spills
from the lines after its "Compiling entry function", and the "Potential Performance Loss" notes
credited to the function they name, wherever they stand. Usage: test_sm90a_report.py SOURCE_ROOT"""
import importlib.util
import pathlib
import sys
import unittest

ROOT = pathlib.Path(sys.argv.pop(1) if len(sys.argv) > 1 else
                    pathlib.Path(__file__).resolve().parents[2])
spec = importlib.util.spec_from_file_location("sm90a_report", ROOT / "tools" / "sm90a-report.py")
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)

KERNEL_A = "_ZN2pa6detail21prefill_hopper_kernelI6__halfS2_Li64EEEvNS0_14prefill_paramsE"
KERNEL_B = "_ZN2pa6detail21prefill_hopper_kernelI6__halfS2_Li128EEEvNS0_14prefill_paramsE"
# the shape of ptxas 13.0's -v output: a note for A printed while B compiles
PTXAS = f"""ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '{KERNEL_A}' for 'sm_90a'
ptxas info    : Function properties for {KERNEL_A}
    0 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 424 bytes cmem[0]
ptxas info    : Compiling entry function '{KERNEL_B}' for 'sm_90a'
ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient register resources for the wgmma pipeline in the function '{KERNEL_A}'
ptxas info    : Function properties for {KERNEL_B}
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 154 registers, used 1 barriers, 424 bytes cmem[0]
ptxas info    : (C7520) Potential Performance Loss: wgmma.mma_async instructions are serialized due to program dependence on compiler-inserted WG.AR in divergent path in the function '{KERNEL_B}'
"""


class PtxasLines(unittest.TestCase):
    def test_registers_spills_and_notes_per_kernel(self):
        kernels = report.ptxas_lines(PTXAS)
        self.assertEqual(set(kernels), {KERNEL_A, KERNEL_B})
        self.assertEqual(kernels[KERNEL_A]["registers"], "168")
        self.assertEqual(kernels[KERNEL_A]["spills"], "4/8")
        self.assertEqual(dict(kernels[KERNEL_A]["notes"]), {"C7511": 1})
        self.assertEqual(kernels[KERNEL_B]["registers"], "154")
        self.assertEqual(kernels[KERNEL_B]["spills"], "0/0")
        self.assertEqual(dict(kernels[KERNEL_B]["notes"]), {"C7520": 1})

    def test_short_name_drops_namespaces_and_parameters(self):
        name = report.short_name(KERNEL_A)
        self.assertNotIn("pa::", name)
        self.assertNotIn("prefill_params", name)
        self.assertIn("prefill_hopper_kernel<", name)


if __name__ == "__main__":
    unittest.main()
