// pipeprop/layers/global_avg_pool.hpp: global average pooling, [C, H, W] -> [C] (mean over each channel plane).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include "pipeprop/detail/image_dims.hpp"
#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Global average pooling, bound form (Lin, Chen & Yan 2014, "Network In Network", §3.2). Input [b, C, H, W],
/// output [b, C]: y[n, c] = (1 / (H W)) sum over (h, w) of x[n, c, h, w].
/// p1: dx[n, c, h, w] = dy[n, c] / (H W). Assigned.
/// No parameters (no backward-p2), no stash, no workspace. Static-asserts a rank-3 input.
template <class T, class InputShape>
struct global_avg_pool_layer {
    static_assert(image_shape<InputShape>, "pipeprop::global_avg_pool: the input of a global_avg_pool layer must be "
                                           "rank 3 [channels, height, width].");
    static constexpr std::size_t channels = detail::dim_or_one<InputShape, 0>();  ///< Input channels C of [C, H, W].
    static constexpr std::size_t plane = InputShape::size / channels;  ///< Pixels averaged per channel, H W.

    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = shape<channels>;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = 0;
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = no_stash;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = no_workspace;

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T>, const T* x, T* y, std::size_t b, stash_type&, workspace_type&) const {
        const T scale = T(1) / static_cast<T>(plane);
        for (std::size_t p = 0; p < b * channels; ++p) y[p] = scale * kernels::sum(plane, x + p * plane);
    }

    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T>, const T*, const T*, const T* dy, T* dx, std::size_t b, const stash_type&,
                        workspace_type&) const {
        const T scale = T(1) / static_cast<T>(plane);
        for (std::size_t p = 0; p < b * channels; ++p) std::fill_n(dx + p * plane, plane, scale * dy[p]);
    }
};

/// Global-average-pooling spec for a network list: pipeprop::global_avg_pool.
struct global_avg_pool {
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = global_avg_pool_layer<T, InputShape>;
};

}  // namespace pipeprop
