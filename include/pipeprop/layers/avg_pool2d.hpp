// pipeprop/layers/avg_pool2d.hpp: 2-D average pooling over square windows, no padding.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include "pipeprop/detail/image_dims.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Average pooling, bound form. Input [b, C, H, W], output [b, C, OH, OW] with OH = (H - Size) / Stride + 1 and
/// OW = (W - Size) / Stride + 1 (floor division; no padding, so every window holds Size * Size inputs).
/// forward: y[n, c, oh, ow] = (1 / Size^2) * sum of the Size x Size window at (oh Stride, ow Stride).
/// p1:      dx = 0, then every window gets dy / Size^2 added (overlapping windows accumulate). Assigned.
/// No parameters (no backward-p2), no stash, no workspace. Static-asserts: rank-3 input; the window fits.
template <class T, class InputShape, std::size_t Size, std::size_t Stride>
struct avg_pool2d_layer {
    static_assert(image_shape<InputShape>,
                  "pipeprop::avg_pool2d: the input of an avg_pool2d layer must be rank 3 [channels, height, width].");
    ///@{
    /// Input dimensions of one sample [C, H, W]: channels C, height H, width W.
    static constexpr std::size_t channels = detail::dim_or_one<InputShape, 0>();
    static constexpr std::size_t height = detail::dim_or_one<InputShape, 1>();
    static constexpr std::size_t width = detail::dim_or_one<InputShape, 2>();
    ///@}
    /// True when the Size x Size window fits in H x W (vacuously for a wrong rank).
    static constexpr bool window_fits = !image_shape<InputShape> || (height >= Size && width >= Size);
    static_assert(window_fits, "pipeprop::avg_pool2d: the pooling window is larger than the input height or width.");

    /// True when the input is rank 3 and the window fits (guards the derived sizes).
    static constexpr bool shape_ok = image_shape<InputShape> && window_fits;
    ///@{
    /// Output height OH = (H - Size) / Stride + 1 and width OW = (W - Size) / Stride + 1.
    static constexpr std::size_t out_height = shape_ok ? (height - Size) / Stride + 1 : 1;
    static constexpr std::size_t out_width = shape_ok ? (width - Size) / Stride + 1 : 1;
    ///@}

    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = shape<channels, out_height, out_width>;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = 0;
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = no_stash;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = no_workspace;

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T>, const T* x, T* y, std::size_t b, stash_type&, workspace_type&) const {
        const T scale = T(1) / static_cast<T>(Size * Size);
        for (std::size_t p = 0; p < b * channels; ++p) {  // p = (n, c): one plane
            const T* xp = x + p * height * width;
            T* yp = y + p * out_height * out_width;
            for (std::size_t oh = 0; oh < out_height; ++oh) {
                T* yr = yp + oh * out_width;
                std::fill_n(yr, out_width, T(0));
                for (std::size_t kh = 0; kh < Size; ++kh) {
                    const T* xr = xp + (oh * Stride + kh) * width;
                    for (std::size_t kw = 0; kw < Size; ++kw)
                        for (std::size_t ow = 0; ow < out_width; ++ow) yr[ow] += xr[ow * Stride + kw];
                }
                for (std::size_t ow = 0; ow < out_width; ++ow) yr[ow] *= scale;
            }
        }
    }

    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T>, const T*, const T*, const T* dy, T* dx, std::size_t b, const stash_type&,
                        workspace_type&) const {
        const T scale = T(1) / static_cast<T>(Size * Size);
        std::fill_n(dx, b * input_shape::size, T(0));
        for (std::size_t p = 0; p < b * channels; ++p) {
            const T* dyp = dy + p * out_height * out_width;
            T* dxp = dx + p * height * width;
            for (std::size_t oh = 0; oh < out_height; ++oh) {
                const T* dyr = dyp + oh * out_width;
                for (std::size_t kh = 0; kh < Size; ++kh) {
                    T* dxr = dxp + (oh * Stride + kh) * width;
                    for (std::size_t kw = 0; kw < Size; ++kw)
                        for (std::size_t ow = 0; ow < out_width; ++ow) dxr[ow * Stride + kw] += scale * dyr[ow];
                }
            }
        }
    }
};

/// Average-pooling spec for a network list: pipeprop::avg_pool2d<Size, Stride = Size>.
/// Static-asserts Size, Stride >= 1.
template <std::size_t Size, std::size_t Stride = Size>
struct avg_pool2d {
    static_assert(Size > 0, "pipeprop::avg_pool2d: the window size must be at least 1.");
    static_assert(Stride > 0, "pipeprop::avg_pool2d: the stride must be at least 1.");
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = avg_pool2d_layer<T, InputShape, Size, Stride>;
};

}  // namespace pipeprop
