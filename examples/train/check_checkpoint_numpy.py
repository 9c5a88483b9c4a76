"""ctest helper: every tensor a pipeprop checkpoint's manifest lists loads with numpy.load, with the dtype and
shape the manifest states, finite values and the crc32 the manifest states (Python's zlib over the array's
little-endian bytes: an independent check of the checkpoint's checksums). Usage: python3 check_checkpoint_numpy.py <checkpoint dir>"""
import os
import sys
import zlib

import numpy as np

directory = sys.argv[1]
with open(os.path.join(directory, "manifest.txt"), encoding="ascii") as f:
    lines = f.read().splitlines()
assert lines[0] == "pipeprop-checkpoint 2", lines[0]
tensors = [line.split() for line in lines if line.startswith("tensor ")]
assert len(tensors) >= 6, f"only {len(tensors)} tensors listed"
for _, name, dtype, shape, crc in tensors:
    array = np.load(os.path.join(directory, name + ".npy"))
    want = tuple(int(d) for d in shape.strip("[]").split(",") if d)
    assert array.dtype == np.dtype(dtype), (name, array.dtype, dtype)
    assert array.shape == want, (name, array.shape, want)
    assert np.isfinite(array).all(), name
    want_crc = f"crc32={zlib.crc32(array.astype(array.dtype.newbyteorder('<')).tobytes()):08x}"
    assert crc == want_crc, (name, crc, want_crc)
print(f"numpy read {len(tensors)} tensors of {directory}")
