// pipeprop/models/small_cnn.hpp: the small convolutional network and the MLP of the library's examples, for
// 1x28x28 (Fashion-MNIST) or 3x32x32 (CIFAR-10) images, as network types.
#pragma once

#include "pipeprop/layers/flatten.hpp"
#include "pipeprop/layers/group_norm.hpp"
#include "pipeprop/layers/max_pool2d.hpp"
#include "pipeprop/layers/online_norm.hpp"
#include "pipeprop/layers/relu.hpp"
#include "pipeprop/models/fan_in_init.hpp"
#include "pipeprop/network.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop::models {

/// Small CNN, 12 layers: conv(16, 3x3, pad 1) - Norm - relu - max_pool(2) - conv(32, 3x3, pad 1) - Norm - relu -
/// max_pool(2) - flatten - dense(128) - relu - dense(10). Per sample on 1x28x28: [1,28,28] -> [16,28,28] ->
/// [16,14,14] -> [32,14,14] -> [32,7,7] -> [1568] -> [128] -> [10]; on 3x32x32 the maps are 32, 16 and 8 wide.
template <class InputShape = shape<1, 28, 28>, class Norm = group_norm<4>>
using small_cnn_of = network<InputShape,                                               //
                             conv<16, 3, 1, 1>, Norm, relu, max_pool2d<2>,            //
                             conv<32, 3, 1, 1>, Norm, relu, max_pool2d<2>,            //
                             flatten, dense<128>, relu, dense<10>>;

/// The small CNN on 1x28x28 with group norm (4 groups).
using small_cnn = small_cnn_of<>;
/// The small CNN on 1x28x28 with Online Normalization (decays 1023/1024 and 127/128).
using small_cnn_on = small_cnn_of<shape<1, 28, 28>, online_norm<>>;
/// The small CNN on 3x32x32 with group norm (4 groups).
using small_cnn32 = small_cnn_of<shape<3, 32, 32>>;

/// MLP 784-256-256-10 for 1x28x28 images: flatten - dense(256) - relu - dense(256) - relu - dense(10).
using mlp = network<shape<1, 28, 28>, flatten, dense<256>, relu, dense<256>, relu, dense<10>>;

}  // namespace pipeprop::models
