#!/usr/bin/env python3
"""Tests of scripts/kernel_table.py on hand-made Nsight Compute raw-page exports: sums per kernel,
the speed-of-light columns and floors, and the errors for exports it cannot read."""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import kernel_table as kt  # noqa: E402

# The raw page as ncu writes it: a header, a units row, then one row per launch.
TIME_ONLY = """"ID","Kernel Name","gpu__time_duration.sum"
"","","nsecond"
"0","gemm","1,000"
"1","copy","250"
"2","gemm","3,000"
"""

WITH_SOL = """"ID","Kernel Name","dram__bytes.sum","dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed"
"","","byte","%","nsecond","%"
"0","gemm","1000000","10","1000","80"
"1","copy","3000000000","90","1000000","5"
"2","gemm","1000000","30","3000","60"
"3","copy","1000000000","50","1000000","10"
"""


def run(text, *extra):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "kernels.csv")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            status = kt.main([path, *extra])
        return status, out.getvalue(), err.getvalue()


class TimeOnlyTest(unittest.TestCase):
    def test_launches_are_summed_per_kernel_largest_first(self):
        status, out, _ = run(TIME_ONLY)
        self.assertEqual(status, 0)
        lines = out.splitlines()
        self.assertEqual(lines[0], "3 launches, 2 kernels, 0.004 ms in all")
        self.assertNotIn("DRAM%", out)
        self.assertTrue(lines[2].strip().startswith("0.004"))  # gemm: 4000 ns in 2 calls
        self.assertIn(" 2 ", lines[2])
        self.assertTrue(lines[2].endswith("gemm"))
        self.assertTrue(lines[3].endswith("copy"))

    def test_top_limits_the_rows(self):
        _, out, _ = run(TIME_ONLY, "--top", "1")
        self.assertNotIn("copy", out)


class SpeedOfLightTest(unittest.TestCase):
    def test_floor_is_each_launch_time_at_its_busiest_units_peak(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "k.csv")
            with open(path, "w", encoding="utf-8") as f:
                f.write(WITH_SOL)
            kernels, sol = kt.read_kernels(path)
        self.assertTrue(sol)
        gemm, copy = kernels["gemm"], kernels["copy"]
        self.assertEqual((gemm.calls, copy.calls), (2, 2))
        # gemm: 1000 ns at SM 80% and 3000 ns at SM 60% -> floor 800 + 1800 ns; SM share 2600/4000.
        self.assertAlmostEqual(gemm.floor_ns, 2600.0)
        self.assertAlmostEqual(gemm.sm_pct(), 65.0)
        self.assertAlmostEqual(gemm.dram_pct(), 25.0)
        # copy: DRAM-bound, 90% and 50% of 1 ms each -> floor 1.4 ms; 4 GB moved.
        self.assertAlmostEqual(copy.floor_ns, 1.4e6)
        self.assertAlmostEqual(copy.bytes, 4e9)

    def test_tables_show_the_columns_and_order_the_gaps(self):
        status, out, _ = run(WITH_SOL)
        self.assertEqual(status, 0)
        self.assertIn("DRAM%", out)
        self.assertIn("at their busiest unit's peak: 1.403 ms (70% of the time)", out)
        gaps = out.split("largest gaps to the floor (ms):")[1].splitlines()
        self.assertTrue(gaps[2].endswith("copy"))  # 0.6 ms of gap against gemm's 0.0014
        self.assertTrue(gaps[2].strip().startswith("0.600"))
        self.assertTrue(gaps[3].endswith("gemm"))


class ErrorTest(unittest.TestCase):
    def test_an_export_without_the_time_metric_is_refused_with_what_was_expected(self):
        status, out, err = run('"ID","Kernel Name","dram__bytes.sum"\n"0","gemm","5"\n')
        self.assertEqual(status, 1)
        self.assertEqual(out, "")
        self.assertIn("expected a header with 'Kernel Name' and 'gpu__time_duration.sum'", err)

    def test_an_export_without_launches_is_refused(self):
        status, _, err = run('"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n')
        self.assertEqual(status, 1)
        self.assertIn("no kernel launches", err)

    def test_a_missing_file_is_reported(self):
        err = io.StringIO()
        with redirect_stderr(err):
            status = kt.main(["/nonexistent/kernels.csv"])
        self.assertEqual(status, 1)
        self.assertIn("/nonexistent/kernels.csv", err.getvalue())


if __name__ == "__main__":
    unittest.main()
