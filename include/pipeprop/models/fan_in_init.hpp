// pipeprop/models/fan_in_init.hpp: PyTorch's default initialization for the weight layers of the library's models.
//
// fan_in_uniform_init<Spec> is the layer of Spec (a layer whose first parameter tensor is "weight" [out, ...] and
// whose remaining elements are its bias) initialized as PyTorch initializes nn.Linear / nn.Conv2d weights:
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = weight elements / out, bias 0, drawn from the layer's seed (a
// std::mt19937_64). Against the layers' own He-uniform default (bound sqrt(6 / fan_in)) the weight variance is 6x
// smaller, which is what the models' training recipes were measured with. Shapes, stash and passes: Spec's layer's.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

#include "pipeprop/layers/conv2d.hpp"
#include "pipeprop/layers/dense.hpp"
#include "pipeprop/seed.hpp"

namespace pipeprop::models {

/// Spec adapter: Spec's layer with PyTorch's default weight initialization (see the file comment).
template <class Spec>
struct fan_in_uniform_init {
    template <class T, class InputShape>
    /// Spec's layer bound to T and InputShape, with init_parameters replaced by PyTorch's fan-in uniform init.
    struct bind : Spec::template bind<T, InputShape> {
        using base = typename Spec::template bind<T, InputShape>;  ///< The wrapped layer type.
        static_assert(base::parameter_count > 0, "pipeprop::models::fan_in_uniform_init: the layer has no parameters.");

        /// Assigns w [parameter_count]: the weight tensor uniformly in +-1/sqrt(fan_in), the rest (bias) zero.
        void init_parameters(std::span<T> w, std::uint64_t seed) const {
            constexpr auto tensors = base::parameter_tensors();
            constexpr std::size_t weights = tensors[0].size();
            constexpr std::size_t fan_in = weights / tensors[0].dims[0];
            const T bound = static_cast<T>(1.0 / std::sqrt(static_cast<double>(fan_in)));
            std::mt19937_64 rng(seed);
            for (std::size_t i = 0; i < weights; ++i) w[i] = uniform<T>(rng, -bound, bound);
            for (std::size_t i = weights; i < base::parameter_count; ++i) w[i] = T(0);
        }
    };
};

/// conv2d<Out, Kernel, Stride, Padding> with PyTorch's default initialization.
template <std::size_t Out, std::size_t Kernel, std::size_t Stride = 1, std::size_t Padding = 0>
using conv = fan_in_uniform_init<conv2d<Out, Kernel, Stride, Padding>>;
/// dense<Out> with PyTorch's default initialization.
template <std::size_t Out>
using dense = fan_in_uniform_init<pipeprop::dense<Out>>;

}  // namespace pipeprop::models
