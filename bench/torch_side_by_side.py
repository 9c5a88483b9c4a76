#!/usr/bin/python3
"""PyTorch side of the side-by-side comparison with pipeprop (issues 6 and 16).

Trains the network pipeprop's bench/side_by_side_train exported with --export DIR (hyperparameters.txt names it:
"cnn", the small CNN of bench/small_cnn.hpp, or "resnet20", train::resnet20 of examples/train/networks.hpp) in
PyTorch (CPU, one thread) on exactly what was exported: the same initial parameters (parameters.txt lists every
tensor, <node name>.<tensor>.npy holds it), the same inputs and labels in the same order (x.npy [N, 1, 28, 28]
float32, labels.npy [N] int32) and the same hyperparameters (hyperparameters.txt: batch, lr, momentum, network,
precision; heavy-ball momentum SGD, mean cross-entropy loss). Prints one line in the format of side_by_side_train:
  result impl=torch network=<name> precision=<float|double> batch=<b> samples=<N> seconds=<s> samples_per_s=<r>
         cpu_seconds=<s> cpu_samples_per_s=<r> lr=<lr> momentum=<m>
         last_loss=<mean loss of the last batch, before its update> eval_loss=<mean loss on the first E samples>
seconds is wall clock, cpu_seconds the process's CPU time (time.process_time) over the training loop. precision
float64 is the same-math check.

Run with Debian's interpreter (python3-torch, python3-numpy; scripts/install-deps.sh --with-torch):
  /usr/bin/python3 bench/torch_side_by_side.py --data DIR [--eval 1000]
bench/side_by_side.sh runs pipeprop, this script and bench/libtorch/libtorch_side_by_side and prints the ratios.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
from torch import nn


def small_cnn() -> nn.Sequential:
    """The network of bench/small_cnn.hpp; module indices equal pipeprop's layer positions."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, stride=1, padding=1),   # 0
        nn.GroupNorm(4, 16, eps=1e-5),              # 1
        nn.ReLU(),                                  # 2
        nn.MaxPool2d(2),                            # 3
        nn.Conv2d(16, 32, 3, stride=1, padding=1),  # 4
        nn.GroupNorm(4, 32, eps=1e-5),              # 5
        nn.ReLU(),                                  # 6
        nn.MaxPool2d(2),                            # 7
        nn.Flatten(),                               # 8
        nn.Linear(32 * 7 * 7, 128),                 # 9
        nn.ReLU(),                                  # 10
        nn.Linear(128, 10),                         # 11
    )


class Residual(nn.Module):
    """pipeprop::residual (y = x + body(x)) or, with a shortcut, pipeprop::residual_projection
    (y = shortcut(x) + body(x)); body and shortcut are indexed like pipeprop's body_NN / shortcut_NN nodes."""

    def __init__(self, body, shortcut=None):
        super().__init__()
        self.body = nn.Sequential(*body)
        self.shortcut = nn.Sequential(*shortcut) if shortcut else None

    def forward(self, x):
        return self.body(x) + (x if self.shortcut is None else self.shortcut(x))


class GlobalAvgPool(nn.Module):
    """pipeprop::global_avg_pool: [b, C, H, W] -> [b, C], the mean over each channel plane."""

    def forward(self, x):
        return x.mean(dim=(2, 3))


def resnet20() -> nn.Sequential:
    """train::resnet20 (examples/train/networks.hpp): conv3x3(16) - group_norm(8) - relu, then 3 groups of 3 basic
    blocks at 16, 32, 64 channels, each block followed by a relu, the first block of groups 2 and 3 a down block
    (stride-2 conv3x3 in the body, projection shortcut conv1x1 stride 2 - group_norm(8)), global average pool,
    dense(10). Module indices equal pipeprop's layer positions (0 ... 22)."""
    def conv(cin, cout, kernel, stride, padding):
        return nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding)

    def norm(c):
        return nn.GroupNorm(8, c, eps=1e-5)

    layers = [conv(1, 16, 3, 1, 1), norm(16), nn.ReLU()]
    for c_in, c, first_down in ((16, 16, False), (16, 32, True), (32, 64, True)):
        for block in range(3):
            if block == 0 and first_down:
                layers.append(Residual([conv(c_in, c, 3, 2, 1), norm(c), nn.ReLU(), conv(c, c, 3, 1, 1), norm(c)],
                                       [conv(c_in, c, 1, 2, 0), norm(c)]))
            else:
                layers.append(Residual([conv(c, c, 3, 1, 1), norm(c), nn.ReLU(), conv(c, c, 3, 1, 1), norm(c)]))
            layers.append(nn.ReLU())
    layers += [GlobalAvgPool(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


NETWORKS = {"cnn": small_cnn, "resnet20": resnet20}


def torch_parameter_name(node: str, tensor: str) -> str:
    """pipeprop's node and tensor name -> the model's parameter name: "layer_09.shortcut_00", "gamma" ->
    "9.shortcut.0.weight" (layer_NN: the top-level index; body_NN / shortcut_NN: inside a Residual; group norm's
    gamma / beta are PyTorch's weight / bias)."""
    parts = []
    for part in node.split("."):
        kind, _, index = part.rpartition("_")
        parts += [str(int(index))] if kind == "layer" else [kind, str(int(index))]
    return ".".join(parts + [{"gamma": "weight", "beta": "bias"}.get(tensor, tensor)])


def load_parameters(model: nn.Module, directory: str, dtype: torch.dtype) -> None:
    """Copies every tensor parameters.txt lists into the model; fails (exit message) on a missing file or parameter,
    a shape mismatch, a file in another precision, or a model parameter the export does not cover."""
    targets = dict(model.named_parameters())
    loaded = set()
    with open(os.path.join(directory, "parameters.txt"), encoding="ascii") as f, torch.no_grad():
        for line in f:
            node, tensor, *dims = line.split()
            path = os.path.join(directory, f"{node}.{tensor}.npy")
            try:
                value = torch.from_numpy(np.load(path))
            except OSError as e:
                sys.exit(f"torch_side_by_side: cannot read {path}: {e}")
            name = torch_parameter_name(node, tensor)
            target = targets.get(name)
            if target is None:
                sys.exit(f"torch_side_by_side: {path}: the model has no parameter {name}")
            expected = tuple(int(d) for d in dims)
            if tuple(value.shape) != expected or expected != tuple(target.shape):
                sys.exit(f"torch_side_by_side: {path} has shape {tuple(value.shape)} (parameters.txt: {expected}), "
                         f"PyTorch's {name} is {tuple(target.shape)}")
            if value.dtype != dtype:
                sys.exit(f"torch_side_by_side: {path} holds {value.dtype}, the run is in {dtype}")
            target.copy_(value)
            loaded.add(name)
    missing = sorted(set(targets) - loaded)
    if missing:
        sys.exit(f"torch_side_by_side: parameters.txt of {directory} does not cover {', '.join(missing)}")


def read_hyperparameters(directory: str) -> dict:
    values = {}
    with open(os.path.join(directory, "hyperparameters.txt"), encoding="ascii") as f:
        for line in f:
            key, value = line.split()
            values[key] = value
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="directory written by side_by_side_train --export")
    parser.add_argument("--eval", type=int, default=1000, help="samples of the loss evaluated after training")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    hp = read_hyperparameters(args.data)
    batch, lr, momentum = int(hp["batch"]), float(hp["lr"]), float(hp["momentum"])
    network, precision = hp["network"], hp["precision"]
    if network not in NETWORKS or precision not in ("float", "double"):
        sys.exit(f"torch_side_by_side: unknown network {network} or precision {precision} in hyperparameters.txt")
    x = torch.from_numpy(np.load(os.path.join(args.data, "x.npy")))
    labels = torch.from_numpy(np.load(os.path.join(args.data, "labels.npy")).astype(np.int64))
    samples = x.shape[0]
    if samples % batch != 0:
        sys.exit(f"torch_side_by_side: {samples} samples are not a multiple of the batch size {batch}")

    # Train in the precision pipeprop exported the parameters in (float64: the same-math check).
    dtype = torch.float64 if precision == "double" else torch.float32
    model = NETWORKS[network]().to(dtype)
    x = x.to(dtype)
    load_parameters(model, args.data, dtype)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    loss_fn = nn.CrossEntropyLoss()  # mean over the batch, like pipeprop's softmax_cross_entropy

    last_loss = 0.0
    start = time.perf_counter()
    cpu_start = time.process_time()
    for first in range(0, samples, batch):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[first:first + batch]), labels[first:first + batch])
        loss.backward()
        optimizer.step()
        last_loss = loss.item()
    cpu_seconds = time.process_time() - cpu_start
    seconds = time.perf_counter() - start

    count = min(args.eval, samples)
    with torch.no_grad():
        eval_loss = nn.functional.cross_entropy(model(x[:count]), labels[:count]).item()
    print(f"result impl=torch network={network} precision={precision} batch={batch} samples={samples} "
          f"seconds={seconds:.6f} samples_per_s={samples / seconds:.2f} cpu_seconds={cpu_seconds:.6f} "
          f"cpu_samples_per_s={samples / cpu_seconds:.2f} lr={lr:.9g} momentum={momentum:.9g} "
          f"last_loss={last_loss:.17g} eval_loss={eval_loss:.17g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
