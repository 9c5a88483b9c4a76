// bench/small_cnn.hpp: the main program's small CNN as the benchmarks use it: exactly the main program's network
// (examples/train/networks.hpp, train::small_cnn, whose conv and dense layers use PyTorch's default bound
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the weights and zero biases).
//
// [b, 1, 28, 28] -> conv(16, 3x3, pad 1) -> group_norm(4) -> relu -> max_pool(2)
//               -> conv(32, 3x3, pad 1) -> group_norm(4) -> relu -> max_pool(2) -> flatten [b, 1568]
//               -> dense(128) -> relu -> dense(10) logits.
// bench/torch_side_by_side.py builds the same network in PyTorch (nn.Conv2d / nn.GroupNorm(eps=1e-5) / nn.Linear
// share pipeprop's parameter layouts: weight [out, in] and [out, c, kh, kw], bias [out], gamma / beta [c]) and loads
// pipeprop's initial parameters, so the initialization scheme only has to be the same on one side.
#pragma once

#include "train/networks.hpp"

namespace pipeprop::bench {

using small_cnn = train::small_cnn;

}  // namespace pipeprop::bench
