// pipeprop/layers/max_pool2d.hpp: 2-D max pooling over square windows, no padding.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

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
        if constexpr (pairs) {
            for (std::size_t n = 0; n < b; ++n)
                forward_pairs(x + n * input_shape::size, y + n * output_shape::size,
                              st.argmax.data() + n * output_shape::size);
            return;
        }
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
        if constexpr (dense_p1) {
            for (std::size_t n = 0; n < b; ++n)
                backward_pairs(dy + n * output_shape::size, dx + n * input_shape::size,
                               st.argmax.data() + n * output_shape::size);
            return;
        }
        std::fill_n(dx, b * input_shape::size, T(0));
        for (std::size_t n = 0; n < b; ++n) {
            const T* dyn = dy + n * output_shape::size;
            T* dxn = dx + n * input_shape::size;
            const std::uint32_t* an = st.argmax.data() + n * output_shape::size;
            for (std::size_t o = 0; o < output_shape::size; ++o) dxn[an[o]] += dyn[o];
        }
    }

    /// 2 x 2 windows with stride 2 (the usual pooling): windows do not overlap, so the forward reads each row pair
    /// once and compares the four values in the general form's order (the same maxima, the same indices).
    static constexpr bool pairs = Size == 2 && Stride == 2;
    /// p1 of pairs writes every input gradient once (0 + dy at the winner, 0 elsewhere: the general form's bits)
    /// instead of zeroing and scattering. Only from 10 outputs per row: with shorter rows the scatter was faster in
    /// the benchmark on 28 x 28 / 14 x 14 / 16 x 16 / 20 x 20 / 64 x 64 maps. For 32- and 64-bit T (bit masks).
    static constexpr bool dense_p1 = pairs && out_width >= 10 && (sizeof(T) == 4 || sizeof(T) == 8);

private:
    /// forward of one sample, 2 x 2 windows with stride 2.
    static void forward_pairs(const T* __restrict x, T* __restrict y, std::uint32_t* __restrict argmax) noexcept {
        constexpr auto w = static_cast<std::uint32_t>(width);
        for (std::size_t c = 0; c < channels; ++c)
            for (std::size_t oh = 0; oh < out_height; ++oh) {
                const std::size_t first = (c * height + 2 * oh) * width;
                const T* __restrict r0 = x + first;
                const T* __restrict r1 = r0 + width;
                const std::size_t o = (c * out_height + oh) * out_width;
                for (std::size_t ow = 0; ow < out_width; ++ow) {
                    const auto i = static_cast<std::uint32_t>(first + 2 * ow);
                    T best = r0[2 * ow];
                    std::uint32_t at = i;
                    const T v01 = r0[2 * ow + 1], v10 = r1[2 * ow], v11 = r1[2 * ow + 1];
                    at = v01 > best ? i + 1 : at;
                    best = v01 > best ? v01 : best;
                    at = v10 > best ? i + w : at;
                    best = v10 > best ? v10 : best;
                    at = v11 > best ? i + w + 1 : at;
                    best = v11 > best ? v11 : best;
                    y[o + ow] = best;
                    argmax[o + ow] = at;
                }
            }
    }

    /// p1 of one sample, 2 x 2 windows with stride 2: the four gradients of each window as bit masks of 0 + dy (no
    /// branch: a select compiled to a branch mispredicts on ties and random winners).
    static void backward_pairs(const T* __restrict dy, T* __restrict dx,
                               const std::uint32_t* __restrict argmax) noexcept {
        using bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
        constexpr auto w = static_cast<std::uint32_t>(width);
        if constexpr (height % 2 != 0 || width % 2 != 0) std::fill_n(dx, input_shape::size, T(0));  // dropped edges
        for (std::size_t c = 0; c < channels; ++c)
            for (std::size_t oh = 0; oh < out_height; ++oh) {
                const std::size_t first = (c * height + 2 * oh) * width;
                const std::size_t o = (c * out_height + oh) * out_width;
                for (std::size_t ow = 0; ow < out_width; ++ow) {
                    const bits g = std::bit_cast<bits>(T(0) + dy[o + ow]);
                    const std::uint32_t k = argmax[o + ow] - static_cast<std::uint32_t>(first + 2 * ow);
                    const std::size_t i = first + 2 * ow;
                    dx[i] = std::bit_cast<T>(g & (bits(0) - bits(k == 0)));
                    dx[i + 1] = std::bit_cast<T>(g & (bits(0) - bits(k == 1)));
                    dx[i + width] = std::bit_cast<T>(g & (bits(0) - bits(k == w)));
                    dx[i + width + 1] = std::bit_cast<T>(g & (bits(0) - bits(k == w + 1)));
                }
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
