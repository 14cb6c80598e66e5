#!/usr/bin/env python3
"""Tests of tools/merge_traces.py on the fixture traces next to this file.

fixtures/run2 holds two ranks whose steady clocks differ by 4900 s; rank 1 fetched its first
batch 2 ms later than rank 0 after the barrier both left together, and its system clock runs
0.5 s ahead of rank 0's. Each iteration: data 1 ms, compute 20 ms with buckets reduced during
it (allreduce/bucket2, allreduce/bucket10, allreduce/hidden, allreduce/total), allreduce 5 ms,
optimize 2 ms.
"""

import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(HERE, "fixtures")
TOOL = os.path.join(ROOT, "tools", "merge_traces.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import merge_traces  # noqa: E402


def run_tool(*args):
    """Runs main() in-process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = merge_traces.main(list(args))
    return status, out.getvalue(), err.getvalue()


class MergeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.tmp.name, "merged.json")

    def tearDown(self):
        self.tmp.cleanup()

    def merged(self, *inputs, align="auto"):
        status, stdout, stderr = run_tool(*inputs, "-o", self.out, "--align", align)
        self.assertEqual(status, 0, stderr)
        with open(self.out) as f:
            return json.load(f), stdout, stderr

    @staticmethod
    def slices(doc, rank, name):
        return sorted((e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == rank and e["name"] == name),
                      key=lambda e: e["ts"])

    @staticmethod
    def thread_names(doc, rank):
        names = [(e["tid"], e["args"]["name"]) for e in doc["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == rank]
        return [n for _, n in sorted(names)]

    def test_barrier_alignment_puts_the_agreed_moment_at_one_time(self):
        doc, stdout, _ = self.merged(os.path.join(FIXTURES, "run2"))
        self.assertEqual(doc["otherData"]["alignment"], "barrier")
        self.assertEqual(doc["otherData"]["ranks"], [0, 1])
        d0, d1 = self.slices(doc, 0, "data"), self.slices(doc, 1, "data")
        self.assertEqual(len(d0), 2)
        # 4900 s of clock origin removed; rank 1's real 2 ms lateness kept.
        self.assertAlmostEqual(d1[0]["ts"] - d0[0]["ts"], 2000.0, places=3)
        # The timeline starts at 0: here at the barrier marker, 10 ms before rank 0's first batch.
        self.assertAlmostEqual(d0[0]["ts"], 10000.0, places=3)
        marks = [e for e in doc["traceEvents"] if e["ph"] == "i"]
        self.assertEqual(sorted(e["pid"] for e in marks), [0, 1])
        self.assertTrue(all(abs(e["ts"]) < 1e-6 for e in marks))
        self.assertEqual(doc["otherData"]["offsets_s"], {"0": 100.0, "1": 5000.0})
        self.assertIn("merged 2 rank(s)", stdout)

    def test_wall_alignment_uses_each_ranks_clock_pair(self):
        doc, _, _ = self.merged(os.path.join(FIXTURES, "run2"), align="wall")
        d0, d1 = self.slices(doc, 0, "data"), self.slices(doc, 1, "data")
        # Rank 1's system clock is 0.5 s ahead: the wall alignment shows that error.
        self.assertAlmostEqual(d1[0]["ts"] - d0[0]["ts"], 502000.0, places=2)
        self.assertAlmostEqual(min(e["ts"] for e in doc["traceEvents"] if "ts" in e), 0.0, places=6)

    def test_one_named_process_per_rank_and_durations_kept(self):
        doc, _, _ = self.merged(os.path.join(FIXTURES, "run2"))
        procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(procs, {0: "rank 0", 1: "rank 1"})
        for rank in (0, 1):
            compute = self.slices(doc, rank, "compute")
            self.assertEqual([e["dur"] for e in compute], [20000.0, 20000.0])
            self.assertEqual([e["args"]["iteration"] for e in compute], [0, 1])
            self.assertTrue(all(e["args"]["rank"] == rank for e in compute))

    def test_sub_phases_get_their_own_tracks_in_parent_and_numeric_order(self):
        doc, _, _ = self.merged(os.path.join(FIXTURES, "run2"))
        self.assertEqual(self.thread_names(doc, 1), ["phases", "allreduce/bucket2", "allreduce/bucket10",
                                                     "allreduce/hidden", "allreduce/total"])
        tid_of = {n: i for i, n in enumerate(self.thread_names(doc, 1))}
        for e in self.slices(doc, 1, "allreduce/bucket10"):
            self.assertEqual(e["tid"], tid_of["allreduce/bucket10"])
        for e in self.slices(doc, 1, "optimize"):
            self.assertEqual(e["tid"], tid_of["phases"])
        # A bucket reduced during backward lies inside compute's span on the same rank.
        c, b = self.slices(doc, 1, "compute")[0], self.slices(doc, 1, "allreduce/bucket2")[0]
        self.assertGreater(b["ts"], c["ts"])
        self.assertLess(b["ts"] + b["dur"], c["ts"] + c["dur"])

    def test_partly_overlapping_slices_of_one_track_go_to_another_lane(self):
        lanes = merge_traces.assign_lanes([(0, 10, "a"), (2, 4, "nested"), (8, 12, "overlaps a"), (12, 13, "after")])
        self.assertEqual(lanes, [["a", "nested", "after"], ["overlaps a"]])
        with open(os.path.join(FIXTURES, "run2", "trace_rank0.json")) as f:
            doc = json.load(f)
        # Shift one compute slice to overlap the next phase's slice partly.
        first = next(e for e in doc["traceEvents"] if e["name"] == "compute")
        first["dur"] += 10000.0
        path = os.path.join(self.tmp.name, "trace_rank0.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        merged, _, _ = self.merged(path)
        self.assertEqual(self.thread_names(merged, 0)[:2], ["phases", "phases (2)"])

    def test_several_files_and_folders_sort_by_rank(self):
        doc, _, _ = self.merged(os.path.join(FIXTURES, "run2", "trace_rank1.json"),
                                os.path.join(FIXTURES, "wall_only_rank3.json"),
                                os.path.join(FIXTURES, "run2", "trace_rank0.json"), align="wall")
        self.assertEqual(doc["otherData"]["ranks"], [0, 1, 3])
        self.assertEqual(doc["otherData"]["merged_from"][2], os.path.join(FIXTURES, "wall_only_rank3.json"))

    def test_auto_falls_back_to_wall_then_to_none_with_a_warning(self):
        doc, _, _ = self.merged(os.path.join(FIXTURES, "run2", "trace_rank0.json"),
                                os.path.join(FIXTURES, "wall_only_rank3.json"))
        self.assertEqual(doc["otherData"]["alignment"], "wall")
        doc, _, stderr = self.merged(os.path.join(FIXTURES, "no_clock_rank0.json"),
                                     os.path.join(FIXTURES, "wall_only_rank3.json"))
        self.assertEqual(doc["otherData"]["alignment"], "none")
        self.assertIn("no clock reference", stderr)
        # An old trace names its rank by its events' pid.
        self.assertEqual(doc["otherData"]["ranks"], [0, 3])

    def assert_refused(self, message, *args):
        status, _, stderr = run_tool(*args, "-o", self.out)
        self.assertEqual(status, 2)
        self.assertIn(message, stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_bad_and_missing_input_is_refused_by_name(self):
        missing = os.path.join(self.tmp.name, "trace_rank7.json")
        self.assert_refused(f"{missing}: cannot read the trace: No such file or directory", missing)
        self.assert_refused("truncated.json: expected a Chrome trace (JSON), got invalid JSON at line 2",
                            os.path.join(FIXTURES, "truncated.json"))
        self.assert_refused("not_a_trace.json: expected a JSON object with a \"traceEvents\" list",
                            os.path.join(FIXTURES, "not_a_trace.json"))
        self.assert_refused("bad_event.json: expected event 0 (\"compute\") to have numeric \"ts\" and \"dur\"",
                            os.path.join(FIXTURES, "bad_event.json"))
        self.assert_refused(f"{self.tmp.name}: expected trace_rank<N>.json files in this folder", self.tmp.name)
        r0 = os.path.join(FIXTURES, "run2", "trace_rank0.json")
        self.assert_refused("rank 0 appears twice", r0, r0)
        self.assert_refused("--align barrier: expected otherData.sync_steady_s", "--align", "barrier", r0,
                            os.path.join(FIXTURES, "wall_only_rank3.json"))

    def test_command_line(self):
        result = subprocess.run([sys.executable, TOOL, os.path.join(FIXTURES, "run2"), "-o", self.out],
                                capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 0, result.stderr)
        table = result.stdout.splitlines()
        self.assertIn("rank 0", table[1])
        row = next(line for line in table if line.startswith("compute"))
        self.assertEqual(row.split()[1:], ["20.000", "20.000"])


if __name__ == "__main__":
    unittest.main()
