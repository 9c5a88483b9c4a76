// bench/small_cnn.hpp: the small CNN of issue 3 as the benchmarks use it, and its PyTorch twin's layer list.
//
// [b, 1, 28, 28] -> conv(16, 3x3, pad 1) -> group_norm(4) -> relu -> max_pool(2)
//               -> conv(32, 3x3, pad 1) -> group_norm(4) -> relu -> max_pool(2) -> flatten [b, 1568]
//               -> dense(128) -> relu -> dense(10) logits.
// bench/torch_side_by_side.py builds the same network in PyTorch (nn.Conv2d / nn.GroupNorm(eps=1e-5) / nn.Linear
// share pipeprop's parameter layouts: weight [out, in] and [out, c, kh, kw], bias [out], gamma / beta [c]).
#pragma once

#include "pipeprop/layers/conv2d.hpp"
#include "pipeprop/layers/dense.hpp"
#include "pipeprop/layers/flatten.hpp"
#include "pipeprop/layers/group_norm.hpp"
#include "pipeprop/layers/max_pool2d.hpp"
#include "pipeprop/layers/relu.hpp"
#include "pipeprop/network.hpp"

namespace pipeprop::bench {

using small_cnn = network<shape<1, 28, 28>,                                  //
                          conv2d<16, 3, 1, 1>, group_norm<4>, relu, max_pool2d<2>,  // 0..3
                          conv2d<32, 3, 1, 1>, group_norm<4>, relu, max_pool2d<2>,  // 4..7
                          flatten, dense<128>, relu, dense<10>>;                    // 8..11

}  // namespace pipeprop::bench
