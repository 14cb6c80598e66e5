#!/usr/bin/env python3
"""Predicts the step time and scaling efficiency of data-parallel training from measured parts.

    python3 scripts/cost_model.py                                  # ResNet-50 on H200s, 1..16 GPUs
    python3 scripts/cost_model.py --cpu-profile /tmp/scaling/scaling_profile.json   # + CPU check
    python3 scripts/cost_model.py --gpu-profile /tmp/scaling-gpu/scaling_profile.json  # calibrated on it
    python3 scripts/cost_model.py --json /tmp/model.json --plot /tmp/model.png

The model (docs/scaling.md explains it with its numbers):

  step = data + forward + backward + exposed allreduce + optimize

  allreduce of b bytes over N nodes of n GPUs (p = N n ranks), alpha-beta terms:
    ring(r, b, B, a)   = 2(r-1)/r * b / B + 2(r-1) a                 (0 for r = 1)
    hierarchical       = intra(n, b) + ring(N, b, min(B_link, B_stage), a_link)
    flat               = ring(p, b, min(B_link, B_stage_flat), a)   (every rank on one ring through
                          host-staged MPI; a = a_link across nodes, a_shm on one node)
    intra(n, b)        = ring(n, b, B_intra, a_intra)             (NCCL inside a node)
  B_stage caps the inter-node step of a non-CUDA-aware MPI, whose data crosses host memory (the
  measured staged rate); "unstaged" variants drop it (CUDA-aware MPI or NCCL across nodes).

  Overlap: the gradient arena is cut into buckets of --bucket-mb; gradients become ready at a
  uniform rate over backward, in arena order, and bucket i's allreduce starts when it is ready
  and the previous bucket's allreduce is done, on its own stream, without slowing backward. The
  exposed allreduce is what is left after backward ends:
      exposed = max(0, end of the last bucket's allreduce - end of backward)
  so allreduce hides behind backward up to backward's length, and at least the last bucket is
  always exposed. Without overlap: exposed = one allreduce of the whole arena after backward.

  16-bit gradients: b is halved (the allreduce's wire dtype), nothing else changes.

Every input is printed with its origin: "measured" (with where) or "assumed" (with why). The
CPU check (--cpu-profile) predicts every measured train_mnist point from the one-process runs
and the measured allreduce curves, and prints the error beside each.

A GPU scaling profile (--gpu-profile, scripts/scaling_profile.py --mode gpu) replaces the built-in
one-GPU inputs: its one-process run gives the step, optimize, data and L; where it has runs of
several GPUs, its bench_allreduce point at L on the most GPUs of one node gives the intra-node
bandwidth, and every run is predicted from those inputs and the allreduce measured at its own
process count, with the error beside it.

Python 3 standard library only; --plot needs matplotlib.
"""

import argparse
import json
import math
import os
import sys

# --- inputs ----------------------------------------------------------------------------------------

# ResNet-50 on one H200, bfloat16 channels-last, batch 128: bench_resnet's ordinary (unrecorded:
# a step of several processes cannot be recorded) steps measured 6231, 6108 and 6152 img/s in the
# last rounds of 2026-12-02 (docs/performance.md, "After 16-byte coefficient loads").
RESNET50 = {
    "name": "ResNet-50, batch 128 per GPU, bfloat16, channels-last, H200",
    "batch": 128,
    "img_per_s_1gpu": (6231.28 + 6108.41 + 6151.57) / 3,
    "img_per_s_source": "measured: bench_resnet's ordinary steps on one H200, 6231, 6108 and 6152 img/s, "
                        "mean of the three rounds (docs/performance.md, 2026-12-02)",
    # float32 gradients: the MultiNodeOptimizer reduces the float32 master gradients.
    "grad_bytes": 102228128,
    "grad_bytes_source": "measured: ResNet-50's float32 gradient arena (docs/performance.md)",
    "optimize_s": 0.2e-3,
    "optimize_source": "assumed: MomentumSGD over 25.6M float32 masters reads and writes about 0.56 GB; "
                       "at about 3 TB/s of HBM that is 0.2 ms",
    "backward_share": 2.0 / 3.0,
    "backward_source": "assumed: backward takes 2/3 of forward + backward (two products per forward one)",
    "data_s": 0.0,
    "data_source": "assumed: the loader keeps up (docs/performance.md: 16 loader threads deliver 1.8x what "
                   "one H200 consumes), so no wait for data",
}

# NCCL inside a node: 2 H200s, 102228128 bytes in 375.7 us with the hierarchical communicator
# (busbw 272.1 GB/s; raw ncclAllReduce 370.6 us), docs/performance.md, 2026-11-30.
INTRA = {
    "bytes": 102228128,
    "ranks": 2,
    "seconds": 375.7e-6,
    "source": "measured: bench_allreduce, hierarchical, 2 H200s of one node, 102228128 B in 375.7 us "
              "(docs/performance.md, 2026-11-30)",
    "alpha_s": 10e-6,
    "alpha_source": "assumed: 10 us per ring step inside a node (NCCL small-message latency; not measured here)",
    "more_gpus_source": "assumed: 4 and 8 GPUs of one node reach the same bus bandwidth as the measured 2 "
                        "(NVLink through NVSwitch gives each GPU its own links); no 4- or 8-GPU machine was "
                        "available to measure",
}

# The host-staged paths of this build (Open MPI 4.1.6, not CUDA-aware), 102228128 bytes on 2 H200s
# (docs/performance.md, 2026-11-30): hierarchical over 2 virtual nodes 31.2 ms, flat on one node
# 33.1 ms. Each moved 2(p-1)/p b = b bytes per rank, so these are the staged rates of traffic.
STAGE = {
    "hierarchical_Bps": 102228128 / 31.2e-3,
    "flat_Bps": 102228128 / 33.102e-3,
    "source": "measured: bench_allreduce on one H200 host (docs/performance.md, 2026-11-30): the staged "
              "inter-node step (2 virtual nodes) moved 102 MB in 31.2 ms, flat in 33.1 ms; taken as the "
              "ceiling of the staged path over a network too (assumed: its host copies and host reduction "
              "remain when the wire is faster)",
    "shm_alpha_s": 5e-6,
}

# Links for the inter-node step. Only 10 GbE's rate was measured, by ChainerMN's users, not here.
LINKS = [
    {"name": "10 GbE", "Bps": 8.5 * 2**30 / 8, "alpha_s": 25e-6,
     "source": "ChainerMN users' measurement on 10 GbE (reference write-up): MPI point to point 8-9 Gibit/s, "
               "netperf 1119.74 MB/s; 8.5 Gibit/s taken. Latency assumed 25 us (MPI over TCP)"},
    {"name": "25 GbE", "Bps": 25e9 / 8 * 0.91, "alpha_s": 20e-6,
     "source": "assumed: 91% of the line rate (10 GbE's measured share), 20 us latency"},
    {"name": "IB 100 Gb (EDR)", "Bps": 100e9 / 8 * 0.9, "alpha_s": 2e-6,
     "source": "assumed: 90% of the line rate, 2 us latency"},
    {"name": "IB 200 Gb (HDR)", "Bps": 200e9 / 8 * 0.9, "alpha_s": 2e-6,
     "source": "assumed: 90% of the line rate, 2 us latency"},
    {"name": "IB 400 Gb (NDR)", "Bps": 400e9 / 8 * 0.9, "alpha_s": 2e-6,
     "source": "assumed: 90% of the line rate, 2 us latency"},
]

# GPU counts and the layouts (nodes x GPUs per node) predicted for each.
LAYOUTS = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 4), (2, 8), (4, 4)]


# --- the model ---------------------------------------------------------------------------------------

def ring(ranks, nbytes, bandwidth, alpha):
    """Seconds of a ring allreduce of nbytes over ranks: 2(r-1)/r bytes per rank at bandwidth
    bytes/s, plus 2(r-1) steps of latency alpha."""
    if ranks <= 1:
        return 0.0
    return 2.0 * (ranks - 1) / ranks * nbytes / bandwidth + 2.0 * (ranks - 1) * alpha


def intra_bandwidth(intra):
    """Bus bandwidth (bytes/s) of the measured intra-node point, its latency terms taken out."""
    r = intra["ranks"]
    traffic = 2.0 * (r - 1) / r * intra["bytes"]
    rest = intra["seconds"] - 2.0 * (r - 1) * intra["alpha_s"]
    if rest <= 0:
        raise ValueError(f"intra-node point: {intra['seconds']} s is not more than its assumed latency terms")
    return traffic / rest


def allreduce_seconds(comm, nodes, per_node, nbytes, link, intra, stage, staged=True):
    """Seconds of one allreduce of nbytes with comm ("hierarchical" or "flat") on nodes x per_node."""
    b_intra = intra_bandwidth(intra)
    p = nodes * per_node
    if comm == "hierarchical":
        t = ring(per_node, nbytes, b_intra, intra["alpha_s"])
        if nodes > 1:
            bw = min(link["Bps"], stage["hierarchical_Bps"]) if staged else link["Bps"]
            t += ring(nodes, nbytes, bw, link["alpha_s"])
        return t
    if comm == "flat":
        if p <= 1:
            return 0.0
        if nodes > 1:
            bw = min(link["Bps"], stage["flat_Bps"]) if staged else link["Bps"]
            return ring(p, nbytes, bw, link["alpha_s"])
        bw = stage["flat_Bps"] if staged else b_intra
        return ring(p, nbytes, bw, stage["shm_alpha_s"])
    raise ValueError(f"expected communicator 'hierarchical' or 'flat', got {comm!r}")


def exposed_allreduce(backward_s, nbytes, bucket_bytes, reduce_seconds, overlap):
    """Seconds the step waits for the allreduce after backward (see the module's help).

    reduce_seconds(b) gives one allreduce of b bytes."""
    if not overlap:
        return reduce_seconds(nbytes)
    buckets = max(1, math.ceil(nbytes / bucket_bytes))
    done = 0.0   # when the previous bucket's allreduce ended, from the start of backward
    ready = 0
    for i in range(buckets):
        size = min(bucket_bytes, nbytes - i * bucket_bytes)
        ready += size
        start = max(backward_s * ready / nbytes, done)
        done = start + reduce_seconds(size)
    return max(0.0, done - backward_s)


def one_gpu_parts(model):
    """One GPU's step and its forward and backward, in seconds: compute is the step less optimize
    and data, split by backward's share."""
    step1 = model["batch"] / model["img_per_s_1gpu"]
    compute = step1 - model["optimize_s"] - model["data_s"]
    backward = compute * model["backward_share"]
    return step1, compute - backward, backward


def host_link(stage=STAGE):
    """The "link" between virtual nodes of one host: its shared memory, never the limit."""
    return {"name": "one host", "Bps": float("inf"), "alpha_s": stage["shm_alpha_s"]}


def predict_gpu(model, comm, nodes, per_node, link, intra=INTRA, stage=STAGE, overlap=True, half=False,
                bucket_bytes=25 * 2**20, staged=True):
    """Predicted step for one configuration: a dict of seconds per phase, img/s and efficiency."""
    step1, forward, backward = one_gpu_parts(model)
    nbytes = model["grad_bytes"] / (2 if half else 1)
    p = nodes * per_node

    def reduce_seconds(b):
        return allreduce_seconds(comm, nodes, per_node, b, link, intra, stage, staged)

    total = reduce_seconds(nbytes)
    exposed = exposed_allreduce(backward, nbytes, bucket_bytes, reduce_seconds, overlap) if p > 1 else 0.0
    step = model["data_s"] + forward + backward + exposed + model["optimize_s"]
    return {
        "gpus": p, "nodes": nodes, "per_node": per_node, "communicator": comm, "link": link["name"],
        "overlap": overlap, "grad_dtype": "16-bit" if half else "float32", "staged": staged,
        "bytes": nbytes, "forward_s": forward, "backward_s": backward, "allreduce_s": total,
        "exposed_allreduce_s": exposed, "optimize_s": model["optimize_s"], "step_s": step,
        "img_per_s": p * model["batch"] / step, "efficiency": step1 / step,
    }


def predict_all(model=RESNET50, links=LINKS, layouts=LAYOUTS, bucket_bytes=25 * 2**20, intra=INTRA):
    rows = []
    for link in links:
        for nodes, per_node in layouts:
            for comm in ("hierarchical", "flat"):
                for staged in (True, False):
                    for overlap in (False, True):
                        for half in (False, True):
                            rows.append(predict_gpu(model, comm, nodes, per_node, link, intra=intra,
                                                    overlap=overlap, half=half, bucket_bytes=bucket_bytes,
                                                    staged=staged))
    return rows


# --- the CPU check against train_mnist runs -------------------------------------------------------

def interpolate_loglog(points, x):
    """y at x on the piecewise log-log line through points [(x, y)], extended along the end pieces."""
    pts = sorted(points)
    if not pts:
        raise ValueError("expected measured points to interpolate, got none")
    if len(pts) == 1:
        return pts[0][1] * x / pts[0][0]
    for i in range(len(pts) - 1):
        (x0, y0), (x1, y1) = pts[i], pts[i + 1]
        if x <= x1 or i == len(pts) - 2:
            slope = (math.log(y1) - math.log(y0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + slope * (math.log(x) - math.log(x0)))
    return pts[-1][1]


def predict_cpu(profile, cores=None):
    """Predicts each measured train_mnist point of a scaling profile (scripts/scaling_profile.py) from
    its one-process runs and its measured allreduce curves. Returns rows with measured, predicted
    and the relative error of the step time and img/s.

    Per process, the step without its allreduce (data, compute, optimize and what no phase covers)
    is that of one process alone with the same number of threads (the profile's calibration runs;
    p processes get cores / p threads each), times max(1, processes x threads / cores) where the
    processes share cores; the one-process point is predicted from itself (its error is 0 by
    construction). What the model leaves out is what the
    processes do to each other beyond sharing cores (memory bandwidth, caches). The allreduce comes
    from bench_allreduce at the same process count and layout, interpolated at the gradient bytes L."""
    cores = cores or profile["machine"]["cores"]
    runs = profile["runs"]
    one = next((r for r in runs if r["processes"] == 1 and not r.get("threads_override")), None)
    if one is None:
        raise ValueError("expected a one-process run in the profile")
    # One process alone at each thread count measured: the calibration runs, and the one-process run.
    alone = {}
    for r in profile.get("calibration", []) + [one]:
        threads = r.get("threads_per_process") or r.get("threads_override")
        if threads:
            alone.setdefault(threads, r)
    rows = []
    for r in runs:
        p = r["processes"]
        if p == 1:
            base, factor = one, 1.0
        else:
            threads = r.get("threads_per_process") or max(1, cores // p)
            base = alone.get(threads)
            if base is None:
                raise ValueError(f"expected a one-process calibration run at {threads} threads (those of each "
                                 f"process of the {p}-process run); the profile has one-process runs at "
                                 f"{sorted(alone)} threads")
            factor = max(1.0, p * threads / cores)
        # Everything of the one-process step but its allreduce: data, compute, optimize and what no
        # phase covers (the measured iteration's rest).
        alone_ms = (base["step_ms"] - base["phases_ms"].get("allreduce", 0.0)) * factor
        allreduce = 0.0
        if p > 1:
            curve = [(c["bytes"], c["time_us"] / 1e3) for c in profile.get("allreduce", [])
                     if c["processes"] == p and c["comm"] == r["communicator"] and
                     c.get("ranks_per_node") == r.get("ranks_per_node")]
            if not curve:
                raise ValueError(f"expected bench_allreduce points for {p} processes, {r['communicator']}, "
                                 f"ranks per node {r.get('ranks_per_node')}; the profile has none")
            allreduce = interpolate_loglog(curve, r["grad_bytes"])
        step = alone_ms + allreduce
        measured_step = r["step_ms"]
        rows.append({
            "processes": p, "nodes": r["nodes"], "communicator": r["communicator"],
            "measured_step_ms": measured_step, "predicted_step_ms": step,
            "measured_img_per_s": r["img_per_s"], "predicted_img_per_s": p * r["batch"] / step * 1e3,
            "predicted_allreduce_ms": allreduce, "measured_allreduce_ms": r["phases_ms"].get("allreduce", 0.0),
            "error": step / measured_step - 1.0,
        })
    return rows


def measured_gpu_points(model=RESNET50, intra=INTRA, stage=STAGE):
    """The GPU figures measured so far, each with the model's prediction for the same setting:
    (what, measured seconds, predicted seconds). They are the model's own inputs, so the errors
    show only what the latency terms add; they check that the inputs are used as measured."""
    L = model["grad_bytes"]
    host = host_link(stage)
    one = predict_gpu(model, "hierarchical", 1, 1, LINKS[0], intra, stage)
    return [
        ("ResNet-50 step, 1 H200 (bf16, batch 128)", model["batch"] / model["img_per_s_1gpu"], one["step_s"]),
        ("allreduce of L, hierarchical, 2 H200 of one node", 375.7e-6,
         allreduce_seconds("hierarchical", 1, 2, L, host, intra, stage)),
        ("allreduce of L, flat (staged), 2 H200 of one node", 33.102e-3,
         allreduce_seconds("flat", 1, 2, L, host, intra, stage)),
        ("allreduce of L, hierarchical, 2 virtual nodes of 1 H200", 31.2e-3,
         allreduce_seconds("hierarchical", 2, 1, L, host, intra, stage)),
    ]


# --- calibration on a GPU scaling profile ----------------------------------------------------------

def _one_process_run(profile):
    one = next((r for r in profile.get("runs", []) if r["processes"] == 1), None)
    if one is None:
        counts = sorted({r["processes"] for r in profile.get("runs", [])})
        raise ValueError(f"expected a one-process run in the GPU profile, got process counts {counts}")
    return one


def model_from_profile(profile):
    """The one-GPU inputs measured by a GPU scaling profile's one-process run: its steady-state step
    (img/s), optimize and data phases and gradient bytes, and backward's share of compute where
    the run timed compute/forward and compute/backward with synchronized timing. Forward +
    backward is the rest of its step, so a one-process allreduce, if any, is counted there."""
    one = _one_process_run(profile)
    phases = one["phases_ms"]
    what = f"the scaling profile's one-GPU run {profile.get('label', '')}".rstrip()
    repeats = one.get("repeats_img_per_s")
    model = dict(RESNET50)
    model.update({
        "name": f"{profile.get('label', 'profiled model').strip('()')}, batch {one['batch']} per GPU",
        "batch": one["batch"],
        "img_per_s_1gpu": one["img_per_s"],
        "img_per_s_source": f"measured: {what}" + (f", median of {repeats} img/s" if repeats else ""),
        "grad_bytes": one["grad_bytes"],
        "grad_bytes_source": f"measured: {what}",
        "optimize_s": phases.get("optimize", 0.0) / 1e3,
        "optimize_source": f"measured: {what}, its optimize phase",
        "data_s": phases.get("data", 0.0) / 1e3,
        "data_source": f"measured: {what}, its data phase",
    })
    # Backward's share of compute, where the profile timed forward and backward on the device
    # (synchronized timing; without it, a GPU's sub-phases are the host's queueing).
    forward, backward = phases.get("compute/forward", 0.0), phases.get("compute/backward", 0.0)
    if profile.get("timing") == "synchronized" and forward > 0 and backward > 0:
        model["backward_share"] = backward / (forward + backward)
        model["backward_source"] = (f"measured: {what}, compute/backward {backward:.2f} ms of forward + backward "
                                    f"{forward + backward:.2f} ms")
    return model


def _curve(profile, processes, comm, ranks_per_node):
    return [(c["bytes"], c["time_us"] * 1e-6) for c in profile.get("allreduce", [])
            if c["processes"] == processes and c["comm"] == comm and c.get("ranks_per_node") == ranks_per_node]


def intra_from_profile(profile, comm="hierarchical", default=INTRA):
    """The intra-node point measured by the profile: its bench_allreduce of L on the most GPUs of one
    node. Without runs of several GPUs, the built-in point (default)."""
    L = _one_process_run(profile)["grad_bytes"]
    counts = sorted({c["processes"] for c in profile.get("allreduce", [])
                     if c["comm"] == comm and c.get("ranks_per_node") is None and c["bytes"] == L})
    if not counts:
        return default
    p = counts[-1]
    seconds = next(t for b, t in _curve(profile, p, comm, None) if b == L)
    return dict(default, bytes=L, ranks=p, seconds=seconds,
                source=f"measured: the scaling profile's bench_allreduce, {comm}, {p} GPUs of one node, "
                       f"{L} B in {seconds * 1e6:.1f} us",
                more_gpus_source=f"assumed: more GPUs of one node than {p} reach the same bus bandwidth")


def predict_gpu_profile(profile, model, bucket_bytes=25 * 2**20, tolerance=0.10):
    """Predicts each run of a GPU scaling profile from the model's one-GPU inputs and, for several
    processes, the allreduce bench_allreduce measured at the same process count and layout
    (interpolated in log-log at each bucket's bytes; the alpha-beta formula of the built-in
    intra-node point where the profile has no curve). Rows carry the error and whether it is
    within tolerance."""
    step1, _, backward = one_gpu_parts(model)
    host = host_link()
    rows = []
    for r in profile["runs"]:
        p, nodes = r["processes"], r.get("nodes", 1)
        comm = r["communicator"]
        curve = _curve(profile, p, comm, r.get("ranks_per_node"))
        if p <= 1:
            def reduce_seconds(b):
                return 0.0
            origin = "none (one process)"
        elif curve:
            def reduce_seconds(b, curve=curve):
                return interpolate_loglog(curve, b)
            origin = "measured curve"
        else:
            per_node = max(1, p // max(1, nodes))
            def reduce_seconds(b, nodes=nodes, per_node=per_node, comm=comm):
                return allreduce_seconds(comm if comm in ("hierarchical", "flat") else "hierarchical",
                                         nodes, per_node, b, host, INTRA, STAGE)
            origin = "model"
        L = r["grad_bytes"]
        exposed = exposed_allreduce(backward, L, bucket_bytes, reduce_seconds, bool(profile.get("overlap")))
        step = step1 + exposed
        measured = r["step_ms"] / 1e3
        error = step / measured - 1.0
        rows.append({
            "processes": p, "nodes": nodes, "communicator": comm, "allreduce_from": origin,
            "measured_step_ms": measured * 1e3, "predicted_step_ms": step * 1e3,
            "measured_img_per_s": r["img_per_s"], "predicted_img_per_s": p * model["batch"] / step,
            "measured_allreduce_ms": r["phases_ms"].get("allreduce", 0.0), "predicted_allreduce_ms": exposed * 1e3,
            "error": error, "within_tolerance": abs(error) <= tolerance,
        })
    return rows


# --- output --------------------------------------------------------------------------------------------

def print_inputs(out=None, model=RESNET50, intra=INTRA):
    out = out or sys.stdout
    print(f"Inputs for {model['name']} (measured = measured, with where; assumed = not measurable here):",
          file=out)
    m = model
    print(f"  one-GPU step: {m['batch']} / {m['img_per_s_1gpu']:.0f} img/s = "
          f"{m['batch'] / m['img_per_s_1gpu'] * 1e3:.2f} ms  [{m['img_per_s_source']}]", file=out)
    print(f"  gradient bytes L = {m['grad_bytes']}  [{m['grad_bytes_source']}]", file=out)
    print(f"  optimize {m['optimize_s'] * 1e3:.2f} ms  [{m['optimize_source']}]", file=out)
    print(f"  backward share {m['backward_share']:.2f}  [{m['backward_source']}]", file=out)
    print(f"  data {m['data_s'] * 1e3:.2f} ms  [{m['data_source']}]", file=out)
    print(f"  intra-node bus bandwidth {intra_bandwidth(intra) / 1e9:.1f} GB/s  [{intra['source']}; "
          f"{intra['alpha_source']}; {intra['more_gpus_source']}]", file=out)
    print(f"  staged inter-node ceiling {STAGE['hierarchical_Bps'] / 1e9:.2f} GB/s (hierarchical), "
          f"{STAGE['flat_Bps'] / 1e9:.2f} GB/s (flat)  [{STAGE['source']}]", file=out)
    for link in LINKS:
        print(f"  {link['name']}: {link['Bps'] / 1e9:.2f} GB/s, {link['alpha_s'] * 1e6:.0f} us  "
              f"[{link['source']}]", file=out)


def print_measured_gpu_points(out=None):
    out = out or sys.stdout
    print("\nMeasured GPU points (performance.md) and the model's prediction of each:", file=out)
    for what, measured, predicted in measured_gpu_points():
        print(f"  {what:<58} measured {measured * 1e3:9.3f} ms  predicted {predicted * 1e3:9.3f} ms  "
              f"error {(predicted / measured - 1) * 100:+5.1f}%", file=out)


def pick(rows, **want):
    return [r for r in rows if all(r[k] == v for k, v in want.items())]


def print_predictions(rows, out=None, model=RESNET50):
    out = out or sys.stdout
    print(f"\nPredicted efficiency (step time on 1 GPU / step time on p GPUs), {model['name']},", file=out)
    print("hierarchical communicator, inter-node step staged through host memory as this build does "
          "(unstaged in brackets: CUDA-aware MPI):", file=out)
    layouts = [(n, g) for n, g in LAYOUTS]
    head = "link".ljust(18) + "".join(f"{f'{n}x{g}':>15}" for n, g in layouts)
    for overlap, half in ((False, False), (True, False), (True, True)):
        print(f"\n  overlap {'on' if overlap else 'off'}, {'16-bit' if half else 'float32'} gradients", file=out)
        print("  " + head, file=out)
        for link in LINKS:
            cells = []
            for n, g in layouts:
                s = pick(rows, link=link["name"], nodes=n, per_node=g, communicator="hierarchical",
                         overlap=overlap, grad_dtype="16-bit" if half else "float32", staged=True)[0]
                u = pick(rows, link=link["name"], nodes=n, per_node=g, communicator="hierarchical",
                         overlap=overlap, grad_dtype="16-bit" if half else "float32", staged=False)[0]
                cells.append(f"{s['efficiency']:.2f} [{u['efficiency']:.2f}]")
            print("  " + link["name"].ljust(18) + "".join(f"{c:>15}" for c in cells), file=out)
    print("\n  flat communicator, overlap on, float32 gradients (staged [unstaged])", file=out)
    print("  " + head, file=out)
    for link in LINKS:
        cells = []
        for n, g in layouts:
            s = pick(rows, link=link["name"], nodes=n, per_node=g, communicator="flat", overlap=True,
                     grad_dtype="float32", staged=True)[0]
            u = pick(rows, link=link["name"], nodes=n, per_node=g, communicator="flat", overlap=True,
                     grad_dtype="float32", staged=False)[0]
            cells.append(f"{s['efficiency']:.2f} [{u['efficiency']:.2f}]")
        print("  " + link["name"].ljust(18) + "".join(f"{c:>15}" for c in cells), file=out)


def print_gpu_check(rows, out=None):
    out = out or sys.stdout
    print("\nGPU check: the profile's runs measured against predicted (step time; allreduce: the exposed part)",
          file=out)
    print(f"  {'processes':>9} {'nodes':>5} {'comm':>13} {'measured ms':>12} {'predicted ms':>13} {'error':>7} "
          f"{'within 10%':>10} {'meas. img/s':>12} {'pred. img/s':>12} {'allreduce ms meas/pred':>23}  allreduce from",
          file=out)
    for r in rows:
        print(f"  {r['processes']:>9} {r['nodes']:>5} {r['communicator']:>13} {r['measured_step_ms']:>12.2f} "
              f"{r['predicted_step_ms']:>13.2f} {r['error'] * 100:>6.1f}% {'yes' if r['within_tolerance'] else 'NO':>10} "
              f"{r['measured_img_per_s']:>12.0f} {r['predicted_img_per_s']:>12.0f} "
              f"{r['measured_allreduce_ms']:>11.2f} / {r['predicted_allreduce_ms']:<9.2f}  {r['allreduce_from']}",
              file=out)


def print_cpu_check(rows, out=None):
    out = out or sys.stdout
    print("\nCPU check: train_mnist measured against predicted (per-process step time)", file=out)
    print(f"  {'processes':>9} {'nodes':>5} {'comm':>13} {'measured ms':>12} {'predicted ms':>13} {'error':>7} "
          f"{'meas. img/s':>12} {'pred. img/s':>12} {'allreduce ms meas/pred':>23}", file=out)
    for r in rows:
        print(f"  {r['processes']:>9} {r['nodes']:>5} {r['communicator']:>13} {r['measured_step_ms']:>12.2f} "
              f"{r['predicted_step_ms']:>13.2f} {r['error'] * 100:>6.1f}% {r['measured_img_per_s']:>12.0f} "
              f"{r['predicted_img_per_s']:>12.0f} {r['measured_allreduce_ms']:>11.2f} / "
              f"{r['predicted_allreduce_ms']:<9.2f}", file=out)


def plot(rows, path, model=RESNET50):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from scaling_profile import ensure_matplotlib  # the same import, install and message
    if not ensure_matplotlib():
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, staged in zip(axes, (True, False)):
        layouts = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 4), (2, 8), (4, 4)]
        for link in LINKS:
            effs = [pick(rows, link=link["name"], nodes=n, per_node=g, communicator="hierarchical", overlap=True,
                         grad_dtype="float32", staged=staged)[0]["efficiency"] for n, g in layouts]
            ax.plot(range(len(layouts)), effs, marker="o", label=link["name"])
        ax.set_xticks(range(len(layouts)))
        ax.set_xticklabels([f"{n * g}\n{n}x{g}" for n, g in layouts])
        ax.axvline(3.5, color="k", lw=0.8, ls=":")
        ax.set_xlabel("GPUs, nodes x GPUs per node (left of the line: one node)")
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.set_title("staged inter-node step (this build)" if staged else "unstaged (CUDA-aware MPI)")
    axes[0].set_ylabel("predicted scaling efficiency")
    axes[1].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"{model['name']}: hierarchical, overlap on, float32 gradients (model)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description="Predict data-parallel step time and efficiency (alpha-beta model).")
    parser.add_argument("--cpu-profile", help="scaling_profile.json of train_mnist runs to predict and compare")
    parser.add_argument("--cores", type=int, help="cores of the machine the CPU profile ran on (default: its record)")
    parser.add_argument("--gpu-profile", help="scaling_profile.json of --mode gpu: calibrate on it and check its runs")
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="gradient bucket size for overlap (MiB)")
    parser.add_argument("--json", help="write every prediction here")
    parser.add_argument("--plot", help="write the efficiency plot (PNG) here")
    args = parser.parse_args(argv)
    if args.bucket_mb <= 0:
        print(f"cost_model: expected --bucket-mb above 0, got {args.bucket_mb}", file=sys.stderr)
        return 2
    bucket_bytes = int(args.bucket_mb * 2**20)
    model, intra, gpu_profile = RESNET50, INTRA, None
    if args.gpu_profile:
        try:
            with open(args.gpu_profile, encoding="utf-8") as f:
                gpu_profile = json.load(f)
            model, intra = model_from_profile(gpu_profile), intra_from_profile(gpu_profile)
            gpu_check = predict_gpu_profile(gpu_profile, model, bucket_bytes)
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"cost_model: cannot calibrate on {args.gpu_profile}: {e}", file=sys.stderr)
            return 2
    rows = predict_all(model, bucket_bytes=bucket_bytes, intra=intra)
    print_inputs(model=model, intra=intra)
    if gpu_profile is None:
        print_measured_gpu_points()
    else:
        print_gpu_check(gpu_check)
    print_predictions(rows, model=model)
    result = {"inputs": {"model": model, "intra": intra, "stage": STAGE, "links": LINKS,
                         "bucket_bytes": bucket_bytes}, "predictions": rows}
    if gpu_profile is not None:
        result["gpu_check"] = gpu_check
    if args.cpu_profile:
        try:
            with open(args.cpu_profile, encoding="utf-8") as f:
                profile = json.load(f)
            cpu = predict_cpu(profile, args.cores)
        except (OSError, ValueError, KeyError) as e:
            print(f"cost_model: cannot check {args.cpu_profile}: {e}", file=sys.stderr)
            return 2
        print_cpu_check(cpu)
        result["cpu_check"] = cpu
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    if args.plot:
        plot(rows, args.plot, model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
