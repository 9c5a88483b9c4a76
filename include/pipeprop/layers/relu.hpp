// pipeprop/layers/relu.hpp: rectified linear unit, y = max(x, 0), any shape.
#pragma once

#include <cstddef>
#include <span>

#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// ReLU, bound form. Input and output [b, Shape...]. No parameters, no stash (p1 reads the output y).
/// p1: dx = dy where y > 0, else 0 (the derivative at 0 is taken as 0).
template <class T, class Shape>
struct relu_layer {
    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = Shape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = Shape;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = 0;
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = no_stash;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = no_workspace;

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T>, const T* x, T* y, std::size_t b, stash_type&, workspace_type&) const {
        kernels::relu_forward(b * Shape::size, x, y);
    }
    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T>, const T*, const T* y, const T* dy, T* dx, std::size_t b,
                        const stash_type&, workspace_type&) const {
        kernels::relu_backward(b * Shape::size, y, dy, dx);
    }
};

/// ReLU spec for a network list.
struct relu {
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = relu_layer<T, InputShape>;
};

}  // namespace pipeprop
