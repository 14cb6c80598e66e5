#!/usr/bin/env python3
"""Writes a tiny MNIST-format data set (uncompressed IDX files) into a folder, with one chosen
training label, so tests can feed train_mnist data that is wrong in one known place.

usage: write_idx_fixture.py FOLDER [--bad-label INDEX VALUE] [--test-size ROWS COLS]
"""
import argparse
import os
import struct


def write_idx(path, type_code, dims, payload):
    with open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, type_code, len(dims)))
        for d in dims:
            f.write(struct.pack(">I", d))
        f.write(payload)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--bad-label", nargs=2, type=int, metavar=("INDEX", "VALUE"))
    parser.add_argument("--test-size", nargs=2, type=int, default=(28, 28), metavar=("ROWS", "COLS"),
                        help="the test images' size (28 x 28, as the training images, by default)")
    args = parser.parse_args()
    os.makedirs(args.folder, exist_ok=True)
    for prefix, count in (("train", 8), ("t10k", 4)):
        rows, cols = (28, 28) if prefix == "train" else args.test_size
        pixels = bytes((i * 7 + j) % 256 for i in range(count) for j in range(rows * cols))
        labels = bytearray(i % 10 for i in range(count))
        if prefix == "train" and args.bad_label:
            index, value = args.bad_label
            labels[index] = value
        write_idx(os.path.join(args.folder, prefix + "-images-idx3-ubyte"), 0x08, (count, rows, cols), pixels)
        write_idx(os.path.join(args.folder, prefix + "-labels-idx1-ubyte"), 0x08, (count,), bytes(labels))


if __name__ == "__main__":
    main()
