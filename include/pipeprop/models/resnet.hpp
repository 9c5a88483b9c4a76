// pipeprop/models/resnet.hpp: CIFAR-style ResNet-(6N+2) (He et al. 2016, "Deep residual learning", §4.2) for any
// depth, as network types.
//
// conv3x3(16) - norm - relu, three groups of N basic blocks at 16, 32 and 64 channels (the second and third start
// with a stride-2 block whose shortcut is a projection, option B), global average pool, dense(10). Every conv and
// dense layer uses PyTorch's default initialization (models/fan_in_init.hpp). Norm is the normalization after every
// conv: group_norm<8> or online_norm<> (both independent of the micro-batch, so they work at micro-batch size 1).
// For 1x28x28 inputs the feature maps are 28x28, 14x14 and 7x7; for 3x32x32 ones 32x32, 16x16 and 8x8.
//
// A ResNet-(6N+2) has 6N + 1 convs, 2 projection shortcuts and 24N + 9 nodes (ResNet-20: 81, ResNet-56: 225,
// ResNet-110: 441); however deep it is, it has the same 34 distinct node types, and a layer_stack generates code
// per type, so ResNet-110 costs about the compile time of ResNet-20.
#pragma once

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include <cstddef>
#include <type_traits>

#include "pipeprop/graph/blocks.hpp"
#include "pipeprop/layers/global_avg_pool.hpp"
#include "pipeprop/layers/group_norm.hpp"
#include "pipeprop/layers/online_norm.hpp"
#include "pipeprop/layers/relu.hpp"
#include "pipeprop/models/fan_in_init.hpp"
#include "pipeprop/network.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop::models {

/// ResNet basic block with an identity shortcut at C channels: conv3x3 - norm - relu - conv3x3 - norm, plus x (the
/// relu after the add follows the block).
template <std::size_t C, class Norm>
using basic_block = residual<conv<C, 3, 1, 1>, Norm, relu, conv<C, 3, 1, 1>, Norm>;

/// ResNet basic block that halves the resolution and widens to C channels: a stride-2 conv3x3 in the body and a
/// projection shortcut conv1x1 stride 2 - norm.
template <std::size_t C, class Norm>
using down_block =
    residual_projection<shortcut<conv<C, 1, 2>, Norm>, conv<C, 3, 2, 1>, Norm, relu, conv<C, 3, 1, 1>, Norm>;

/// N copies of Block, each followed by a relu, as a boost::mp11::mp_list of specs (a ResNet group's tail).
template <std::size_t N, class Block>
using repeat = boost::mp11::mp_repeat_c<boost::mp11::mp_list<Block, relu>, N>;

namespace detail {
template <std::size_t N, std::size_t C, class Norm, bool FirstDown>
using resnet_group =
    boost::mp11::mp_append<boost::mp11::mp_list<std::conditional_t<FirstDown, down_block<C, Norm>, basic_block<C, Norm>>,
                                                relu>,
                           repeat<N - 1, basic_block<C, Norm>>>;
}  // namespace detail

/// ResNet-(6N+2) on InputShape ([C, H, W]) with normalization Norm (see the file comment). Static-asserts N >= 1.
template <class InputShape, std::size_t N, class Norm = group_norm<8>>
    requires(N >= 1)
using resnet = boost::mp11::mp_apply<
    network, boost::mp11::mp_append<boost::mp11::mp_list<InputShape, conv<16, 3, 1, 1>, Norm, relu>,
                                    detail::resnet_group<N, 16, Norm, false>, detail::resnet_group<N, 32, Norm, true>,
                                    detail::resnet_group<N, 64, Norm, true>,
                                    boost::mp11::mp_list<global_avg_pool, dense<10>>>>;

/// The N of a ResNet of Depth layers (Depth = 6N + 2: 20, 32, 44, 56, 110, ...).
template <std::size_t Depth>
    requires(Depth >= 8 && (Depth - 2) % 6 == 0)
inline constexpr std::size_t resnet_blocks_per_group = (Depth - 2) / 6;

/// ResNet-Depth (Depth = 6N + 2) on InputShape with Norm, e.g. resnet_of_depth<110, shape<3, 32, 32>>.
template <std::size_t Depth, class InputShape = shape<1, 28, 28>, class Norm = group_norm<8>>
using resnet_of_depth = resnet<InputShape, resnet_blocks_per_group<Depth>, Norm>;

}  // namespace pipeprop::models
