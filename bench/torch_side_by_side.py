#!/usr/bin/python3
"""PyTorch half of the side-by-side comparison with pipeprop (issue 6).

Trains the small CNN of bench/small_cnn.hpp in PyTorch (CPU, one thread) on exactly what pipeprop's
bench/side_by_side_train exported with --export DIR: the same initial parameters (layer_XX.<tensor>.npy), the same
inputs and labels in the same order (x.npy [N, 1, 28, 28] float32, labels.npy [N] int32) and the same
hyperparameters (hyperparameters.txt: batch, lr, momentum; heavy-ball momentum SGD, mean cross-entropy loss).
Prints one line in the format of side_by_side_train:
  result impl=torch batch=<b> samples=<N> seconds=<s> samples_per_s=<r> cpu_seconds=<s> cpu_samples_per_s=<r>
         lr=<lr> momentum=<m>
         last_loss=<mean loss of the last batch, before its update> eval_loss=<mean loss on the first E samples>
(plus precision=<float|double>: the precision of the exported parameters, which the run uses). seconds is wall
clock, cpu_seconds the process's CPU time (time.process_time) over the training loop.

Run with Debian's interpreter (python3-torch, python3-numpy; scripts/install-deps.sh --with-torch):
  /usr/bin/python3 bench/torch_side_by_side.py --data DIR [--eval 1000]
bench/side_by_side.sh runs both halves and prints the ratios.
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


# pipeprop tensor name -> PyTorch parameter name, per layer kind.
NAMES = {nn.Conv2d: {"weight": "weight", "bias": "bias"},
         nn.Linear: {"weight": "weight", "bias": "bias"},
         nn.GroupNorm: {"gamma": "weight", "beta": "bias"}}


def load_parameters(model: nn.Sequential, directory: str) -> None:
    """Copies every layer_XX.<tensor>.npy of `directory` into the model; fails on a missing file or shape mismatch."""
    with torch.no_grad():
        for index, module in enumerate(model):
            names = NAMES.get(type(module))
            if names is None:
                continue
            for ours, theirs in names.items():
                path = os.path.join(directory, f"layer_{index:02d}.{ours}.npy")
                value = torch.from_numpy(np.load(path))
                target = getattr(module, theirs)
                if tuple(value.shape) != tuple(target.shape):
                    sys.exit(f"torch_side_by_side: {path} has shape {tuple(value.shape)}, "
                             f"PyTorch expects {tuple(target.shape)}")
                target.copy_(value)


def read_hyperparameters(directory: str) -> dict:
    values = {}
    with open(os.path.join(directory, "hyperparameters.txt"), encoding="ascii") as f:
        for line in f:
            key, value = line.split()
            values[key] = float(value)
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="directory written by side_by_side_train --export")
    parser.add_argument("--eval", type=int, default=1000, help="samples of the loss evaluated after training")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    hp = read_hyperparameters(args.data)
    batch = int(hp["batch"])
    x = torch.from_numpy(np.load(os.path.join(args.data, "x.npy")))
    labels = torch.from_numpy(np.load(os.path.join(args.data, "labels.npy")).astype(np.int64))
    samples = x.shape[0]
    if samples % batch != 0:
        sys.exit(f"torch_side_by_side: {samples} samples are not a multiple of the batch size {batch}")

    model = small_cnn()
    # Train in the precision pipeprop exported the parameters in (float64: the same-math check).
    dtype = torch.from_numpy(np.load(os.path.join(args.data, "layer_00.weight.npy"))).dtype
    model = model.to(dtype)
    x = x.to(dtype)
    load_parameters(model, args.data)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=hp["lr"], momentum=hp["momentum"])
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
    precision = "double" if dtype == torch.float64 else "float"
    print(f"result impl=torch precision={precision} batch={batch} samples={samples} seconds={seconds:.6f} "
          f"samples_per_s={samples / seconds:.2f} cpu_seconds={cpu_seconds:.6f} "
          f"cpu_samples_per_s={samples / cpu_seconds:.2f} lr={hp['lr']:.9g} momentum={hp['momentum']:.9g} "
          f"last_loss={last_loss:.12g} eval_loss={eval_loss:.12g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
