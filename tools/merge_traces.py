#!/usr/bin/env python3
"""Merge the per-rank Chrome traces of a dpl run into one timeline.

    python3 tools/merge_traces.py RESULT_FOLDER -o merged.json
    python3 tools/merge_traces.py trace_rank0.json trace_rank1.json ... -o merged.json

Each rank of a run writes its own trace (train_mnist --trace, train_imagenet --trace, or
PhaseTimer::write_chrome_trace), stamped with its own steady clock, whose origin differs from
process to process. The merged file opens in chrome://tracing or ui.perfetto.dev with:

- one process track per rank, named "rank N", in rank order;
- on it a thread "phases" with the top-level phases (data, compute, prepare, allreduce, optimize,
  ..., each inside the whole iteration) and one thread per sub-phase name ("allreduce/bucket0",
  "allreduce/hidden", ...), ordered by their parent phase and then by name with numbers in
  numeric order, so that sub-phases which overlap their parent or each other never break the
  nesting a viewer needs;
- every rank on one time axis.

Alignment (--align):
  barrier  each rank's trace records its steady time on leaving a barrier that every rank left
           together ("sync_steady_s", from profile::agree_on_clock, which the Trainer calls when
           training starts); that instant becomes the same time on every track. Error: one
           barrier's exit skew, about a message latency.
  wall     each trace records its steady and system clocks read back to back ("steady_s",
           "wall_s"); times are moved onto the system clock. Exact on one host; across hosts as
           good as their clock synchronisation (NTP: typically a millisecond or worse).
  none     times are left as written.
  auto     (default) barrier when every file has it, else wall when every file has it, else none
           with a warning.
The merged timeline starts at 0; the offsets applied are kept in "otherData".

Exits with status 2 and a message naming the file and what was expected for missing files, files
that are not JSON or not traces, ranks given twice, or an alignment the files cannot support.
Python 3 standard library only.
"""

import argparse
import glob
import json
import os
import re
import sys


class TraceError(Exception):
    """Input that cannot be merged; the message names the file and what was expected."""


def natural_key(text):
    """'bucket2' before 'bucket10': digit runs compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def expand_inputs(paths):
    """Folders stand for their trace_rank*.json files; files are taken as given."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(glob.glob(os.path.join(path, "trace_rank*.json")),
                           key=lambda f: natural_key(os.path.basename(f)))
            if not found:
                raise TraceError(f"{path}: expected trace_rank<N>.json files in this folder (written by "
                                 f"--trace), found none")
            files.extend(found)
        else:
            files.append(path)
    if not files:
        raise TraceError("expected at least one trace file or folder, got none")
    return files


def load_trace(path):
    """Reads one rank's trace: (rank, events, otherData)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise TraceError(f"{path}: cannot read the trace: {e.strerror}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}: expected a Chrome trace (JSON), got invalid JSON at line {e.lineno} "
                         f"column {e.colno}: {e.msg}") from None
    if isinstance(doc, list):  # the JSON array form of the format
        events, other = doc, {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events, other = doc["traceEvents"], doc.get("otherData") or {}
    else:
        raise TraceError(f"{path}: expected a JSON object with a \"traceEvents\" list (or a list of "
                         f"events), got {type(doc).__name__} without one")
    for i, e in enumerate(events):
        if not isinstance(e, dict) or "ph" not in e:
            raise TraceError(f"{path}: expected event {i} to be an object with a \"ph\" field, got {e!r:.80}")
        if e["ph"] == "X" and not (isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))):
            raise TraceError(f"{path}: expected event {i} (\"{e.get('name')}\") to have numeric \"ts\" and "
                             f"\"dur\" in microseconds, got ts={e.get('ts')!r} dur={e.get('dur')!r}")
    return rank_of(path, events, other), events, other


def rank_of(path, events, other):
    """The rank a file belongs to: otherData.rank, else its events' pid, else its name."""
    if isinstance(other.get("rank"), int):
        return other["rank"]
    pids = {e.get("pid") for e in events if e.get("ph") == "X"}
    if len(pids) == 1 and isinstance(next(iter(pids)), int):
        return next(iter(pids))
    m = re.search(r"rank(\d+)", os.path.basename(path))
    if m:
        return int(m.group(1))
    raise TraceError(f"{path}: expected the rank in otherData.rank, in the events' pid or in the file name "
                     f"(trace_rank<N>.json), found none")


def choose_alignment(mode, traces):
    """The alignment to use and, per rank, the seconds to subtract from its steady-clock times."""
    have_barrier = all(isinstance(t["other"].get("sync_steady_s"), (int, float)) for t in traces)
    have_wall = all(isinstance(t["other"].get("steady_s"), (int, float)) and
                    isinstance(t["other"].get("wall_s"), (int, float)) for t in traces)
    if mode == "auto":
        mode = "barrier" if have_barrier else "wall" if have_wall else "none"
        if mode == "none" and len(traces) > 1:
            print("merge_traces: warning: the traces carry no clock reference (written before dpl recorded "
                  "one?); ranks are not aligned", file=sys.stderr)
    missing = [t["path"] for t in traces if
               (mode == "barrier" and not isinstance(t["other"].get("sync_steady_s"), (int, float))) or
               (mode == "wall" and not (isinstance(t["other"].get("steady_s"), (int, float)) and
                                        isinstance(t["other"].get("wall_s"), (int, float))))]
    if missing:
        need = "otherData.sync_steady_s (a barrier at the start of training)" if mode == "barrier" else \
            "otherData.steady_s and otherData.wall_s"
        raise TraceError(f"--align {mode}: expected {need} in every trace, missing in: {', '.join(missing)}")
    offsets = {}
    for t in traces:
        o = t["other"]
        if mode == "barrier":
            offsets[t["rank"]] = o["sync_steady_s"]          # the barrier becomes time 0 on every rank
        elif mode == "wall":
            offsets[t["rank"]] = o["steady_s"] - o["wall_s"]  # steady - offset = system clock
        else:
            offsets[t["rank"]] = 0.0
    return mode, offsets


def assign_lanes(slices):
    """Puts (start, end, event) slices on lanes where each pair nests or is disjoint.

    Returns a list of lanes (lists of events). A slice that partly overlaps one on a lane (which
    a viewer would draw wrongly) goes to the next lane where it fits."""
    lanes = []  # each: (events, stack of open end times)
    eps = 1e-3  # microseconds: rounding of the writers' floating-point times
    for start, end, event in sorted(slices, key=lambda s: (s[0], -(s[1] - s[0]))):
        for events, stack in lanes:
            while stack and stack[-1] <= start + eps:
                stack.pop()
            if not stack or end <= stack[-1] + eps:
                events.append(event)
                stack.append(end)
                break
        else:
            lanes.append(([event], [end]))
    return [events for events, _ in lanes]


def merge(traces, mode="auto"):
    """Merges loaded traces (dicts with path, rank, events, other) into one trace document."""
    ranks = {}
    for t in traces:
        if t["rank"] in ranks:
            raise TraceError(f"rank {t['rank']} appears twice: {ranks[t['rank']]} and {t['path']}; expected one "
                             f"file per rank")
        ranks[t["rank"]] = t["path"]
    mode, offsets = choose_alignment(mode, traces)

    shifted = {}  # rank -> list of events with aligned ts (us)
    for t in traces:
        shift_us = offsets[t["rank"]] * 1e6
        out = []
        for e in t["events"]:
            if e.get("ph") == "M":
                continue  # names are rewritten below
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] - shift_us
            out.append(e)
        if mode == "barrier":
            # A marker where the traces were aligned.
            out.append({"name": "clock sync (barrier)", "ph": "i", "s": "p",
                        "ts": t["other"]["sync_steady_s"] * 1e6 - shift_us})
        shifted[t["rank"]] = out

    times = [e["ts"] for evs in shifted.values() for e in evs if isinstance(e.get("ts"), (int, float))]
    origin = min(times) if times else 0.0

    merged = []
    phase_order = {}  # top-level phase -> order of first appearance over all ranks
    for rank in sorted(shifted):
        for e in shifted[rank]:
            name = str(e.get("name", ""))
            top = name.split("/", 1)[0]
            phase_order.setdefault(top, len(phase_order))

    track_stats = {}
    for rank in sorted(shifted):
        merged.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        merged.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        tracks = {}  # track name -> slices
        others = []
        for e in shifted[rank]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] - origin
            e["pid"] = rank
            if e.get("ph") == "X":
                name = str(e.get("name", ""))
                track = name if "/" in name else "phases"
                tracks.setdefault(track, []).append((e["ts"], e["ts"] + e["dur"], e))
            else:
                e["tid"] = 0
                others.append(e)

        def track_key(track):
            if track == "phases":
                return (-1, [])
            return (phase_order.get(track.split("/", 1)[0], 1 << 30), natural_key(track))

        tid = 0
        for track in sorted(tracks, key=track_key):
            lanes = assign_lanes(tracks[track])
            for i, lane in enumerate(lanes):
                label = track if i == 0 else f"{track} ({i + 1})"
                merged.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": label}})
                merged.append({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid,
                               "args": {"sort_index": tid}})
                for e in lane:
                    e["tid"] = tid
                    e.setdefault("args", {})["rank"] = rank
                    merged.append(e)
                    stat = track_stats.setdefault((rank, e.get("name")), [0, 0.0])
                    stat[0] += 1
                    stat[1] += e["dur"]
                tid += 1
        merged.extend(others)

    other = {
        "merged_from": [t["path"] for t in sorted(traces, key=lambda t: t["rank"])],
        "ranks": sorted(shifted),
        "alignment": mode,
        # Seconds subtracted from each rank's steady-clock times, then the common origin.
        "offsets_s": {str(r): offsets[r] for r in sorted(offsets)},
        "origin_us": origin,
    }
    return {"traceEvents": merged, "displayTimeUnit": "ms", "otherData": other}, track_stats


def phase_table(stats, ranks):
    """Mean milliseconds per slice of each phase on each rank, as text."""
    first_seen = {}
    for _, name in stats:  # insertion order: top-level phases by time, then sub-phase tracks
        first_seen.setdefault(str(name).split("/", 1)[0], len(first_seen))
    names = sorted({name for _, name in stats},
                   key=lambda n: (first_seen[str(n).split("/", 1)[0]], "/" in str(n), natural_key(str(n))))
    width = max([28] + [len(str(n)) + 2 for n in names])  # nested bucket steps have long names
    lines = ["phase (mean ms per slice)".ljust(width) + "".join(f"{'rank ' + str(r):>12}" for r in ranks)]
    for name in names:
        row = str(name).ljust(width)
        for r in ranks:
            s = stats.get((r, name))
            row += f"{s[1] / s[0] / 1e3:12.3f}" if s else f"{'-':>12}"
        lines.append(row)
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Merge per-rank dpl Chrome traces into one timeline.")
    parser.add_argument("inputs", nargs="+", help="trace files, or folders holding trace_rank<N>.json")
    parser.add_argument("-o", "--output", default="merged_trace.json", help="merged trace to write")
    parser.add_argument("--align", choices=["auto", "barrier", "wall", "none"], default="auto",
                        help="how to put the ranks on one time axis (see the module's help)")
    parser.add_argument("-q", "--quiet", action="store_true", help="do not print the per-rank phase table")
    args = parser.parse_args(argv)
    try:
        traces = []
        for path in expand_inputs(args.inputs):
            rank, events, other = load_trace(path)
            traces.append({"path": path, "rank": rank, "events": events, "other": other})
        doc, stats = merge(traces, args.align)
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(doc, f)
    except TraceError as e:
        print(f"merge_traces: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"merge_traces: cannot write {args.output}: {e.strerror}", file=sys.stderr)
        return 2
    ranks = doc["otherData"]["ranks"]
    print(f"merged {len(ranks)} rank(s) into {args.output} (alignment: {doc['otherData']['alignment']})")
    if not args.quiet:
        print(phase_table(stats, ranks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
