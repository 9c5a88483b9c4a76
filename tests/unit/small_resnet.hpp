// A small-width residual network for the tests of blocks in pipelines: ResNet's structure (stem conv,
// an identity block, a projection block with a 1x1 stride-2 shortcut, global average pool, dense) at 1x8x8 inputs
// and 4 / 8 channels. Its 23 nodes:
//   0 conv  1 gn  2 relu | 3 fork  4 conv  5 gn  6 relu  7 conv  8 gn  9 add | 10 relu |
//   11 fork  12 conv/2  13 gn  14 relu  15 conv  16 gn  17 shortcut conv/2  18 shortcut gn  19 add | 20 relu |
//   21 global average pool  22 dense
// Stage boundaries may fall before every node except 17, 18 and 19 (the shortcut shares the add's stage).
#pragma once

#include <pipeprop/pipeprop.hpp>

namespace test_nets {

namespace pp = pipeprop;

using small_resnet = pp::network<
    pp::shape<1, 8, 8>, pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>, pp::relu,
    pp::residual<pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>, pp::relu, pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>>,
    pp::relu,
    pp::residual_projection<pp::shortcut<pp::conv2d<8, 1, 2>, pp::group_norm<2>>, pp::conv2d<8, 3, 2, 1>,
                            pp::group_norm<2>, pp::relu, pp::conv2d<8, 3, 1, 1>, pp::group_norm<2>>,
    pp::relu, pp::global_avg_pool, pp::dense<3>>;

/// small_resnet with Online Normalization (per channel, running statistics; layers/online_norm.hpp) after every
/// conv, the shortcut's included: the same 23 nodes, 7 of them stateful. The weight-layer cut
/// (pp::weight_layer_stages) makes every conv a stage with its norm and relu: stages start at nodes 0, 4, 7, 12, 15
/// and 22 (the shortcut conv 17 and its norm 18 join the add's stage, 15's), S = 6, delays 10 ... 0.
using small_resnet_on = pp::network<
    pp::shape<1, 8, 8>, pp::conv2d<4, 3, 1, 1>, pp::online_norm<>, pp::relu,
    pp::residual<pp::conv2d<4, 3, 1, 1>, pp::online_norm<>, pp::relu, pp::conv2d<4, 3, 1, 1>, pp::online_norm<>>,
    pp::relu,
    pp::residual_projection<pp::shortcut<pp::conv2d<8, 1, 2>, pp::online_norm<>>, pp::conv2d<8, 3, 2, 1>,
                            pp::online_norm<>, pp::relu, pp::conv2d<8, 3, 1, 1>, pp::online_norm<>>,
    pp::relu, pp::global_avg_pool, pp::dense<3>>;

}  // namespace test_nets
