#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/): small valid inputs of each format,
so that the mutations start from files the readers accept. Run from anywhere; deterministic (no numpy needed)."""
import gzip
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def gz(data):
    return gzip.compress(data, compresslevel=9, mtime=0)


def idx(dims, payload):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


# IDX: images [count, rows, cols] and labels [count], plain and gzip.
images = idx([2, 3, 3], bytes(range(0, 180, 10)))
labels = idx([4], bytes([0, 9, 3, 7]))
put("idx", "images-2x3x3", images)
put("idx", "labels-4", labels)
put("idx", "images-2x3x3.gz", gz(images))
put("idx", "labels-4.gz", gz(labels))
put("idx", "images-1x28x28", idx([1, 28, 28], bytes((i * 7) % 256 for i in range(784))))

# CIFAR-10: records of 1 label byte + 3072 pixel bytes, plain and gzip.
rec = lambda label, seed: bytes([label]) + bytes((seed + i * 13) % 256 for i in range(3072))
put("cifar10", "two-records", rec(3, 1) + rec(9, 2))
put("cifar10", "one-record.gz", gz(rec(0, 5)))


def npy(descr, shape, values):
    shape_txt = f"({shape[0]},)" if len(shape) == 1 else "(" + ", ".join(str(d) for d in shape) + ")"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_txt)
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    fmt = {"<f4": "<f", "<f8": "<d"}[descr]
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"".join(
        struct.pack(fmt, v) for v in values)


SEP = b"\n--npy--\n"
manifest = b"""pipeprop-checkpoint 1
layers 3
layer 0 weight[2,3] bias[2]
layer 1
layer 2 parameters[4]
tensor a float32 [2,3]
tensor b float64 [4]
scalar epoch 3
scalar lr 0.05
end
"""
put("checkpoint", "two-tensors", manifest + SEP + npy("<f4", [2, 3], [0.5, -1, 2, 3.25, 0, 1e-3]) + SEP +
    npy("<f8", [4], [1, 2, 3, 4]))
manifest0 = b"""pipeprop-checkpoint 1
layers 0
tensor a float64 []
tensor b float32 [1,1,2]
tensor c float32 [0]
scalar step 12
end
"""
put("checkpoint", "rank0-and-empty", manifest0 + SEP + npy("<f8", [], [7.0]) + SEP +
    npy("<f4", [1, 1, 2], [1, 2]) + SEP + npy("<f4", [0], []))
