// pipeprop/layers/conv2d.hpp: 2-D convolution (cross-correlation) with square kernel, stride and zero padding,
// computed as im2col + GEMM (Chellapilla, Puri & Simard 2006, "High Performance Convolutional Neural Networks for
// Document Processing", §2-3: unrolling the convolution into a matrix product).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

#include "pipeprop/detail/image_dims.hpp"
#include "pipeprop/layers/conv2d_buffers.hpp"
#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/layers/conv2d_direct.hpp"
#include "pipeprop/layers/conv2d_winograd.hpp"
#include "pipeprop/kernels/gemm.hpp"
#include "pipeprop/kernels/transpose_add.hpp"
#include "pipeprop/kernels/transpose_copy.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/parameter_tensor.hpp"
#include "pipeprop/seed.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// 2-D convolution, bound form. Input [b, C, H, W], output [b, OutChannels, OH, OW] with
/// OH = (H + 2 Padding - Kernel) / Stride + 1 and OW = (W + 2 Padding - Kernel) / Stride + 1 (floor division);
/// zero padding, square Kernel x Kernel windows, cross-correlation (no kernel flip), as in common frameworks.
///
/// Parameter block: weight [OutChannels, C, Kernel, Kernel] followed by bias [OutChannels].
/// forward:  per sample n: cols_n = im2col(x_n) [C K K, OH OW]; y_n = W cols_n + bias   (GEMM OC x OHW x CKK)
/// p1:       per sample n: dcol = W^T dy_n (GEMM CKK x OHW x OC); dx_n = col2im(dcol)   (assigned)
/// With `direct` / `direct_p1` the forward / p1 read the column matrix in place from a zero-padded sample instead
/// (no im2col / col2im; conv2d_direct.hpp, which gives the summation orders). Every form runs one sample at a time,
/// the same code for every b: b = 1 and b > 1 sum in the same order.
/// With `winograd` (3x3, stride 1, padding 1, 8+ channels, 8 x 8+) all passes run F(2x2 or 4x4, 3x3) (conv2d_winograd).
/// p2:       per sample n: cols_n = im2col(x_n) again; dW += dy_n cols_n^T (added; dbias += sum over n, OH, OW of
///           dy). With direct_p2 the rows of cols_n are read in place from the padded sample instead, in the
///           transposed form below (conv2d_direct.hpp). With transposed_p2: dW^T = sum over n of cols_n dy_n^T
///           (GEMM CKK x OC x OHW, B = dy_n^T transposed into the workspace, beta 0 for n = 0 and 1 after), then
///           dW += (dW^T)^T; otherwise per sample
///           dW += dy_n cols_n^T (GEMM OC x CKK x OHW with B transposed). The two forms round differently where dW
///           is not zero before the call (e.g. gradients accumulated over micro-batches); every runner of one build
///           uses the same form, so executors stay bit-identical.
/// Init: weight ~ U(-sqrt(6 / (C K K)), sqrt(6 / (C K K))) (He uniform), bias = 0, from the given seed.
/// Stash: none beyond its size (conv2d_stash): p2 rebuilds the column matrices from x, one sample at a time in the
/// workspace (conv2d_workspace; an im2col per sample and p2, memory-bound), instead of keeping C K K * OH OW values
/// per sample (9x the input for 3x3, stride 1) for every micro-batch in flight. p1 reads only w (the current weights
/// in PB) and dy; p2 reads only dy and x. im2col / col2im: branch-free inner loops over compile-time valid ranges;
/// with stride 1 and OW == W (e.g. 3x3 with padding 1) one contiguous block per kernel offset (contiguous_rows).
/// Static-asserts: the input is rank 3; the padded input is at least one kernel wide and high.
/// Throws std::invalid_argument from forward when b is outside [1, max_b of the stash].
template <class T, class InputShape, std::size_t OutChannels, std::size_t Kernel, std::size_t Stride,
          std::size_t Padding>
struct conv2d_layer {
    static_assert(image_shape<InputShape>,
                  "pipeprop::conv2d: the input of a conv2d layer must be rank 3 [channels, height, width]; a rank-1 "
                  "input (e.g. after flatten or dense) cannot be convolved.");
    ///@{
    /// Input dimensions of one sample [C, H, W]: channels C, height H, width W.
    static constexpr std::size_t channels = detail::dim_or_one<InputShape, 0>();
    static constexpr std::size_t height = detail::dim_or_one<InputShape, 1>();
    static constexpr std::size_t width = detail::dim_or_one<InputShape, 2>();
    ///@}
    /// True when the kernel fits in the padded input (H + 2 Padding and W + 2 Padding >= Kernel); vacuously true for a
    /// wrong rank, so that the rank diagnostic is the only one.
    static constexpr bool window_fits =
        !image_shape<InputShape> || (height + 2 * Padding >= Kernel && width + 2 * Padding >= Kernel);
    static_assert(window_fits,
                  "pipeprop::conv2d: the kernel is larger than the padded input (height + 2 * padding or width + 2 * "
                  "padding is smaller than the kernel), so the output would have no rows or columns.");

    ///@{
    /// The template arguments: output channels, kernel size (square), stride, zero padding (pixels on every side).
    static constexpr std::size_t out_channels = OutChannels;
    static constexpr std::size_t kernel = Kernel;
    static constexpr std::size_t stride = Stride;
    static constexpr std::size_t padding = Padding;
    ///@}
    /// True when the input is rank 3 and the kernel fits (guards the derived sizes).
    static constexpr bool shape_ok = image_shape<InputShape> && window_fits;
    ///@{
    /// Output height OH = (H + 2 Padding - Kernel) / Stride + 1 and width OW (likewise; floor division).
    static constexpr std::size_t out_height = shape_ok ? (height + 2 * Padding - Kernel) / Stride + 1 : 1;
    static constexpr std::size_t out_width = shape_ok ? (width + 2 * Padding - Kernel) / Stride + 1 : 1;
    ///@}
    /// Rows of a column matrix (C K K) and its columns (OH OW).
    static constexpr std::size_t patch = channels * Kernel * Kernel;
    static constexpr std::size_t pixels = out_height * out_width;  ///< Columns of a column matrix: OH OW output pixels.
    /// A 1x1 kernel with stride 1 and no padding: the column matrix of a sample is the sample itself.
    static constexpr bool identity_columns = Kernel == 1 && Stride == 1 && Padding == 0;
    /// Stride 1 and an output as wide as the input ("same" padding, e.g. 3x3 with padding 1): output rows and input
    /// rows then have the same length, so for one kernel offset (kh, kw) the valid rows of a column-matrix row are ONE
    /// contiguous block of the input channel, shifted by (kh - P) W + (kw - P). im2col / col2im copy / add that block
    /// in one vectorizable loop and fix the few columns that fall in the padding.
    static constexpr bool contiguous_rows = Stride == 1 && out_width == width;
    /// Forward as a direct convolution over a zero-padded sample (conv2d_direct.hpp) instead of im2col + GEMM: stride
    /// 1, Kernel = 2 Padding + 1 > 1, where the xsimd GEMM is used (kernels::simd_gemm_preferred).
    static constexpr bool direct = kernels::simd_gemm_preferred && shape_ok && Stride == 1 && Kernel > 1 &&
                                   Kernel == 2 * Padding + 1;
    /// p1 likewise where, besides, C >= 4 (fewer rows of dx make GEMV-shaped blocks: the 1-channel stem measured
    /// half the speed of GEMM + col2im; bench/README.md, "conv2d without im2col").
    static constexpr bool direct_p1 = direct && channels >= 4;
    /// p2 likewise (dW^T = cols dy^T, the rows of cols read in place from the padded sample) where, besides, C >= 4
    /// and OutChannels is a whole number of SIMD vectors of T. At 7x7 too: its 55 rows of dy^T for 49 pixels (12%
    /// more multiply-adds) measured faster than im2col (bench/README.md, "conv2d at b = 1"). Its samples are summed
    /// in dw_t and added to dW once, as transposed_p2's; the dy cols^T form adds each sample to dW, which rounds
    /// differently where dW is not zero before a call with b >= 2 (see p2 above).
    static constexpr bool direct_p2 = direct_p1 && OutChannels % xsimd::batch<T>::size == 0;
    /// The direct convolution's geometry and passes (used only where direct is true).
    using direct_conv = detail::conv2d_direct<T, channels, height, width, OutChannels, Kernel>;
    /// All three passes by Winograd's F(m x m, 3x3) (conv2d_winograd.hpp), where detail::winograd_fits says: 3x3,
    /// stride 1, padding 1, 8+ channels in / out in whole SIMD vectors, maps from 8 x 8 (7 x 7 on AVX2), xsimd GEMM.
    static constexpr bool winograd =
        direct && Kernel == 3 && detail::winograd_fits<T, channels, OutChannels, height, width>;
    /// The Winograd form's transforms and passes, m from detail::winograd_output_tile (used only where winograd).
    using winograd_conv = detail::conv2d_winograd<T, channels, height, width, OutChannels>;
    /// Backward-p2 as cols dy^T with dy transposed in the workspace (a GEMM with B [OH OW, OC] row-major: register
    /// blocks of whole vectors of output channels, B's panel in L1) rather than dy cols^T (B transposed: the GEMM
    /// packs cols^T, C K K x OH OW values, or forms dot products along OH OW). Chosen where OutChannels fills at
    /// least two SIMD vectors of T and OH OW is at least 8 vectors long, the shapes where it measured faster than
    /// dy cols^T; below that the transposed add of dW^T costs more than it saves (bench/README.md, "conv2d
    /// backward-p2 as cols dy^T").
    static constexpr bool transposed_p2 = kernels::simd_gemm_preferred && !direct_p2 &&
                                          OutChannels >= 2 * xsimd::batch<T>::size &&
                                          pixels >= 8 * xsimd::batch<T>::size;

    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = shape<OutChannels, out_height, out_width>;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = OutChannels * patch + OutChannels;
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = conv2d_stash<T>;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = conv2d_workspace<T>;

    /// \copydoc pipeprop::layer_contract::parameter_tensors
    static constexpr std::array<parameter_tensor, 2> parameter_tensors() {
        return {parameter_tensor{"weight", 4, {OutChannels, channels, Kernel, Kernel}},
                parameter_tensor{"bias", 1, {OutChannels, 1, 1, 1}}};
    }

    /// \copydoc pipeprop::layer_contract::make_stash
    [[nodiscard]] stash_type make_stash(std::size_t max_b) const { return stash_type{max_b}; }
    /// \copydoc pipeprop::layer_contract::make_workspace
    [[nodiscard]] workspace_type make_workspace(std::size_t) const {
        workspace_type ws;
        if constexpr (winograd) {
            ws.winograd.assign(winograd_conv::workspace_size, T(0));
            return ws;
        }
        if constexpr (!identity_columns && !direct_p2) ws.columns.assign(patch * pixels, T(0));
        if constexpr (direct) {  // the padding positions of `padded` stay zero from here on
            ws.padded.assign(direct_conv::padded_size, T(0)), ws.out.assign(direct_conv::out_size, T(0));
        }
        if constexpr (direct_p2) {
            ws.dy_t.assign(direct_conv::dy_t_size, T(0));
            ws.dw_t.assign(patch * OutChannels, T(0));
        } else if constexpr (transposed_p2) {
            ws.dy_t.assign(pixels * OutChannels, T(0));
            ws.dw_t.assign(patch * OutChannels, T(0));
        }
        return ws;
    }
    /// \copydoc pipeprop::layer_contract::workspace_bytes
    [[nodiscard]] std::size_t workspace_bytes(const workspace_type& ws) const noexcept {
        return sizeof(ws) +
               (ws.columns.size() + ws.dy_t.size() + ws.dw_t.size() + ws.padded.size() + ws.out.size() +
                ws.winograd.size()) * sizeof(T);
    }

    /// \copydoc pipeprop::layer_contract::init_parameters
    void init_parameters(std::span<T> w, std::uint64_t seed) const {
        std::mt19937_64 rng(seed);
        const T bound = static_cast<T>(std::sqrt(6.0 / static_cast<double>(patch)));
        for (std::size_t i = 0; i < OutChannels * patch; ++i) w[i] = uniform<T>(rng, -bound, bound);
        for (std::size_t i = OutChannels * patch; i < parameter_count; ++i) w[i] = T(0);
    }

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws) const {
        detail::check_micro_batch(b, st.max_b, "pipeprop::conv2d::forward");
        const T* bias = w.data() + OutChannels * patch;
        if constexpr (winograd) return winograd_conv::forward(w.data(), bias, x, y, b, ws.winograd.data());
        if constexpr (direct) {
            for (std::size_t n = 0; n < b; ++n)
                direct_conv::forward(w.data(), bias, x + n * input_shape::size, y + n * output_shape::size,
                                     ws.padded.data(), ws.out.data());
            return;
        }
        for (std::size_t n = 0; n < b; ++n) {
            const T* cols = columns_of(ws, x, n);
            T* yn = y + n * output_shape::size;
            for (std::size_t o = 0; o < OutChannels; ++o) std::fill_n(yn + o * pixels, pixels, bias[o]);
            kernels::gemm(false, false, OutChannels, pixels, patch, T(1), w.data(), patch, cols, pixels, T(1), yn,
                          pixels);
        }
    }

    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T> w, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const stash_type&, workspace_type& ws) const {
        if constexpr (winograd) return winograd_conv::backward_input(w.data(), dy, dx, b, ws.winograd.data());
        if constexpr (direct_p1) {
            for (std::size_t n = 0; n < b; ++n)
                direct_conv::backward_input(w.data(), dy + n * output_shape::size, dx + n * input_shape::size,
                                            ws.padded.data(), ws.out.data());
            return;
        }
        for (std::size_t n = 0; n < b; ++n) {
            const T* dyn = dy + n * output_shape::size;
            T* dxn = dx + n * input_shape::size;
            if constexpr (identity_columns) {
                kernels::gemm(true, false, patch, pixels, OutChannels, T(1), w.data(), patch, dyn, pixels, T(0), dxn,
                              pixels);
            } else {
                T* dcol = ws.columns.data();
                kernels::gemm(true, false, patch, pixels, OutChannels, T(1), w.data(), patch, dyn, pixels, T(0), dcol,
                              pixels);
                col2im(dcol, dxn);
            }
        }
    }

    /// \copydoc pipeprop::layer_contract::backward_weight
    void backward_weight(std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b, const stash_type&,
                         workspace_type& ws) const {
        T* dbias = dw.data() + OutChannels * patch;
        if constexpr (winograd) return winograd_conv::backward_weight(x, dy, dw.data(), dbias, b, ws.winograd.data());
        for (std::size_t n = 0; n < b; ++n) {
            const T* dyn = dy + n * output_shape::size;
            if constexpr (direct_p2) {
                const T* x_n = x + n * input_shape::size;
                if (n == 0) direct_conv::template backward_weight_t<false>(x_n, dyn, ws.dw_t.data(), ws.padded.data(),
                                                                          ws.dy_t.data());
                else direct_conv::template backward_weight_t<true>(x_n, dyn, ws.dw_t.data(), ws.padded.data(),
                                                                  ws.dy_t.data());
            } else if constexpr (transposed_p2) {
                T* dyt = ws.dy_t.data();
                kernels::transpose_copy(OutChannels, pixels, dyn, pixels, dyt, OutChannels);
                kernels::gemm(false, false, patch, OutChannels, pixels, T(1), columns_of(ws, x, n), pixels, dyt,
                              OutChannels, n == 0 ? T(0) : T(1), ws.dw_t.data(), OutChannels);
            } else {
                kernels::gemm(false, true, OutChannels, patch, pixels, T(1), dyn, pixels, columns_of(ws, x, n),
                              pixels, T(1), dw.data(), patch);
            }
            for (std::size_t o = 0; o < OutChannels; ++o) dbias[o] += kernels::sum(pixels, dyn + o * pixels);
        }
        if constexpr (direct_p2 || transposed_p2) {
            if (b == 0) return;
            kernels::transpose_add(patch, OutChannels, ws.dw_t.data(), OutChannels, dw.data(), patch);
        }
    }

private:
    /// Column matrix of sample n of x: the input itself for an identity im2col, otherwise im2col(x_n) written into
    /// the workspace.
    static const T* columns_of(workspace_type& ws, const T* x, std::size_t n) noexcept {
        if constexpr (identity_columns) {
            return x + n * input_shape::size;
        } else {
            im2col(x + n * input_shape::size, ws.columns.data());
            return ws.columns.data();
        }
    }

    /// Valid output range [lo, hi) along one axis for kernel offset k: the outputs o whose input coordinate
    /// o * Stride + k - Padding lies in [0, extent). Outside it the input is zero padding.
    struct valid_range {
        std::size_t lo = 0, hi = 0;
    };
    static constexpr valid_range valid(std::size_t k, std::size_t extent, std::size_t out) noexcept {
        // o * S + k >= P  <=>  o >= ceil((P - k) / S) when P > k.
        const std::size_t lo = Padding > k ? (Padding - k + Stride - 1) / Stride : 0;
        // o * S + k - P <= extent - 1  <=>  o <= (extent - 1 + P - k) / S.
        const std::size_t hi = extent - 1 + Padding >= k ? std::min(out, (extent - 1 + Padding - k) / Stride + 1) : 0;
        return {std::min(lo, hi), hi};
    }
    static constexpr std::array<valid_range, Kernel> row_ranges = [] {
        std::array<valid_range, Kernel> r{};
        for (std::size_t k = 0; k < Kernel; ++k) r[k] = valid(k, height, out_height);
        return r;
    }();
    static constexpr std::array<valid_range, Kernel> col_ranges = [] {
        std::array<valid_range, Kernel> r{};
        for (std::size_t k = 0; k < Kernel; ++k) r[k] = valid(k, width, out_width);
        return r;
    }();

    /// Offset of input element (oh + kh - P, ow + kw - P) from output element (oh, ow) in the contiguous case.
    static constexpr std::ptrdiff_t block_shift(std::size_t kh, std::size_t kw) noexcept {
        return (static_cast<std::ptrdiff_t>(kh) - static_cast<std::ptrdiff_t>(Padding)) *
                   static_cast<std::ptrdiff_t>(width) +
               static_cast<std::ptrdiff_t>(kw) - static_cast<std::ptrdiff_t>(Padding);
    }

    /// Sets the columns outside [cr.lo, cr.hi) of the valid rows [rows.lo, rows.hi) of one column-matrix row to 0.
    static void zero_padding_columns(T* row, valid_range rows, valid_range cr) noexcept {
        for (std::size_t oh = rows.lo; oh < rows.hi; ++oh) {
            T* r = row + oh * out_width;
            for (std::size_t ow = 0; ow < cr.lo; ++ow) r[ow] = T(0);
            for (std::size_t ow = cr.hi; ow < out_width; ++ow) r[ow] = T(0);
        }
    }

    /// cols [C K K, OH OW] of one sample x [C, H, W]: cols[(c, kh, kw), (oh, ow)] = x[c, oh S + kh - P, ow S + kw - P]
    /// or 0 in the padding. Branch-free inner loops: the valid ranges are compile-time tables.
    static void im2col(const T* __restrict x, T* __restrict cols) noexcept {
        for (std::size_t c = 0; c < channels; ++c) {
            const T* xc = x + c * height * width;
            for (std::size_t kh = 0; kh < Kernel; ++kh) {
                const valid_range rows = row_ranges[kh];
                for (std::size_t kw = 0; kw < Kernel; ++kw) {
                    const valid_range cr = col_ranges[kw];
                    T* row = cols + ((c * Kernel + kh) * Kernel + kw) * pixels;
                    std::fill_n(row, rows.lo * out_width, T(0));
                    if constexpr (contiguous_rows) {
                        if (rows.lo < rows.hi && cr.lo < cr.hi) {
                            // Copy from the first to the last valid element; the padding columns in between get
                            // values of neighbouring rows and are zeroed after the copy.
                            const std::size_t first = rows.lo * out_width + cr.lo;
                            const std::size_t last = (rows.hi - 1) * out_width + cr.hi;
                            const T* __restrict src =
                                xc + (static_cast<std::ptrdiff_t>(first) + block_shift(kh, kw));
                            T* __restrict dst = row + first;
                            for (std::size_t j = 0; j < last - first; ++j) dst[j] = src[j];
                        }
                        zero_padding_columns(row, rows, cr);
                    } else {
                        for (std::size_t oh = rows.lo; oh < rows.hi; ++oh) {
                            // Input row oh S + kh - P; for ow in [cr.lo, cr.hi) the column ow S + kw - P is in [0, W).
                            const T* __restrict src = xc + (oh * Stride + kh - Padding) * width;
                            T* __restrict dst = row + oh * out_width;
                            for (std::size_t ow = 0; ow < cr.lo; ++ow) dst[ow] = T(0);
                            for (std::size_t ow = cr.lo; ow < cr.hi; ++ow) dst[ow] = src[ow * Stride + kw - Padding];
                            for (std::size_t ow = cr.hi; ow < out_width; ++ow) dst[ow] = T(0);
                        }
                    }
                    std::fill(row + rows.hi * out_width, row + pixels, T(0));
                }
            }
        }
    }

    /// dx [C, H, W] of one sample = col2im(dcol): dx[c, ih, iw] = sum of dcol[(c, kh, kw), (oh, ow)] over the
    /// windows that cover (ih, iw). dx is assigned. dcol is scratch: its padding columns may be overwritten with 0.
    static void col2im(T* __restrict dcol, T* __restrict dx) noexcept {
        std::fill_n(dx, input_shape::size, T(0));
        for (std::size_t c = 0; c < channels; ++c) {
            T* dxc = dx + c * height * width;
            for (std::size_t kh = 0; kh < Kernel; ++kh) {
                const valid_range rows = row_ranges[kh];
                for (std::size_t kw = 0; kw < Kernel; ++kw) {
                    const valid_range cr = col_ranges[kw];
                    T* row = dcol + ((c * Kernel + kh) * Kernel + kw) * pixels;
                    if constexpr (contiguous_rows) {
                        if (rows.lo < rows.hi && cr.lo < cr.hi) {
                            // Zero the gradients of padding positions, then add the block in one loop: the zeros
                            // land on neighbouring-row elements and change nothing.
                            zero_padding_columns(row, rows, cr);
                            const std::size_t first = rows.lo * out_width + cr.lo;
                            const std::size_t last = (rows.hi - 1) * out_width + cr.hi;
                            T* __restrict dst = dxc + (static_cast<std::ptrdiff_t>(first) + block_shift(kh, kw));
                            const T* __restrict src = row + first;
                            for (std::size_t j = 0; j < last - first; ++j) dst[j] += src[j];
                        }
                    } else {
                        for (std::size_t oh = rows.lo; oh < rows.hi; ++oh) {
                            T* __restrict dst = dxc + (oh * Stride + kh - Padding) * width;
                            const T* __restrict src = row + oh * out_width;
                            for (std::size_t ow = cr.lo; ow < cr.hi; ++ow) dst[ow * Stride + kw - Padding] += src[ow];
                        }
                    }
                }
            }
        }
    }
};

/// Conv2d spec for a network list: pipeprop::conv2d<OutChannels, Kernel, Stride = 1, Padding = 0>.
/// Static-asserts OutChannels, Kernel and Stride >= 1.
template <std::size_t OutChannels, std::size_t Kernel, std::size_t Stride = 1, std::size_t Padding = 0>
struct conv2d {
    static_assert(OutChannels > 0, "pipeprop::conv2d: the number of output channels must be at least 1.");
    static_assert(Kernel > 0, "pipeprop::conv2d: the kernel size must be at least 1.");
    static_assert(Stride > 0, "pipeprop::conv2d: the stride must be at least 1.");
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = conv2d_layer<T, InputShape, OutChannels, Kernel, Stride, Padding>;
};

}  // namespace pipeprop
