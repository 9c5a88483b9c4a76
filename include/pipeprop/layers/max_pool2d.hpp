// pipeprop/layers/max_pool2d.hpp: 2-D max pooling over square windows, no padding.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "pipeprop/detail/image_dims.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Stash of max_pool2d for one micro-batch: for every output element, the index (within its sample,
/// c * H * W + ih * W + iw) of the input element that won the window. argmax: [max_b, C, OH, OW].
struct max_pool2d_stash {
    /// [max_b, C, OH, OW]: index within its sample of each window's winning input.
    detail::aligned_buffer<std::uint32_t> argmax;
    std::size_t max_b = 0;  ///< The micro-batch capacity (make_stash); forward checks b against it.
};

/// Max pooling, bound form. Input [b, C, H, W], output [b, C, OH, OW] with OH = (H - Size) / Stride + 1 and
/// OW = (W - Size) / Stride + 1 (floor division; no padding, trailing rows/columns that do not fill a window are
/// dropped). Windows may overlap (Stride < Size).
/// forward: y[n, c, oh, ow] = max over the Size x Size window at (oh Stride, ow Stride); the first maximum in
///          row-major window order wins ties; its position is stashed.
/// p1:      dx = 0, then dx[argmax] += dy for every output (overlapping windows accumulate). Assigned.
/// No parameters (no backward-p2). Static-asserts: rank-3 input; the window fits in the input; the sample has
/// fewer than 2^32 elements (stash indices are 32-bit). Throws std::invalid_argument from forward when b is outside
/// [1, max_b of the stash].
template <class T, class InputShape, std::size_t Size, std::size_t Stride>
struct max_pool2d_layer {
    static_assert(image_shape<InputShape>,
                  "pipeprop::max_pool2d: the input of a max_pool2d layer must be rank 3 [channels, height, width].");
    ///@{
    /// Input dimensions of one sample [C, H, W]: channels C, height H, width W.
    static constexpr std::size_t channels = detail::dim_or_one<InputShape, 0>();
    static constexpr std::size_t height = detail::dim_or_one<InputShape, 1>();
    static constexpr std::size_t width = detail::dim_or_one<InputShape, 2>();
    ///@}
    /// True when the Size x Size window fits in H x W (vacuously for a wrong rank).
    static constexpr bool window_fits = !image_shape<InputShape> || (height >= Size && width >= Size);
    static_assert(window_fits, "pipeprop::max_pool2d: the pooling window is larger than the input height or width.");
    static_assert(InputShape::size <= std::numeric_limits<std::uint32_t>::max(),
                  "pipeprop::max_pool2d: a sample must have fewer than 2^32 elements (32-bit argmax indices).");

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
    using stash_type = max_pool2d_stash;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = no_workspace;

    /// \copydoc pipeprop::layer_contract::make_stash
    [[nodiscard]] stash_type make_stash(std::size_t max_b) const {
        stash_type st;
        st.max_b = max_b;
        st.argmax.assign(max_b * output_shape::size, 0);
        return st;
    }
    /// \copydoc pipeprop::layer_contract::stash_bytes
    [[nodiscard]] std::size_t stash_bytes(const stash_type& st) const noexcept {
        return sizeof(stash_type) + st.argmax.size() * sizeof(std::uint32_t);
    }

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T>, const T* x, T* y, std::size_t b, stash_type& st, workspace_type&) const {
        detail::check_micro_batch(b, st.max_b, "pipeprop::max_pool2d::forward");
        for (std::size_t n = 0; n < b; ++n) {
            const T* xn = x + n * input_shape::size;
            T* yn = y + n * output_shape::size;
            std::uint32_t* an = st.argmax.data() + n * output_shape::size;
            for (std::size_t c = 0; c < channels; ++c) {
                const std::size_t plane = c * height * width;
                for (std::size_t oh = 0; oh < out_height; ++oh) {
                    for (std::size_t ow = 0; ow < out_width; ++ow) {
                        std::size_t best_i = plane + oh * Stride * width + ow * Stride;
                        T best = xn[best_i];
                        for (std::size_t kh = 0; kh < Size; ++kh) {
                            const std::size_t row = plane + (oh * Stride + kh) * width + ow * Stride;
                            for (std::size_t kw = 0; kw < Size; ++kw) {
                                const T v = xn[row + kw];
                                const bool better = v > best;
                                best = better ? v : best;
                                best_i = better ? row + kw : best_i;
                            }
                        }
                        const std::size_t o = (c * out_height + oh) * out_width + ow;
                        yn[o] = best;
                        an[o] = static_cast<std::uint32_t>(best_i);
                    }
                }
            }
        }
    }

    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T>, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type&) const {
        std::fill_n(dx, b * input_shape::size, T(0));
        for (std::size_t n = 0; n < b; ++n) {
            const T* dyn = dy + n * output_shape::size;
            T* dxn = dx + n * input_shape::size;
            const std::uint32_t* an = st.argmax.data() + n * output_shape::size;
            for (std::size_t o = 0; o < output_shape::size; ++o) dxn[an[o]] += dyn[o];
        }
    }
};

/// Max-pooling spec for a network list: pipeprop::max_pool2d<Size, Stride = Size>. Static-asserts Size, Stride >= 1.
template <std::size_t Size, std::size_t Stride = Size>
struct max_pool2d {
    static_assert(Size > 0, "pipeprop::max_pool2d: the window size must be at least 1.");
    static_assert(Stride > 0, "pipeprop::max_pool2d: the stride must be at least 1.");
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = max_pool2d_layer<T, InputShape, Size, Stride>;
};

}  // namespace pipeprop
