"""ctest helper: every tensor a pipeprop checkpoint's manifest lists loads with numpy.load, with the dtype and
shape the manifest states and finite values. Usage: python3 check_checkpoint_numpy.py <checkpoint dir>"""
import os
import sys

import numpy as np

directory = sys.argv[1]
with open(os.path.join(directory, "manifest.txt"), encoding="ascii") as f:
    lines = f.read().splitlines()
assert lines[0] == "pipeprop-checkpoint 1", lines[0]
tensors = [line.split() for line in lines if line.startswith("tensor ")]
assert len(tensors) >= 6, f"only {len(tensors)} tensors listed"
for _, name, dtype, shape in tensors:
    array = np.load(os.path.join(directory, name + ".npy"))
    want = tuple(int(d) for d in shape.strip("[]").split(",") if d)
    assert array.dtype == np.dtype(dtype), (name, array.dtype, dtype)
    assert array.shape == want, (name, array.shape, want)
    assert np.isfinite(array).all(), name
print(f"numpy read {len(tensors)} tensors of {directory}")
