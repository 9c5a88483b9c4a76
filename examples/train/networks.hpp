// examples/train/networks.hpp: the networks the main program offers, as pipeprop::network types, and the
// name -> type table used by every mode.
#pragma once

#include <pipeprop/layers/conv2d.hpp>
#include <pipeprop/layers/dense.hpp>
#include <pipeprop/graph/blocks.hpp>
#include <pipeprop/graph/transformer_block.hpp>
#include <pipeprop/layers/flatten.hpp>
#include <pipeprop/layers/global_avg_pool.hpp>
#include <pipeprop/layers/group_norm.hpp>
#include <pipeprop/layers/max_pool2d.hpp>
#include <pipeprop/layers/online_norm.hpp>
#include <pipeprop/layers/relu.hpp>
#include <pipeprop/layers/rms_norm.hpp>
#include <pipeprop/layers/token_embedding.hpp>
#include <pipeprop/layers/token_linear.hpp>
#include <pipeprop/layer_stack.hpp>
#include <pipeprop/models/llama_tiny.hpp>
#include <pipeprop/models/resnet.hpp>
#include <pipeprop/models/small_cnn.hpp>
#include <pipeprop/network.hpp>
#include <pipeprop/seed.hpp>
#include <pipeprop/shape.hpp>

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "pipeprop/data/dataset.hpp"
#include "train/network_names.hpp"

namespace train {

namespace pp = pipeprop;

/// The library's models (include/pipeprop/models/), under the names the main program, bench/ and tests use.
template <class Spec>
using fan_in_uniform_init = pp::models::fan_in_uniform_init<Spec>;
template <std::size_t Out, std::size_t Kernel, std::size_t Stride = 1, std::size_t Padding = 0>
using conv = pp::models::conv<Out, Kernel, Stride, Padding>;
template <std::size_t Out>
using dense = pp::models::dense<Out>;
using small_cnn = pp::models::small_cnn;
using small_cnn_on = pp::models::small_cnn_on;
using small_cnn32 = pp::models::small_cnn32;
using mlp = pp::models::mlp;
template <std::size_t C, class Norm>
using basic_block = pp::models::basic_block<C, Norm>;
template <std::size_t C, class Norm>
using down_block = pp::models::down_block<C, Norm>;
template <class InputShape, std::size_t N, class Norm>
using resnet = pp::models::resnet<InputShape, N, Norm>;

/// The ResNets --network resnet20 | resnet32 | resnet44 | resnet56 | resnet110 selects, with --norm gn (group norm,
/// 8 groups) or on (Online Normalization) and the input --data holds (1x28x28 IDX images or 3x32x32 CIFAR-10).
/// ResNet-20 with group norm on 1x28x28: 19 convs, 2 projection shortcuts, dense(10); 81 nodes; fine-grained PB
/// gives 39 stages, the weight-layer cut (--stages layer) 20 stages (ResNet-56: 56, ResNet-110: 110).
template <std::size_t Depth, class Norm, class InputShape>
using resnet_depth = pp::models::resnet_of_depth<Depth, InputShape, Norm>;
using gn = pp::group_norm<8>;
using on = pp::online_norm<>;
using mnist_input = pp::shape<1, 28, 28>;
using cifar_input = pp::shape<3, 32, 32>;
using resnet20 = resnet_depth<20, gn, mnist_input>;
using resnet20_on = resnet_depth<20, on, mnist_input>;
using resnet20_cifar = resnet_depth<20, gn, cifar_input>;
using resnet20_on_cifar = resnet_depth<20, on, cifar_input>;
using resnet32 = resnet_depth<32, gn, mnist_input>;
using resnet32_on = resnet_depth<32, on, mnist_input>;
using resnet32_cifar = resnet_depth<32, gn, cifar_input>;
using resnet32_on_cifar = resnet_depth<32, on, cifar_input>;
using resnet44 = resnet_depth<44, gn, mnist_input>;
using resnet44_on = resnet_depth<44, on, mnist_input>;
using resnet44_cifar = resnet_depth<44, gn, cifar_input>;
using resnet44_on_cifar = resnet_depth<44, on, cifar_input>;
using resnet56 = resnet_depth<56, gn, mnist_input>;
using resnet56_on = resnet_depth<56, on, mnist_input>;
using resnet56_cifar = resnet_depth<56, gn, cifar_input>;
using resnet56_on_cifar = resnet_depth<56, on, cifar_input>;
using resnet110 = resnet_depth<110, gn, mnist_input>;
using resnet110_on = resnet_depth<110, on, mnist_input>;
using resnet110_cifar = resnet_depth<110, gn, cifar_input>;
using resnet110_on_cifar = resnet_depth<110, on, cifar_input>;

/// llama-tiny (pipeprop/models/llama_tiny.hpp).
inline constexpr std::size_t llama_tiny_length = pp::models::llama_tiny_length;
inline constexpr std::size_t llama_tiny_vocabulary = pp::models::llama_tiny_vocabulary;
using llama_tiny = pp::models::llama_tiny;
/// llama-4x128: 4 blocks of width 128 (pipeprop/models/llama_tiny.hpp).
using llama_4x128 = pp::models::llama_4x128;

/// True for a network type whose output is per-token logits [L, V] (a sequence model, trained on text).
template <class Net>
inline constexpr bool is_sequence_model = pp::layer_stack<Net, float>::output_shape::rank == 2;

/// Calls f.template operator()<Net>() with the image network type named `name` (image_network_names, or a ResNet's
/// network_type_key) and returns its result. The name is validated by the option parser; an unknown name here is a programming error
/// (std::logic_error).
template <class F>
decltype(auto) with_network(std::string_view name, F&& f) {
    if (name == "cnn") return f.template operator()<small_cnn>();
    if (name == "cnn32") return f.template operator()<small_cnn32>();
    if (name == "cnn-on") return f.template operator()<small_cnn_on>();
    if (name == "mlp") return f.template operator()<mlp>();
    if (name == "resnet20") return f.template operator()<resnet20>();
    if (name == "resnet20-on") return f.template operator()<resnet20_on>();
    if (name == "resnet20-cifar") return f.template operator()<resnet20_cifar>();
    if (name == "resnet20-on-cifar") return f.template operator()<resnet20_on_cifar>();
    if (name == "resnet32") return f.template operator()<resnet32>();
    if (name == "resnet32-on") return f.template operator()<resnet32_on>();
    if (name == "resnet32-cifar") return f.template operator()<resnet32_cifar>();
    if (name == "resnet32-on-cifar") return f.template operator()<resnet32_on_cifar>();
    if (name == "resnet44") return f.template operator()<resnet44>();
    if (name == "resnet44-on") return f.template operator()<resnet44_on>();
    if (name == "resnet44-cifar") return f.template operator()<resnet44_cifar>();
    if (name == "resnet44-on-cifar") return f.template operator()<resnet44_on_cifar>();
    if (name == "resnet56") return f.template operator()<resnet56>();
    if (name == "resnet56-on") return f.template operator()<resnet56_on>();
    if (name == "resnet56-cifar") return f.template operator()<resnet56_cifar>();
    if (name == "resnet56-on-cifar") return f.template operator()<resnet56_on_cifar>();
    if (name == "resnet110") return f.template operator()<resnet110>();
    if (name == "resnet110-on") return f.template operator()<resnet110_on>();
    if (name == "resnet110-cifar") return f.template operator()<resnet110_cifar>();
    if (name == "resnet110-on-cifar") return f.template operator()<resnet110_on_cifar>();
    throw std::logic_error("train::with_network: unknown network '" + std::string(name) + "'");
}

/// As with_network, for the text networks (text_network_names).
template <class F>
decltype(auto) with_text_network(std::string_view name, F&& f) {
    if (name == "llama-tiny") return f.template operator()<llama_tiny>();
    if (name == "llama-4x128") return f.template operator()<llama_4x128>();
    throw std::logic_error("train::with_text_network: unknown text network '" + std::string(name) + "'");
}

/// Per-sample image geometry [C, H, W] of a network's input (static-asserts a rank-3 input).
template <class Net>
constexpr pp::data::image_geometry input_geometry() {
    using in = typename Net::input_shape;
    static_assert(in::rank == 3, "train: the main program's networks take images [channels, height, width].");
    return {in::dims[0], in::dims[1], in::dims[2]};
}

}  // namespace train
