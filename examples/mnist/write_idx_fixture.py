#!/usr/bin/env python3
"""Writes a tiny MNIST-format data set (uncompressed IDX files) into a folder, with one chosen
training label, so tests can feed train_mnist data that is wrong in one known place; or, with
--from, the first samples of a real one (a few thousand Fashion-MNIST images train in seconds).

usage: write_idx_fixture.py FOLDER [--bad-label INDEX VALUE] [--test-size ROWS COLS]
       write_idx_fixture.py FOLDER --from MNIST_FOLDER --limit TRAIN TEST
"""
import argparse
import gzip
import os
import struct


def read_idx(folder, name):
    """The header and the data of folder/name, or of folder/name.gz."""
    path = os.path.join(folder, name)
    opener = open if os.path.exists(path) else gzip.open
    with opener(path if os.path.exists(path) else path + ".gz", "rb") as f:
        data = f.read()
    dims = data[3]
    return data[:4 + 4 * dims], data[4 + 4 * dims:]


def copy_first(source, folder, prefix, count):
    """The first count samples of source's prefix-images and prefix-labels files, into folder."""
    for kind in ("images", "labels"):
        name = "%s-%s-idx%d-ubyte" % (prefix, kind, 3 if kind == "images" else 1)
        header, data = read_idx(source, name)
        dims = list(struct.unpack(">%dI" % header[3], header[4:]))
        per_sample = len(data) // dims[0]
        dims[0] = min(count, dims[0])
        write_idx(os.path.join(folder, name), header[2], dims, data[:dims[0] * per_sample])


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
    parser.add_argument("--from", dest="source", help="an MNIST-format folder to take the first samples of")
    parser.add_argument("--limit", nargs=2, type=int, default=(1000, 200), metavar=("TRAIN", "TEST"),
                        help="with --from: how many training and test samples to take")
    args = parser.parse_args()
    os.makedirs(args.folder, exist_ok=True)
    if args.source:
        copy_first(args.source, args.folder, "train", args.limit[0])
        copy_first(args.source, args.folder, "t10k", args.limit[1])
        return
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
