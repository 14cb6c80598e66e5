#!/usr/bin/env python3
"""Tests of scripts/cost_model.py: the alpha-beta terms, the overlap simulation, the predictions'
limits and the CPU check on a small hand-made profile."""

import json
import math
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import cost_model as cm  # noqa: E402
from tool_test_support import run_main_on_json  # noqa: E402


class AlphaBetaTest(unittest.TestCase):
    def test_ring_moves_2_p_minus_1_over_p_bytes_and_pays_2_p_minus_1_latencies(self):
        self.assertEqual(cm.ring(1, 1e9, 1e9, 1e-3), 0.0)
        self.assertAlmostEqual(cm.ring(2, 1e9, 1e9, 0.0), 1.0)
        self.assertAlmostEqual(cm.ring(4, 1e9, 1e9, 0.0), 1.5)
        self.assertAlmostEqual(cm.ring(4, 1e9, 2e9, 1e-3), 0.75 + 0.006)

    def test_intra_bandwidth_takes_the_latency_terms_out(self):
        point = {"bytes": 1000, "ranks": 2, "seconds": 4e-6, "alpha_s": 1e-6}
        # 2 ranks: traffic = bytes; 2(r-1) = 2 latency steps of 1 us leave 2 us for the bytes.
        self.assertAlmostEqual(cm.intra_bandwidth(point), 1000 / 2e-6)
        with self.assertRaises(ValueError):
            cm.intra_bandwidth(dict(point, seconds=1e-6))

    def test_hierarchical_adds_the_inter_node_ring_capped_by_staging(self):
        intra = {"bytes": 1e9, "ranks": 2, "seconds": 1.0, "alpha_s": 0.0}        # B_intra = 1 GB/s
        stage = {"hierarchical_Bps": 0.5e9, "flat_Bps": 0.25e9, "shm_alpha_s": 0.0}
        link = {"name": "x", "Bps": 2e9, "alpha_s": 0.0}
        # 2 nodes x 4: intra ring(4) at 1 GB/s = 1.5 s; inter ring(2) at min(2, 0.5) GB/s = 2 s.
        self.assertAlmostEqual(cm.allreduce_seconds("hierarchical", 2, 4, 1e9, link, intra, stage), 3.5)
        self.assertAlmostEqual(cm.allreduce_seconds("hierarchical", 2, 4, 1e9, link, intra, stage, staged=False),
                               1.5 + 0.5)
        # flat over 8 ranks: 2*7/8 at 0.25 GB/s = 7 s; one node of 1: nothing to do.
        self.assertAlmostEqual(cm.allreduce_seconds("flat", 2, 4, 1e9, link, intra, stage), 7.0)
        self.assertEqual(cm.allreduce_seconds("flat", 1, 1, 1e9, link, intra, stage), 0.0)
        with self.assertRaises(ValueError):
            cm.allreduce_seconds("ring", 1, 2, 1e9, link, intra, stage)


class OverlapTest(unittest.TestCase):
    def test_without_overlap_the_whole_allreduce_is_exposed(self):
        self.assertAlmostEqual(cm.exposed_allreduce(1.0, 100, 25, lambda b: b * 0.01, overlap=False), 1.0)

    def test_a_fast_allreduce_leaves_only_the_last_bucket_exposed(self):
        # Buckets ready at 0.25, 0.5, 0.75, 1.0 of backward, 0.25 s each: the last ends at 1.25.
        self.assertAlmostEqual(cm.exposed_allreduce(1.0, 100, 25, lambda b: b * 0.01, overlap=True), 0.25)

    def test_a_slow_allreduce_hides_only_behind_backward(self):
        # 2.5 s per bucket, back to back from 0.25 s: ends at 10.25, so 9.25 s after backward.
        self.assertAlmostEqual(cm.exposed_allreduce(1.0, 100, 25, lambda b: b * 0.1, overlap=True), 9.25)

    def test_one_bucket_cannot_overlap(self):
        self.assertAlmostEqual(cm.exposed_allreduce(1.0, 100, 1000, lambda b: b * 0.01, overlap=True), 1.0)


class PredictionTest(unittest.TestCase):
    def setUp(self):
        self.ten = cm.LINKS[0]

    def test_one_gpu_is_the_measured_point(self):
        r = cm.predict_gpu(cm.RESNET50, "hierarchical", 1, 1, self.ten)
        self.assertAlmostEqual(r["efficiency"], 1.0)
        self.assertAlmostEqual(r["img_per_s"], (6231.28 + 6108.41 + 6151.57) / 3)
        self.assertAlmostEqual(r["step_s"], 128 / cm.RESNET50["img_per_s_1gpu"])

    def test_16_gpus_over_10_gbe_without_overlap(self):
        r = cm.predict_gpu(cm.RESNET50, "hierarchical", 4, 4, self.ten, overlap=False)
        L = 102228128
        b_intra = cm.intra_bandwidth(cm.INTRA)
        expect = (cm.ring(4, L, b_intra, 10e-6) +
                  2 * 3 / 4 * L / (8.5 * 2**30 / 8) + 2 * 3 * 25e-6)
        self.assertAlmostEqual(r["allreduce_s"], expect)
        self.assertAlmostEqual(r["exposed_allreduce_s"], expect)
        step1 = 128 / cm.RESNET50["img_per_s_1gpu"]
        self.assertAlmostEqual(r["step_s"], step1 + expect)
        self.assertAlmostEqual(r["efficiency"], step1 / r["step_s"])
        # About 0.135 s of allreduce against a 21 ms step: ChainerMN's users saw the same shape.
        self.assertTrue(0.10 < r["allreduce_s"] < 0.16, r["allreduce_s"])

    def test_overlap_and_half_the_bytes_only_help(self):
        for link in cm.LINKS:
            for nodes, per in cm.LAYOUTS:
                plain = cm.predict_gpu(cm.RESNET50, "hierarchical", nodes, per, link, overlap=False)
                over = cm.predict_gpu(cm.RESNET50, "hierarchical", nodes, per, link, overlap=True)
                half = cm.predict_gpu(cm.RESNET50, "hierarchical", nodes, per, link, overlap=True, half=True)
                self.assertLessEqual(over["exposed_allreduce_s"], plain["exposed_allreduce_s"] + 1e-12)
                # Half the bytes may cut the arena into buckets whose last one is a little larger
                # (fixed bucket bytes), so with overlap it may cost a hair more, never more than that.
                self.assertLessEqual(half["step_s"], over["step_s"] * 1.001)
                half_plain = cm.predict_gpu(cm.RESNET50, "hierarchical", nodes, per, link, overlap=False, half=True)
                self.assertLessEqual(half_plain["step_s"], plain["step_s"] + 1e-12)
                self.assertLessEqual(over["efficiency"], 1.0 + 1e-12)
                # What overlap hides is at most backward.
                self.assertLessEqual(plain["step_s"] - over["step_s"], over["backward_s"] + 1e-9)

    def test_a_faster_link_never_predicts_less(self):
        for nodes, per in ((2, 4), (2, 8), (4, 4)):
            effs = [cm.predict_gpu(cm.RESNET50, "hierarchical", nodes, per, link, staged=False)["efficiency"]
                    for link in cm.LINKS]
            self.assertEqual(effs, sorted(effs))

    def test_every_measured_gpu_point_is_predicted_close_to_its_measurement(self):
        points = cm.measured_gpu_points()
        self.assertEqual(len(points), 4)
        for what, measured, predicted in points:
            # Inputs are used as measured: only the latency terms (microseconds) may differ.
            self.assertLess(abs(predicted / measured - 1), 0.01, what)
        self.assertAlmostEqual(points[1][2], 375.7e-6, places=9)

    def test_predict_all_covers_every_combination(self):
        rows = cm.predict_all()
        self.assertEqual(len(rows), len(cm.LINKS) * len(cm.LAYOUTS) * 2 * 2 * 2 * 2)


class CpuCheckTest(unittest.TestCase):
    def profile(self):
        def run(p, compute, allreduce, step, threads=None, rpn=None, nodes=1):
            return {"processes": p, "nodes": nodes, "ranks_per_node": rpn, "threads_override": threads,
                    "communicator": "hierarchical", "batch": 100, "grad_bytes": 1000,
                    "phases_ms": {"data": 1.0, "compute": compute, "allreduce": allreduce, "optimize": 2.0},
                    "step_ms": step, "img_per_s": p * 100 / step * 1e3}
        return {
            "machine": {"cores": 2},
            "runs": [run(1, 10.0, 0.0, 13.0), run(2, 21.0, 2.0, 26.0), run(4, 40.0, 3.0, 52.0)],
            "calibration": [run(1, 20.0, 0.0, 23.0, threads=1)],
            "allreduce": [{"processes": 2, "comm": "hierarchical", "ranks_per_node": None, "bytes": 100,
                           "time_us": 100.0},
                          {"processes": 2, "comm": "hierarchical", "ranks_per_node": None, "bytes": 10000,
                           "time_us": 10000.0},
                          {"processes": 4, "comm": "hierarchical", "ranks_per_node": None, "bytes": 1000,
                           "time_us": 4000.0}],
        }

    def test_interpolation_is_straight_in_log_log(self):
        self.assertAlmostEqual(cm.interpolate_loglog([(1, 1), (100, 10)], 10), math.sqrt(10))
        self.assertAlmostEqual(cm.interpolate_loglog([(1, 1), (100, 10)], 1000), 10 * math.sqrt(10))
        self.assertAlmostEqual(cm.interpolate_loglog([(10, 5)], 20), 10)

    def test_every_measured_point_is_predicted_with_its_error(self):
        rows = cm.predict_cpu(self.profile())
        self.assertEqual([r["processes"] for r in rows], [1, 2, 4])
        one, two, four = rows
        self.assertAlmostEqual(one["predicted_step_ms"], 13.0)
        self.assertAlmostEqual(one["error"], 0.0)
        # 2 processes on 2 cores: the one-thread run's 23 ms + 1 ms of allreduce (1000 B on the line).
        self.assertAlmostEqual(two["predicted_allreduce_ms"], 1.0)
        self.assertAlmostEqual(two["predicted_step_ms"], 24.0)
        self.assertAlmostEqual(two["error"], 24.0 / 26.0 - 1)
        # 4 processes on 2 cores: each gets half a core, 2 x 23 ms, + 4 ms.
        self.assertAlmostEqual(four["predicted_step_ms"], 50.0)
        self.assertAlmostEqual(four["predicted_img_per_s"], 4 * 100 / 50.0 * 1e3)

    def test_missing_inputs_are_named(self):
        p = self.profile()
        p["allreduce"] = [a for a in p["allreduce"] if a["processes"] != 4]
        with self.assertRaisesRegex(ValueError, "bench_allreduce points for 4 processes"):
            cm.predict_cpu(p)
        p = self.profile()
        p["calibration"] = []
        with self.assertRaisesRegex(ValueError, "calibration run at 1 threads"):
            cm.predict_cpu(p)

    def test_command_line_prints_inputs_predictions_and_the_check(self):
        status, text, written = run_main_on_json(
            cm.main, self.profile(), lambda path, folder: ["--cpu-profile", path, "--json",
                                                           os.path.join(folder, "m.json")])
        self.assertEqual(status, 0)
        self.assertIn("assumed:", text)
        self.assertIn("measured:", text)
        self.assertIn("IB 400 Gb (NDR)", text)
        self.assertIn("CPU check", text)
        self.assertEqual(len(written["m.json"]["cpu_check"]), 3)

    def test_each_process_takes_the_compute_of_one_process_at_its_thread_count(self):
        # 16 cores: 2 processes run 8 threads each, 4 run 4; one process alone measured at both.
        def run(p, compute, step, threads, override=None):
            return {"processes": p, "nodes": 1, "ranks_per_node": None, "threads_override": override,
                    "threads_per_process": threads, "communicator": "hierarchical", "batch": 100,
                    "grad_bytes": 1000, "phases_ms": {"data": 0.0, "compute": compute,
                                                      "allreduce": 1.0 if p > 1 else 0.0, "optimize": 1.0},
                    "step_ms": step, "img_per_s": p * 100 / step * 1e3}
        curve = [{"processes": p, "comm": "hierarchical", "ranks_per_node": None, "bytes": 1000,
                  "time_us": 2000.0} for p in (2, 4)]
        profile = {"machine": {"cores": 16}, "runs": [run(1, 8.0, 9.0, 16), run(2, 5.0, 9.0, 8), run(4, 6.0, 10.0, 4)],
                   "calibration": [run(1, 20.0, 21.0, 1, 1), run(1, 5.5, 6.5, 8, 8), run(1, 6.5, 7.5, 4, 4)],
                   "allreduce": curve}
        one, two, four = cm.predict_cpu(profile)
        # The 8- and 4-thread runs alone (their steps hold 0.5 ms that no phase covers), + 2 ms.
        self.assertAlmostEqual(two["predicted_step_ms"], 6.5 + 2.0)
        self.assertAlmostEqual(four["predicted_step_ms"], 7.5 + 2.0)
        # More processes x threads than cores: each process gets its share of them.
        profile["runs"].append(run(32, 30.0, 40.0, 1))
        profile["allreduce"].append(dict(curve[0], processes=32))
        self.assertAlmostEqual(cm.predict_cpu(profile)[-1]["predicted_step_ms"], 21.0 * 2 + 2.0)
        profile["calibration"] = profile["calibration"][:1]
        with self.assertRaisesRegex(ValueError, "calibration run at 8 threads .* at \\[1, 16\\] threads"):
            cm.predict_cpu(profile)


class GpuProfileTest(unittest.TestCase):
    """Calibration on a GPU scaling profile: its one-GPU run as the model's inputs, its allreduce
    point as the intra-node bandwidth, and each run predicted with its error."""

    L = 100 * 2**20

    def profile(self, overlap=False, two_gpu_step=21.0):
        def run(p, compute, allreduce, step):
            return {"processes": p, "nodes": 1, "ranks_per_node": None, "threads_override": None,
                    "communicator": "hierarchical", "batch": 128, "grad_bytes": self.L,
                    "phases_ms": {"data": 0.1, "compute": compute, "allreduce": allreduce, "optimize": 0.4},
                    "step_ms": step, "img_per_s": p * 128 / step * 1e3, "repeats_img_per_s": [1.0, 2.0, 3.0]}
        return {"label": "(ResNet-50 synthetic bf16, GPU)", "overlap": overlap,
                "runs": [run(1, 19.5, 0.0, 20.0), run(2, 19.5, 1.0, two_gpu_step)],
                "allreduce": [{"processes": 2, "comm": "hierarchical", "ranks_per_node": None, "bytes": b,
                               "time_us": t} for b, t in ((2**20, 20.0), (self.L, 1000.0))]}

    def test_the_one_gpu_run_is_the_models_step_optimize_data_and_bytes(self):
        model = cm.model_from_profile(self.profile())
        self.assertAlmostEqual(model["batch"] / model["img_per_s_1gpu"], 20.0e-3)
        self.assertAlmostEqual(model["optimize_s"], 0.4e-3)
        self.assertAlmostEqual(model["data_s"], 0.1e-3)
        self.assertEqual(model["grad_bytes"], self.L)
        self.assertIn("measured: the scaling profile's one-GPU run", model["img_per_s_source"])
        self.assertIn("ResNet-50 synthetic bf16", model["name"])
        r = cm.predict_gpu(model, "hierarchical", 1, 1, cm.LINKS[0], intra=cm.intra_from_profile(self.profile()))
        self.assertAlmostEqual(r["step_s"], 20.0e-3)

    def test_backward_share_is_measured_where_forward_and_backward_were_timed_on_the_device(self):
        profile = self.profile()
        profile["runs"][0]["phases_ms"].update({"compute/forward": 6.5, "compute/backward": 13.0})
        # Without synchronized timing the sub-phases may be queueing times: the assumption stays.
        self.assertAlmostEqual(cm.model_from_profile(profile)["backward_share"], 2.0 / 3.0)
        self.assertIn("assumed", cm.model_from_profile(profile)["backward_source"])
        profile["timing"] = "synchronized"
        profile["runs"][0]["phases_ms"].update({"compute/forward": 7.8, "compute/backward": 11.7})
        model = cm.model_from_profile(profile)
        self.assertAlmostEqual(model["backward_share"], 0.6)
        self.assertIn("measured", model["backward_source"])

    def test_the_intra_node_point_is_the_profiles_allreduce_of_L_on_the_most_gpus(self):
        intra = cm.intra_from_profile(self.profile())
        self.assertEqual((intra["bytes"], intra["ranks"]), (self.L, 2))
        self.assertAlmostEqual(intra["seconds"], 1e-3)
        self.assertIn("measured: the scaling profile's bench_allreduce", intra["source"])
        one_gpu = self.profile()
        one_gpu["runs"], one_gpu["allreduce"] = one_gpu["runs"][:1], []
        self.assertIs(cm.intra_from_profile(one_gpu), cm.INTRA)

    def test_every_run_is_predicted_from_its_own_allreduce_curve(self):
        model = cm.model_from_profile(self.profile())
        one, two = cm.predict_gpu_profile(self.profile(), model)
        self.assertAlmostEqual(one["error"], 0.0)
        self.assertEqual(one["allreduce_from"], "none (one process)")
        # No overlap: the whole 1 ms allreduce of L is added to the 20 ms step.
        self.assertEqual(two["allreduce_from"], "measured curve")
        self.assertAlmostEqual(two["predicted_step_ms"], 21.0)
        self.assertTrue(two["within_tolerance"])
        slow = cm.predict_gpu_profile(self.profile(two_gpu_step=25.0), model)[1]
        self.assertAlmostEqual(slow["error"], 21.0 / 25.0 - 1)
        self.assertFalse(slow["within_tolerance"])

    def test_with_overlap_only_what_runs_past_backward_is_added(self):
        profile = self.profile(overlap=True)
        model = cm.model_from_profile(profile)
        two = cm.predict_gpu_profile(profile, model, bucket_bytes=25 * 2**20)[1]
        # Four 25 MiB buckets of about 0.25 ms each hide behind 13 ms of backward but the last.
        self.assertGreater(two["predicted_allreduce_ms"], 0.2)
        self.assertLess(two["predicted_allreduce_ms"], 0.4)
        self.assertAlmostEqual(two["predicted_step_ms"], 20.0 + two["predicted_allreduce_ms"])

    def test_command_line_calibrates_on_the_profile_and_prints_the_check(self):
        status, text, written = run_main_on_json(
            cm.main, self.profile(), lambda path, folder: ["--gpu-profile", path, "--json",
                                                           os.path.join(folder, "m.json")])
        self.assertEqual(status, 0)
        self.assertIn("GPU check", text)
        self.assertIn("within 10%", text)
        self.assertNotIn("Measured GPU points (performance.md)", text)
        self.assertEqual(len(written["m.json"]["gpu_check"]), 2)
        self.assertEqual(written["m.json"]["inputs"]["model"]["batch"], 128)

    def test_a_profile_without_a_one_gpu_run_is_refused_by_name(self):
        profile = self.profile()
        profile["runs"] = profile["runs"][1:]
        with self.assertRaisesRegex(ValueError, "one-process run in the GPU profile, got process counts \\[2\\]"):
            cm.model_from_profile(profile)
        status, text, _ = run_main_on_json(cm.main, profile, lambda path, folder: ["--gpu-profile", path])
        self.assertEqual(status, 2)
        status, _, _ = run_main_on_json(cm.main, self.profile(), lambda path, folder: ["--gpu-profile", path,
                                                                                       "--bucket-mb", "0"])
        self.assertEqual(status, 2)


class DocumentedProfilesTest(unittest.TestCase):
    """The profiles docs/scaling.md quotes are the ones the model reads: its tables come from them."""

    def load(self, name):
        with open(os.path.join(ROOT, "docs", "data", name), encoding="utf-8") as f:
            return json.load(f)

    def test_the_h200_profile_is_the_models_one_gpu_point(self):
        profile = self.load("scaling_h200_resnet50_bf16.json")
        self.assertEqual(profile["timing"], "synchronized")
        model = cm.model_from_profile(profile)
        self.assertAlmostEqual(model["batch"] / model["img_per_s_1gpu"] * 1e3, profile["runs"][0]["step_ms"])
        (one,) = cm.predict_gpu_profile(profile, model)
        self.assertAlmostEqual(one["error"], 0.0)
        # The iteration holds its phases and a little the phases do not cover.
        run = profile["runs"][0]
        self.assertLessEqual(run["phases_sum_ms"], run["step_ms"])
        self.assertGreater(run["phases_sum_ms"], 0.9 * run["step_ms"])

    def test_the_16_core_profile_is_predicted_for_every_run(self):
        profile = self.load("scaling_16cores_mnist.json")
        rows = cm.predict_cpu(profile)
        self.assertEqual(len(rows), len(profile["runs"]))
        for r in rows:
            self.assertTrue(math.isfinite(r["error"]) and abs(r["error"]) < 1.0, r)


if __name__ == "__main__":
    unittest.main()
