"""Reads and writes safetensors files with json and numpy alone, to check dpl's files against an
independent implementation of the format.

    safetensors_check.py check FILE   exit 0 when FILE holds exactly the reference tensors
    safetensors_check.py write FILE   write the reference tensors to FILE

The reference set must match kReference in safetensors_test.cpp.
"""
import json
import struct
import sys

import numpy as np

# name -> (dtype, shape, values). BF16 values are bit patterns: numpy has no bfloat16.
REFERENCE = {
    "weight": ("F32", [2, 3], [-1.0, -0.5, 0.0, 0.5, 1.0, 1.5]),
    "half": ("F16", [3], [0.5, -1.25, 1024.0]),
    "brain": ("BF16", [2, 2], [0x3F80, 0xC020, 0x3E20, 0x4040]),
    "labels": ("I32", [4], [0, -7, 2147483647, -2147483648]),
    "index": ("I64", [3], [-1, 1 << 40, 9007199254740993]),
    "pixels": ("U8", [2, 2], [0, 127, 128, 255]),
    "scalar": ("F32", [], [3.25]),
    "empty": ("F32", [0, 4], []),
}
METADATA = {"format": "dpl-test", "epoch": "3"}
# The values the BF16 bit patterns stand for.
BRAIN_VALUES = [1.0, -2.5, 0.15625, 3.0]
NUMPY_DTYPE = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I32": "<i4", "I64": "<i8", "U8": "<u1"}


def reference_array(dtype, shape, values):
    return np.array(values, dtype=NUMPY_DTYPE[dtype]).reshape(shape)


def check(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    problems = []
    if n % 8 != 0:
        problems.append(f"header length {n} is not a multiple of 8")
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    if header.pop("__metadata__", None) != METADATA:
        problems.append("metadata differs")
    if set(header) != set(REFERENCE):
        problems.append(f"names {sorted(header)} != {sorted(REFERENCE)}")
    end = 0
    for name, (dtype, shape, values) in REFERENCE.items():
        entry = header.get(name)
        if entry is None:
            continue
        if entry["dtype"] != dtype or entry["shape"] != shape:
            problems.append(f"{name}: {entry['dtype']} {entry['shape']} != {dtype} {shape}")
            continue
        begin, stop = entry["data_offsets"]
        end = max(end, stop)
        got = np.frombuffer(data[begin:stop], dtype=NUMPY_DTYPE[dtype]).reshape(shape)
        if not np.array_equal(got, reference_array(dtype, shape, values)):
            problems.append(f"{name}: values {got.tolist()} != {values}")
        if dtype == "BF16":
            as_f32 = (got.astype("<u4") << 16).view("<f4").reshape(-1)
            if as_f32.tolist() != BRAIN_VALUES:
                problems.append(f"{name}: bfloat16 values {as_f32.tolist()} != {BRAIN_VALUES}")
    if end != len(data):
        problems.append(f"data section is {len(data)} bytes, tensors end at {end}")
    for p in problems:
        print("safetensors_check:", path + ":", p, file=sys.stderr)
    return 1 if problems else 0


def write(path):
    # Data in reverse name order while the header lists names in the reference order, and no
    # padding: a reader must follow data_offsets and accept any header length.
    header = {"__metadata__": METADATA}
    chunks = []
    offset = 0
    for name in sorted(REFERENCE, reverse=True):
        dtype, shape, values = REFERENCE[name]
        b = reference_array(dtype, shape, values).tobytes()
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(b)]}
        chunks.append(b)
        offset += len(b)
    ordered = {"__metadata__": METADATA, **{name: header[name] for name in REFERENCE}}
    text = json.dumps(ordered).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    return 0


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    sys.exit(check(path) if mode == "check" else write(path))
