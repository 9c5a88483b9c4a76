// pipeprop/layers/flatten.hpp: reshape [b, d0, d1, ...] to [b, d0 * d1 * ...]; values are copied unchanged.
#pragma once

#include <cstddef>
#include <span>

#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Flatten, bound form. Input [b, Shape...], output [b, Shape::size]. No parameters. p1 copies dy to dx.
template <class T, class Shape>
struct flatten_layer {
    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = Shape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = shape<Shape::size>;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = 0;
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = no_stash;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = no_workspace;

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T>, const T* x, T* y, std::size_t b, stash_type&, workspace_type&) const {
        kernels::copy(b * Shape::size, x, y);
    }
    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T>, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const stash_type&, workspace_type&) const {
        kernels::copy(b * Shape::size, dy, dx);
    }
};

/// Flatten spec for a network list.
struct flatten {
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = flatten_layer<T, InputShape>;
};

}  // namespace pipeprop
