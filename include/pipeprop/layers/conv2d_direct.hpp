// pipeprop/layers/conv2d_direct.hpp: conv2d's forward and backward-p1 for stride 1 and "same" padding (Kernel =
// 2 Padding + 1, e.g. 3x3 with padding 1) without im2col: a direct convolution ("implicit GEMM") that reads the
// column matrix's rows in place from a zero-padded copy of one sample (kernels/shifted_gemm.hpp).
//
// Padded layout of one sample with Ch channels [Ch, H, W]: per channel, R = H + 2 P + 1 rows of Wp = W + P values;
// input row h is padded row h + P, input column x is padded column x + P; every other position is zero. The P zero
// columns at the start of a padded row serve as the right padding of the row above as well (a read past the end of
// a row lands in the next row's leading zeros), so a row needs only W + P values. Output pixel (oh, ow) is column
// q = oh Wp + ow of a padded-width output [M, Np] (Np = H Wp rounded up to the SIMD width); the columns with
// ow >= W or q >= H Wp are computed and discarded (Wp / W and the rounding: 4% extra multiply-adds at 28 x 28, 7% at
// 14 x 14, 31% at 7 x 7, against the im2col copy of K^2 times the input they replace). Column (c, kh, kw) of the
// im2col matrix is the padded input read at offset c R Wp + kh Wp + kw, so
//   forward: y_n [OC, OH OW] = W [OC, C K K] cols(x_n) + bias   (a chain of fused multiply-adds over (c, kh, kw) in
//            that order, then + bias rounded once: the same arithmetic as the im2col GEMM's 8 x 2 / 8 x 1 blocks);
//   p2:      dW^T [C K K, OC] (+)= cols(x_n) dy_n^T with dy_n^T written in the padded-width layout [Np, OC] (zero
//            rows for the discarded columns, so they add nothing) and the rows of cols(x_n) read in place from the
//            padded sample (kernels::shifted_rows_gemm): a chain of fused multiply-adds over q < p2_depth per
//            element, the samples of a micro-batch added in order; the caller adds dW^T's transpose to dW;
//   p1:      dx_n = conv(dy_n, W') with W'[c, (o, kh, kw)] = W[o, c, K - 1 - kh, K - 1 - kw] (the transposed
//            convolution of a stride-1 "same" convolution is a "same" convolution with the kernel transposed in
//            channels and rotated by 180 degrees), W' read in place from W at per-column offsets
//            (kernels::shifted_gemm_indexed_a: no copy of the weights per call): one fused multiply-add chain over
//            (o, kh, kw), assigned. This sums in another order than im2col's W^T dy followed by col2im (which adds
//            the K^2 partial sums of each input pixel after the GEMM), so p1's last bits differ from the im2col form
//            of other builds; within a build every runner and every b uses this form.
// One sample at a time (its padded copy, Ch (H + 2P + 1)(W + P) values, and the output [M, Np] stay in L1 / L2 while
// the GEMM reads them); the same code for every micro-batch size b, so a sample's result does not depend on b.
#pragma once

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <array>
#include <cstddef>

#include "pipeprop/kernels/shifted_gemm.hpp"
#include "pipeprop/kernels/transpose_copy.hpp"

namespace pipeprop::detail {

/// Direct stride-1 "same" convolution of [C, H, W] samples into [OC, H, W] (see the file comment), Kernel odd.
template <class T, std::size_t C, std::size_t H, std::size_t W, std::size_t OC, std::size_t Kernel>
struct conv2d_direct {
    static constexpr std::size_t pad = (Kernel - 1) / 2;  ///< P: zero padding on every side.
    static constexpr std::size_t row = W + pad;  ///< Wp: values per padded row.
    static constexpr std::size_t channel = (H + 2 * pad + 1) * row;  ///< Values per padded channel, R Wp.
    static constexpr std::size_t vec = xsimd::batch<T>::size;  ///< SIMD width of T.
    /// Np: columns of the padded-width output, H Wp rounded up to the SIMD width.
    static constexpr std::size_t columns = (H * row + vec - 1) / vec * vec;
    static constexpr std::size_t max_channels = std::max(C, OC);  ///< Channels of the padded buffer (x or dy).
    /// Values of the padded buffer: max_channels padded channels and 2 vectors of zeros that the discarded columns of
    /// the last channel may read.
    static constexpr std::size_t padded_size = max_channels * channel + 2 * vec;
    static constexpr std::size_t out_size = max_channels * columns;  ///< Values of the output buffer [M, Np].

    /// Offsets of the rows (ch, kh, kw) of the column matrix of a Ch-channel padded sample.
    template <std::size_t Ch>
    static constexpr std::array<std::ptrdiff_t, Ch * Kernel * Kernel> offsets = [] {
        std::array<std::ptrdiff_t, Ch * Kernel * Kernel> o{};
        for (std::size_t c = 0; c < Ch; ++c)
            for (std::size_t kh = 0; kh < Kernel; ++kh)
                for (std::size_t kw = 0; kw < Kernel; ++kw)
                    o[(c * Kernel + kh) * Kernel + kw] = static_cast<std::ptrdiff_t>(c * channel + kh * row + kw);
        return o;
    }();

    /// Copies the Ch channels of one sample src [Ch, H, W] into the data positions of padded (whose other positions
    /// are zero from the workspace's allocation and never written).
    template <std::size_t Ch>
    static void pad_sample(const T* __restrict src, T* __restrict padded) noexcept {
        for (std::size_t c = 0; c < Ch; ++c)
            for (std::size_t h = 0; h < H; ++h)
                std::copy_n(src + (c * H + h) * W, W, padded + c * channel + (h + pad) * row + pad);
    }

    /// Forward of one sample: y [OC, H, W] = conv(x [C, H, W], w [OC, C K K]) + bias [OC] (assigned). padded and
    /// out are workspace buffers of padded_size and out_size values.
    static void forward(const T* w, const T* bias, const T* x, T* __restrict y, T* padded, T* out) noexcept {
        pad_sample<C>(x, padded);
        kernels::shifted_gemm(OC, columns, C * Kernel * Kernel, w, C * Kernel * Kernel, padded, offsets<C>.data(), out,
                              columns);
        for (std::size_t o = 0; o < OC; ++o)
            for (std::size_t h = 0; h < H; ++h) {
                const T* __restrict src = out + o * columns + h * row;
                T* __restrict dst = y + (o * H + h) * W;
                for (std::size_t x0 = 0; x0 < W; ++x0) dst[x0] = src[x0] + bias[o];
            }
    }

    static constexpr std::size_t dy_t_size = columns * OC;  ///< Values of p2's dy^T buffer [Np, OC].
    /// The rows of dy^T that p2's GEMM sums over: up to the last output pixel, (H - 1) Wp + W. The rows after it are
    /// zero and would add only zero products, so stopping there gives the same sums with fewer multiply-adds (7 x 7
    /// floats: 55 rows instead of 64 with AVX-512, of 56 with AVX2), bit for bit except where a partial sum has
    /// underflowed to -0 (a zero product used to turn it into +0) or the input holds an infinity (whose product with
    /// a zero row used to give NaN).
    static constexpr std::size_t p2_depth = (H - 1) * row + W;

    /// Backward-p2 of one sample: dw_t [C K K, OC] = cols(x [C, H, W]) dy [OC, H, W]^T, or += with Accumulate. padded
    /// as in forward, dy_t a buffer of dy_t_size values.
    template <bool Accumulate>
    static void backward_weight_t(const T* x, const T* __restrict dy, T* dw_t, T* padded, T* __restrict dy_t) noexcept {
        pad_sample<C>(x, padded);
        for (std::size_t h = 0; h < H; ++h) {
            kernels::transpose_copy(OC, W, dy + h * W, H * W, dy_t + h * row * OC, OC);
            for (std::size_t x0 = W; x0 < row; ++x0)
                for (std::size_t o = 0; o < OC; ++o) dy_t[(h * row + x0) * OC + o] = T(0);
        }
        kernels::shifted_rows_gemm<Accumulate>(C * Kernel * Kernel, OC, p2_depth, padded, offsets<C>.data(), dy_t, OC,
                                               dw_t, OC);
    }

    /// Column offsets of p1's weights W' [C, OC K K] in w [OC, C, K, K]: W'[c, (o, kh, kw)] = w[o, c, K - 1 - kh,
    /// K - 1 - kw] is w[c K K + flipped_offsets[(o, kh, kw)]], flipped_offsets[(o, t)] = o C K K + K K - 1 - t.
    static constexpr std::array<std::ptrdiff_t, OC * Kernel * Kernel> flipped_offsets = [] {
        constexpr std::size_t kk = Kernel * Kernel;
        std::array<std::ptrdiff_t, OC * kk> o{};
        for (std::size_t oc = 0; oc < OC; ++oc)
            for (std::size_t t = 0; t < kk; ++t) o[oc * kk + t] = static_cast<std::ptrdiff_t>(oc * C * kk + kk - 1 - t);
        return o;
    }();

    /// Backward-p1 of one sample: dx [C, H, W] = conv(dy [OC, H, W], W') with W' read from w [OC, C, K, K] (assigned).
    /// padded and out as in forward.
    static void backward_input(const T* w, const T* dy, T* __restrict dx, T* padded, T* out) noexcept {
        pad_sample<OC>(dy, padded);
        kernels::shifted_gemm_indexed_a(C, columns, OC * Kernel * Kernel, w, Kernel * Kernel, flipped_offsets.data(),
                                        padded, offsets<OC>.data(), out, columns);
        for (std::size_t c = 0; c < C; ++c)
            for (std::size_t h = 0; h < H; ++h) std::copy_n(out + c * columns + h * row, W, dx + (c * H + h) * W);
    }
};

}  // namespace pipeprop::detail
