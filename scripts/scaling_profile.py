#!/usr/bin/env python3
"""Scaling profile: one model at 1, 2, 4, ... processes, the table ChainerMN's users made by hand.

    # CPU: train_mnist on Fashion-MNIST, plus two virtual nodes at 4 processes
    python3 scripts/scaling_profile.py --mode cpu --procs 1,2,4 --virtual-nodes 2 --out /tmp/scaling
    # GPU: ResNet-50 on synthetic data (train_imagenet --synthetic), on 1, 2, 4, ... up to every GPU
    python3 scripts/scaling_profile.py --mode gpu --out /tmp/scaling-gpu
    # the same with the allreduce overlapped with backward, in float32
    python3 scripts/scaling_profile.py --mode gpu --overlap --dtype fp32 --out /tmp/scaling-gpu-overlap
    # the table and plots again from a profile already measured
    python3 scripts/scaling_profile.py --from /tmp/scaling/scaling_profile.json

For every process count it runs the example under mpiexec (--bind-to none, --oversubscribe),
reads the phase_summary.json its PhaseSummary extension writes into the -o folder, runs
bench_allreduce at that process count (the same layout) and bench_p2p once, and then:

- writes everything into <out>/scaling_profile.json;
- prints the table: processes, nodes, img/s, speedup, efficiency, data / compute / prepare /
  exposed allreduce / optimize ms, L, 2L(p-1)/p, the allreduce's achieved bandwidth of that
  traffic and the point-to-point bandwidth of the link at a message of L bytes (bench_p2p);
- draws PNG plots into <out>: throughput and efficiency against processes, the phases stacked per
  process count, allreduce bus bandwidth against message size, point-to-point bandwidth against
  message size (matplotlib; installed with apt-get when missing and run as root).

img/s is the steady state: processes x batch / (the mean measured iteration, first iteration left
out; the sum of the top-level phase means for summaries without one); the end-to-end rate
(iterations over training seconds) is in the JSON too. --repeats N runs each point N times,
alternating process counts, and keeps the median.
On GPUs the examples run with --sync-timing (--timing): each phase then ends when the device has
done its work, so the phases add up to the step; timed without waiting, a phase is only the time
to queue its kernels and the sum falls short of the step.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --- parsers of the benchmarks' output ----------------------------------------------------------


def parse_allreduce_summary(text):
    """bench_allreduce's closing "summary comm=... bytes=... time_us=... algbw=... busbw=..." lines."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("summary "):
            continue
        fields = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
        try:
            rows.append({"comm": fields["comm"], "bytes": int(fields["bytes"]), "time_us": float(fields["time_us"]),
                         "algbw_gbps": float(fields["algbw"]), "busbw_gbps": float(fields["busbw"]),
                         "wrong": int(fields["wrong"])})
        except (KeyError, ValueError) as e:
            raise ValueError(f"bench_allreduce: expected 'summary comm=.. bytes=.. time_us=.. algbw=.. busbw=.. "
                             f"wrong=..', got '{line}' ({e})") from None
    return rows


def parse_osu(text):
    """bench_p2p's OSU-format sections: [{"kind": "Bandwidth"|"Latency", "what": ..., "unit": ...,
    "points": [(bytes, value)]}]."""
    sections = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"# OSU MPI (Bandwidth|Latency) Test", lines[i])
        if m and i + 2 < len(lines):
            what = lines[i + 1].lstrip("# ").strip()
            unit = re.sub(r"^#\s*Size\s*", "", lines[i + 2]).strip()
            section = {"kind": m.group(1), "what": what, "unit": unit, "points": []}
            i += 3
            while i < len(lines) and re.match(r"^\d+\s+[0-9.]+\s*$", lines[i]):
                size, value = lines[i].split()
                section["points"].append((int(size), float(value)))
                i += 1
            sections.append(section)
            continue
        i += 1
    return sections


def bandwidth_at(section, nbytes):
    """The bandwidth (MB/s) at the largest measured size not above nbytes (or the smallest)."""
    pts = sorted(section["points"])
    below = [v for s, v in pts if s <= nbytes]
    return below[-1] if below else pts[0][1]


# --- one run ---------------------------------------------------------------------------------------------


def run_point(summary, batch, processes, communicator, ranks_per_node=None, threads_override=None):
    """One profile row from a phase_summary.json (a dict) of a run with this shape. The step is the
    measured iteration where the summary has one (the training loop's whole update), else the sum
    of the top-level phases."""
    phases = {p["name"]: p["mean_s"] * 1e3 for p in summary["phases"]}
    top = sum(v for k, v in phases.items() if "/" not in k)
    if top <= 0:
        raise ValueError("phase_summary.json: expected positive phase times, got none")
    iteration_ms = (summary.get("iteration") or {}).get("mean_s", 0.0) * 1e3
    step = iteration_ms if iteration_ms > 0 else top
    iters = summary.get("training_iterations", 0)
    seconds = summary.get("training_seconds", 0.0)
    L = summary["allreduce_bytes"]
    allreduce_ms = phases.get("allreduce", 0.0)
    transfer_ms = phases.get("allreduce/total", allreduce_ms)
    traffic = summary.get("traffic_bytes", 2.0 * L * (processes - 1) / processes)
    return {
        "processes": processes,
        "nodes": summary.get("nodes", 1),
        "ranks_per_node": ranks_per_node,
        "threads_override": threads_override,
        "threads_per_process": summary.get("threads_per_process"),
        "communicator": communicator,
        "batch": batch,
        "phases_ms": phases,
        "phases_sum_ms": top,
        "step_ms": step,
        "img_per_s": processes * batch / step * 1e3,
        "img_per_s_end_to_end": processes * batch * iters / seconds if seconds > 0 else None,
        "grad_bytes": L,
        "traffic_bytes": traffic,
        # The rate the allreduce's 2L(p-1)/p bytes per rank moved at: over its time, which with the
        # allreduce overlapped with backward is all of the buckets' ("allreduce/total"), not the
        # exposed part the step waited for.
        "achieved_gbps": traffic / (transfer_ms / 1e3) / 1e9 if transfer_ms > 0 and processes > 1 else None,
        "busbw_gbps": summary.get("busbw_gbps"),
    }


def median_point(points):
    """The run whose img/s is the median of the repeats (a real run, not a mix of runs)."""
    ordered = sorted(points, key=lambda r: r["img_per_s"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["repeats_img_per_s"] = [round(r["img_per_s"], 2) for r in points]
    return chosen


# --- the table ------------------------------------------------------------------------------------------


def table(profile):
    runs = profile["runs"]
    base = next((r for r in runs if r["processes"] == 1), None)
    link = profile.get("link")
    head = (f"{'procs':>5} {'nodes':>5} {'img/s':>9} {'speedup':>8} {'effic.':>7} {'data':>7} {'compute':>8} "
            f"{'prep.':>7} {'allred.':>8} {'optim.':>7} {'L MB':>7} {'2L(p-1)/p':>10} {'achieved':>9} {'link':>9} "
            f"{'share':>6}")
    lines = [head, f"{'':>5} {'':>5} {'':>9} {'':>8} {'':>7} {'ms':>7} {'ms':>8} {'ms':>7} {'ms':>8} {'ms':>7} "
                   f"{'':>7} {'MB':>10} {'GB/s':>9} {'GB/s':>9} {'':>6}"]
    for r in runs:
        speed = r["img_per_s"] / base["img_per_s"] if base else float("nan")
        eff = speed / r["processes"]
        ph = r["phases_ms"]
        link_gbps = None
        if link and r["processes"] > 1:
            link_gbps = bandwidth_at(link, r["grad_bytes"]) / 1e3
        achieved = r.get("achieved_gbps")
        lines.append(
            f"{r['processes']:>5} {r['nodes']:>5} {r['img_per_s']:>9.1f} {speed:>8.2f} {eff:>7.2f} "
            f"{ph.get('data', 0.0):>7.2f} {ph.get('compute', 0.0):>8.2f} {ph.get('prepare', 0.0):>7.2f} "
            f"{ph.get('allreduce', 0.0):>8.2f} "
            f"{ph.get('optimize', 0.0):>7.2f} {r['grad_bytes'] / 1e6:>7.2f} {r['traffic_bytes'] / 1e6:>10.2f} "
            f"{achieved if achieved else 0.0:>9.2f} {link_gbps if link_gbps else 0.0:>9.2f} "
            f"{(achieved / link_gbps if achieved and link_gbps else 0.0):>6.2f}")
    notes = ["img/s: steady state (processes x batch / mean iteration, first iteration left out); "
             "data: waiting for the batch; prep.: the gradients' preparation (master gradients, non-finite "
             "check); allreduce: the part of it the step waited for"]
    short = [r["processes"] for r in runs if r.get("phases_sum_ms", r["step_ms"]) < 0.9 * r["step_ms"]]
    if short:
        notes.append(f"the phases cover less than 90% of the iteration at {short} processes: on a GPU, time the "
                     f"phases with --timing synchronized")
    if link:
        notes.append(f"link: bench_p2p '{link['what']}' at the largest size <= L")
    return "\n".join(lines + notes)


# --- plots ------------------------------------------------------------------------------------------------


DEBIAN_PACKAGES = "/usr/lib/python3/dist-packages"


def import_matplotlib():
    """Whether matplotlib imports, looking also where Debian installs it: a python3 from a version
    manager earlier on the PATH does not search there."""
    for extra in ([], [DEBIAN_PACKAGES]):
        if extra and (extra[0] in sys.path or not os.path.isdir(extra[0])):
            continue
        sys.path.extend(extra)
        try:
            import matplotlib  # noqa: F401
            return True
        except ImportError:
            pass
    return False


def ensure_matplotlib():
    """Imports matplotlib, installing Debian's python3-matplotlib first when it is missing and this
    runs as root with apt-get (a second run finds it installed and does nothing)."""
    if import_matplotlib():
        return True
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        print("scaling_profile: installing python3-matplotlib with apt-get", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-q", "python3-matplotlib"], env=env, check=False,
                       stdout=subprocess.DEVNULL)
        if DEBIAN_PACKAGES in sys.path:
            sys.path.remove(DEBIAN_PACKAGES)
        if import_matplotlib():
            return True
    print("scaling_profile: matplotlib is missing (apt-get install python3-matplotlib); no plots", file=sys.stderr)
    return False


def plot(profile, out):
    if not ensure_matplotlib():
        return []
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    written = []
    runs = profile["runs"]
    base = next((r for r in runs if r["processes"] == 1), None)
    label = profile.get("label", "")

    def save(fig, name):
        path = os.path.join(out, name)
        fig.tight_layout()
        fig.savefig(path, dpi=80)
        plt.close(fig)
        written.append(path)

    xs = [f"{r['processes']}" + (f"\n({r['nodes']} nodes)" if r["nodes"] > 1 else "") for r in runs]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(range(len(runs)), [r["img_per_s"] for r in runs], marker="o", color="tab:blue", label="img/s")
    if base:
        ax.plot(range(len(runs)), [base["img_per_s"] * r["processes"] for r in runs], ls="--", color="tab:blue",
                alpha=0.4, label="linear")
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels(xs)
    ax.set_xlabel("processes")
    ax.set_ylabel("img/s (all processes)")
    if base:
        ax2 = ax.twinx()
        effs = [r["img_per_s"] / base["img_per_s"] / r["processes"] for r in runs]
        ax2.plot(range(len(runs)), effs, marker="s", color="tab:red", label="efficiency")
        ax2.set_ylim(0, max(1.1, 1.1 * max(effs)))
        ax2.set_ylabel("efficiency", color="tab:red")
    ax.legend(loc="upper left")
    ax.set_title(f"throughput and efficiency {label}")
    save(fig, "throughput.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    bottom = [0.0] * len(runs)
    for phase, color in (("data", "tab:gray"), ("compute", "tab:blue"), ("prepare", "tab:purple"),
                         ("allreduce", "tab:red"), ("optimize", "tab:green")):
        vals = [r["phases_ms"].get(phase, 0.0) for r in runs]
        ax.bar(range(len(runs)), vals, bottom=bottom, label=phase, color=color)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels(xs)
    ax.set_xlabel("processes")
    ax.set_ylabel("ms per iteration (mean over ranks)")
    ax.legend()
    ax.set_title(f"phases per iteration {label}")
    save(fig, "phases.png")

    if profile.get("allreduce"):
        fig, ax = plt.subplots(figsize=(6, 4))
        keys = sorted({(c["processes"], c["comm"], c.get("ranks_per_node") or 0) for c in profile["allreduce"]})
        for p, comm, rpn in keys:
            pts = sorted((c["bytes"], c["busbw_gbps"]) for c in profile["allreduce"]
                         if (c["processes"], c["comm"], c.get("ranks_per_node") or 0) == (p, comm, rpn))
            ax.plot([b for b, _ in pts], [v for _, v in pts], marker=".",
                    label=f"{comm}, {p} procs" + (f", {rpn}/node" if rpn else ""))
        grad = runs[-1]["grad_bytes"] if runs else None
        if grad:
            ax.axvline(grad, color="k", ls=":", label="L (gradient bytes)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.legend(fontsize=7)
        ax.set_title("allreduce bus bandwidth (bench_allreduce)")
        save(fig, "allreduce_bandwidth.png")

    if profile.get("p2p"):
        fig, ax = plt.subplots(figsize=(6, 4))
        for s in profile["p2p"]:
            if s["kind"] != "Bandwidth":
                continue
            pts = sorted(s["points"])
            ax.plot([b for b, _ in pts], [v / 1e3 for _, v in pts], marker=".", label=s["what"])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("bandwidth (GB/s)")
        ax.legend(fontsize=7)
        ax.set_title("point to point (bench_p2p)")
        save(fig, "p2p_bandwidth.png")
    return written


# --- measuring --------------------------------------------------------------------------------------------


def mpiexec(processes, env_extra):
    cmd = ["mpiexec", "-n", str(processes), "--oversubscribe", "--bind-to", "none"]
    for k in env_extra:
        cmd += ["-x", k]
    return cmd


def run(cmd, env_extra, log):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env_extra)
    print("+ " + " ".join(f"{k}={v}" for k, v in env_extra.items()) + (" " if env_extra else "") + " ".join(cmd),
          file=sys.stderr, flush=True)
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    with open(log, "a", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n" + result.stdout + result.stderr + "\n")
    if result.returncode != 0:
        raise RuntimeError(f"expected exit status 0 from '{' '.join(cmd)}', got {result.returncode}; its output is "
                           f"in {log}:\n{(result.stdout + result.stderr)[-2000:]}")
    return result.stdout


def calibration_threads(procs, cores):
    """Thread counts of the one-process calibration runs on a CPU: one thread, and the count each
    process of a larger run gets (cores / processes, dpl's default), so that the cost model
    (cost_model.py) takes each process's compute from one process alone at the same count. The
    one-process run itself has every core."""
    counts = {1} | {max(1, cores // p) for p in procs if p > 1}
    return sorted(counts - {cores})


def gpu_count():
    if not shutil.which("nvidia-smi"):
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def measure(args):
    build = os.path.abspath(args.build)
    os.makedirs(args.out, exist_ok=True)
    log = os.path.join(args.out, "commands.log")
    cores = os.cpu_count() or 1
    gpus = gpu_count()
    if args.mode == "gpu":
        if gpus == 0:
            raise RuntimeError("--mode gpu: expected nvidia-smi to list GPUs, found none")
        procs = [p for p in (1, 2, 4, 8, 16, 32) if p <= gpus]
        if procs[-1] != gpus:
            procs.append(gpus)
    else:
        procs = [int(p) for p in args.procs.split(",")]
    batch = args.batch or (128 if args.mode == "gpu" else 100)
    # On a GPU a phase timed without waiting for the device is the time to queue its kernels.
    timing = args.timing or ("synchronized" if args.mode == "gpu" else "non-intrusive")
    points = []  # (processes, ranks_per_node, threads_override)
    for p in procs:
        points.append((p, None, None))
        # The same count as --virtual-nodes nodes: the inter-node code path on one machine.
        if args.virtual_nodes > 1 and p >= args.virtual_nodes and p % args.virtual_nodes == 0:
            points.append((p, p // args.virtual_nodes, None))
    calibration = [(1, None, t) for t in calibration_threads(procs, cores)] if args.mode == "cpu" else []

    runs, cal = {}, {}
    for rep in range(args.repeats):
        # Alternating the process counts within each repeat spreads the machine's drift over all.
        for p, rpn, threads in points + calibration:
            env = {}
            if rpn:
                env["DPL_RANKS_PER_NODE"] = str(rpn)
            if threads:
                env["DPL_NUM_THREADS"] = str(threads)
            tag = f"p{p}" + (f"_rpn{rpn}" if rpn else "") + (f"_t{threads}" if threads else "") + f"_r{rep}"
            folder = os.path.join(args.out, "runs", tag)
            summary_path = os.path.join(folder, "phase_summary.json")
            if args.reuse and os.path.exists(summary_path):
                print(f"reusing {summary_path}", file=sys.stderr)
                with open(summary_path, encoding="utf-8") as f:
                    summary = json.load(f)
                point = run_point(summary, batch, p, args.communicator, rpn, threads)
                (cal if threads else runs).setdefault((p, rpn, threads), []).append(point)
                continue
            shutil.rmtree(folder, ignore_errors=True)
            if args.mode == "cpu":
                cmd = mpiexec(p, env) + [os.path.join(build, "examples", "mnist", "train_mnist"), "-e",
                                         str(args.epochs), "-b", str(batch), "--communicator", args.communicator,
                                         "-o", folder] + (["--data", args.data] if args.data else [])
            else:
                cmd = mpiexec(p, env) + [os.path.join(build, "examples", "imagenet", "train_imagenet"), "--synthetic",
                                         "-g", "-a", "resnet50", "-B", str(batch), "-E", str(args.epochs),
                                         "--dtype", args.dtype, "--layout", "nhwc", "--communicator",
                                         args.communicator, "-o", folder]
            if timing == "synchronized":
                cmd.append("--sync-timing")
            if args.trace:
                cmd.append("--trace")
            if args.overlap:
                cmd.append("--overlap")
            run(cmd, env, log)
            with open(summary_path, encoding="utf-8") as f:
                summary = json.load(f)
            point = run_point(summary, batch, p, args.communicator, rpn, threads)
            # Other work on the machine shows in the figures; the load says how much there was.
            point["load_average"] = round(os.getloadavg()[0], 2)
            (cal if threads else runs).setdefault((p, rpn, threads), []).append(point)

    allreduce = []
    bench_ar = os.path.join(build, "benchmarks", "bench_allreduce")
    grad = next(iter(runs.values()))[0]["grad_bytes"]
    for p, rpn, _ in points:
        if p < 2:
            continue
        env = {"DPL_RANKS_PER_NODE": str(rpn)} if rpn else {}
        comms = sorted({args.communicator, "flat"})
        out = run(mpiexec(p, env) + [bench_ar, "-b", args.allreduce_min, "-e", args.allreduce_max, "-f", "2",
                                     "--sizes", str(grad), "-n", "20", "-w", "3", "-c", "0",
                                     "--comm", ",".join(comms)], env, log)
        for row in parse_allreduce_summary(out):
            row.update(processes=p, ranks_per_node=rpn)
            allreduce.append(row)
    if args.mode == "gpu" and gpus < 2:
        # Two ranks would share the one GPU, which NCCL refuses; one GPU has no link to measure.
        print("scaling_profile: one GPU: bench_p2p not run (no link between GPUs)", file=sys.stderr)
        p2p = []
    else:
        p2p = parse_osu(run(mpiexec(2, {}) + [os.path.join(build, "benchmarks", "bench_p2p"), "--max-bytes",
                                             args.p2p_max], {}, log))

    label = "(train_mnist, CPU" if args.mode == "cpu" else f"(ResNet-50 synthetic {args.dtype}, GPU"
    label += ", overlap)" if args.overlap else ")"
    profile = {
        "label": label,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "mode": args.mode,
        "overlap": args.overlap,
        "timing": timing,
        "machine": {"cores": cores, "gpus": gpus},
        "runs": [median_point(v) for _, v in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))],
        "calibration": [median_point(v) for v in cal.values()],
        "allreduce": allreduce,
        "p2p": p2p,
    }
    # The link the allreduce runs over: host MPI on CPUs; on GPUs NCCL's send/recv where the build
    # has it (NVLink inside a node), else the staged device path.
    wanted = ["NCCL", "device"] if args.mode == "gpu" else ["host memory"]
    bandwidth = [s for s in p2p if s["kind"] == "Bandwidth"]
    profile["link"] = next((s for w in wanted for s in bandwidth if w in s["what"]), None) or \
        next(iter(bandwidth), None)
    return profile


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run a model at 1, 2, 4, ... processes and tabulate its scaling.")
    parser.add_argument("--mode", choices=["cpu", "gpu"], default="cpu",
                        help="cpu: train_mnist; gpu: train_imagenet --synthetic ResNet-50 on every GPU count")
    parser.add_argument("--procs", default="1,2,4", help="process counts for --mode cpu")
    parser.add_argument("--virtual-nodes", type=int, default=0,
                        help="also run each count it divides as this many virtual nodes (DPL_RANKS_PER_NODE)")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"), help="the build folder")
    parser.add_argument("--data", help="Fashion-MNIST folder for train_mnist (its default otherwise)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs per run (gpu: 100 synthetic batches each)")
    parser.add_argument("-b", "--batch", type=int, help="batch per process (default 100 cpu, 128 gpu)")
    parser.add_argument("--communicator", default="hierarchical")
    parser.add_argument("--repeats", type=int, default=1, help="runs per point; the median is kept")
    parser.add_argument("--trace", action="store_true", help="also write per-rank traces (--trace) in each run")
    parser.add_argument("--overlap", action="store_true",
                        help="average the gradients bucket by bucket during backward (the examples' --overlap)")
    parser.add_argument("--timing", choices=["synchronized", "non-intrusive"],
                        help="the examples' phase timing (--sync-timing when synchronized); default: synchronized "
                             "on GPUs, where a phase not waited for measures only the queueing of its kernels, "
                             "non-intrusive on CPUs")
    parser.add_argument("--dtype", choices=["bf16", "fp32", "fp16"], default="bf16",
                        help="--mode gpu: train_imagenet's compute dtype")
    parser.add_argument("--allreduce-min", default="64K")
    parser.add_argument("--allreduce-max", default="32M")
    parser.add_argument("--p2p-max", default=str(64 << 20), help="bench_p2p's largest message, in bytes")
    parser.add_argument("--out", default="/tmp/scaling", help="folder for runs, JSON and plots")
    parser.add_argument("--from", dest="source", help="print and plot a scaling_profile.json, measuring nothing")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--reuse", action="store_true",
                        help="take the runs whose phase_summary.json is already in --out instead of running them")
    args = parser.parse_args(argv)
    try:
        if args.source:
            with open(args.source, encoding="utf-8") as f:
                profile = json.load(f)
            out = args.out if args.out != "/tmp/scaling" else os.path.dirname(os.path.abspath(args.source))
        else:
            profile = measure(args)
            out = args.out
            with open(os.path.join(out, "scaling_profile.json"), "w", encoding="utf-8") as f:
                json.dump(profile, f, indent=1)
    except OSError as e:
        print(f"scaling_profile: cannot read or write {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    except (RuntimeError, ValueError, KeyError) as e:
        print(f"scaling_profile: {e}", file=sys.stderr)
        return 2
    print(table(profile))
    if not args.no_plots:
        for path in plot(profile, out):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
