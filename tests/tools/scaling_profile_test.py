#!/usr/bin/env python3
"""Tests of scripts/scaling_profile.py: the benchmark parsers, one row from a phase summary and
the table, on output in the formats bench_allreduce, bench_p2p and PhaseSummary write."""

import io
import os
import sys
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import scaling_profile as sp  # noqa: E402
from tool_test_support import run_main_on_json  # noqa: E402

ALLREDUCE_OUT = """# dpl bench_allreduce: 2 ranks, 1 nodes (2 ranks per node), buffers on host, iters 20, warmup 3, check 0
#
# communicator hierarchical
#         size        count     type  redop         time    algbw    busbw  #wrong
       1048576       262144    float    sum        812.5     1.29     1.29     N/A
#
summary comm=hierarchical bytes=1048576 time_us=812.5 algbw=1.291 busbw=1.291 wrong=0
summary comm=flat bytes=7184040 time_us=5012.0 algbw=1.433 busbw=1.433 wrong=0
"""

P2P_OUT = """
# OSU MPI Bandwidth Test (dpl bench_p2p)
# MPI, host memory
# Size      Bandwidth (MB/s)
1          2.50
1048576    6100.00
4194304    7200.00
8388608    7000.00

# OSU MPI Latency Test (dpl bench_p2p)
# MPI, host memory
# Size      Latency (us)
1          0.40
1048576    180.00

# no GPU: device sections skipped
"""


def summary(ranks, compute, allreduce, nodes=1):
    L = 7184040
    return {"ranks": ranks, "allreduce_bytes": L, "traffic_bytes": 2.0 * L * (ranks - 1) / ranks,
            "algbw_gbps": 0.0, "busbw_gbps": 1.5, "skipped_iterations": 1, "nodes": nodes,
            "training_iterations": 300, "training_seconds": 6.0, "threads_per_process": 1,
            "phases": [{"name": "data", "mean_s": 0.001}, {"name": "compute", "mean_s": compute},
                       {"name": "allreduce", "mean_s": allreduce}, {"name": "allreduce/inter_allreduce",
                                                                    "mean_s": allreduce / 2},
                       {"name": "optimize", "mean_s": 0.001}]}


class ParserTest(unittest.TestCase):
    def test_allreduce_summary_lines(self):
        rows = sp.parse_allreduce_summary(ALLREDUCE_OUT)
        self.assertEqual(len(rows), 2)
        self.assertEqual(rows[1], {"comm": "flat", "bytes": 7184040, "time_us": 5012.0, "algbw_gbps": 1.433,
                                   "busbw_gbps": 1.433, "wrong": 0})

    def test_a_malformed_summary_line_is_named(self):
        with self.assertRaisesRegex(ValueError, "got 'summary comm=flat bytes=many'"):
            sp.parse_allreduce_summary("summary comm=flat bytes=many\n")

    def test_osu_sections(self):
        sections = sp.parse_osu(P2P_OUT)
        self.assertEqual([(s["kind"], s["what"]) for s in sections],
                         [("Bandwidth", "MPI, host memory"), ("Latency", "MPI, host memory")])
        self.assertEqual(sections[0]["unit"], "Bandwidth (MB/s)")
        self.assertEqual(sections[0]["points"][1], (1048576, 6100.0))
        self.assertEqual(len(sections[1]["points"]), 2)
        # L = 7.18 MB: the 4 MiB point is the largest not above it.
        self.assertEqual(sp.bandwidth_at(sections[0], 7184040), 7200.0)
        self.assertEqual(sp.bandwidth_at(sections[0], 0), 2.5)


class CalibrationTest(unittest.TestCase):
    def test_one_process_runs_at_each_larger_runs_thread_count(self):
        # 16 cores: 2, 4 and 8 processes get 8, 4 and 2 threads each; 16 threads is the 1-process run.
        self.assertEqual(sp.calibration_threads([1, 2, 4, 8], 16), [1, 2, 4, 8])
        # 2 cores: every larger run has one thread per process, the calibration of old.
        self.assertEqual(sp.calibration_threads([1, 2, 4], 2), [1])
        # 12 cores, 5 processes: 2 threads each (dpl rounds down).
        self.assertEqual(sp.calibration_threads([1, 5], 12), [1, 2])
        self.assertEqual(sp.calibration_threads([1], 1), [])


class TableTest(unittest.TestCase):
    def profile(self):
        runs = [sp.run_point(summary(1, 0.010, 0.0), 100, 1, "hierarchical"),
                sp.run_point(summary(2, 0.010, 0.002), 100, 2, "hierarchical"),
                sp.run_point(summary(4, 0.020, 0.004, nodes=2), 100, 4, "hierarchical", ranks_per_node=2)]
        return {"label": "(test)", "runs": runs, "link": sp.parse_osu(P2P_OUT)[0], "p2p": sp.parse_osu(P2P_OUT),
                "allreduce": [dict(r, processes=2, ranks_per_node=None)
                              for r in sp.parse_allreduce_summary(ALLREDUCE_OUT)]}

    def test_a_row_from_the_phase_summary(self):
        r = sp.run_point(summary(2, 0.010, 0.002), 100, 2, "hierarchical")
        self.assertAlmostEqual(r["step_ms"], 1 + 10 + 2 + 1)  # top-level phases only
        self.assertAlmostEqual(r["img_per_s"], 2 * 100 / 14e-3)
        self.assertAlmostEqual(r["img_per_s_end_to_end"], 2 * 100 * 300 / 6.0)
        self.assertAlmostEqual(r["traffic_bytes"], 7184040.0)
        self.assertAlmostEqual(r["achieved_gbps"], 7184040 / 2e-3 / 1e9)
        self.assertEqual(r["nodes"], 1)
        with self.assertRaisesRegex(ValueError, "expected positive phase times"):
            sp.run_point(dict(summary(1, 0.0, 0.0), phases=[]), 100, 1, "hierarchical")

    def test_the_step_is_the_measured_iteration_where_the_summary_has_one(self):
        s = summary(2, 0.010, 0.002)
        s["iteration"] = {"iterations": 299, "mean_s": 0.020}
        r = sp.run_point(s, 100, 2, "hierarchical")
        self.assertAlmostEqual(r["step_ms"], 20.0)
        self.assertAlmostEqual(r["phases_sum_ms"], 14.0)
        self.assertAlmostEqual(r["img_per_s"], 2 * 100 / 20e-3)
        # Phases that cover 70% of the iteration (a GPU timed without waiting) are pointed out.
        text = sp.table({"label": "", "runs": [r]})
        self.assertIn("less than 90% of the iteration at [2] processes", text)
        s["iteration"]["mean_s"] = 0.015
        self.assertNotIn("less than 90%", sp.table({"label": "", "runs": [sp.run_point(s, 100, 2, "hierarchical")]}))

    def test_an_overlapped_run_measures_bandwidth_over_all_of_its_buckets(self):
        # 0.5 ms exposed of 3 ms of buckets: the traffic moved in 3 ms.
        s = summary(2, 0.010, 0.0005)
        s["phases"].append({"name": "allreduce/total", "mean_s": 0.003})
        r = sp.run_point(s, 100, 2, "hierarchical")
        self.assertAlmostEqual(r["phases_ms"]["allreduce"], 0.5)
        self.assertAlmostEqual(r["achieved_gbps"], 7184040 / 3e-3 / 1e9)

    def test_the_table_has_speedup_efficiency_and_the_link(self):
        lines = sp.table(self.profile()).splitlines()
        one, two, four = (line.split() for line in lines[2:5])
        self.assertEqual(one[:5], ["1", "1", "8333.3", "1.00", "1.00"])
        # 2 processes: 14 ms a step, 14285.7 img/s, 1.71x, 0.86; 3.59 GB/s achieved against 7.2 GB/s.
        self.assertEqual(two[:5], ["2", "1", "14285.7", "1.71", "0.86"])
        self.assertEqual(two[-3:], ["3.59", "7.20", "0.50"])
        self.assertEqual(four[:2], ["4", "2"])
        self.assertIn("bench_p2p 'MPI, host memory'", lines[-1])

    def test_from_a_saved_profile_prints_the_table(self):
        status, text, _ = run_main_on_json(sp.main, self.profile(), lambda path, _: ["--from", path, "--no-plots"])
        self.assertEqual(status, 0)
        self.assertIn("14285.7", text)

    def test_a_missing_profile_is_named(self):
        with redirect_stdout(io.StringIO()):
            self.assertEqual(sp.main(["--from", "/nonexistent/scaling_profile.json", "--no-plots"]), 2)


if __name__ == "__main__":
    unittest.main()
