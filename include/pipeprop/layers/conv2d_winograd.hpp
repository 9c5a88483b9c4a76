// pipeprop/layers/conv2d_winograd.hpp: conv2d's three passes for a 3x3 kernel, stride 1 and padding 1 by Winograd's
// minimal filtering F(m x m, 3x3), m = 2 or 4 (Lavin & Gray 2016, "Fast Algorithms for Convolutional Neural
// Networks", §4): (m + 2)^2 multiplications per m x m output tile and channel pair instead of 9 m^2, so 2.25x (m = 2)
// or 4x (m = 4) fewer multiply-adds where the output is a whole number of tiles (an odd size such as 7 x 7 computes
// the last tiles' extra rows / columns). winograd_output_tile picks m per layer shape.
//
// With alpha = m + 2, d an alpha x alpha input tile, g a 3x3 kernel, e an m x m output-gradient tile, B^T, G, A^T the
// matrices of layers/winograd_matrices.hpp, and xi one of the alpha^2 points of a tile:
//   forward: U = G g G^T per (o, c); V = B^T d B per (tile, c); M[xi] = V[xi] U[xi] (a GEMM [tiles, C] x [C, OC]
//            per xi); y tile = A^T M A + bias (cropped at the map's height / width);
//   p1:      the same with dy as input and the kernel rotated by 180 degrees and transposed in channels (a stride-1
//            "same" convolution's input gradient is such a convolution), no bias; dx assigned;
//   p2:      the exact gradient of the forward's algorithm: dM = A e A^T per (tile, o), dU[xi] (+)= V[xi]^T dM[xi]
//            (a GEMM [C, tiles] x [tiles, OC] per xi, the samples of a micro-batch added in order), then once per call
//            dW += G^T dU G; dbias += the sum of dy per channel (as the direct form).
// Rounding: the transforms add and subtract (and scale) before the multiplications, so the results differ from a
// direct convolution's in the last bits. Against the exact convolution in float at ResNet's 28 x 28 and 14 x 14
// shapes, max |y - exact| / max |exact|: m = 2, 1.8e-7 to 2.8e-7 for the forward and p1 (the direct kernel: 4e-7 to
// 7e-7), up to 1.2e-6 for p2 at b = 1 (a sum over 196 tiles; 2.2e-6 at b = 8); m = 4, 1e-6 to 5e-6 for all three at
// b = 1, p2 up to 6.5e-6 at b = 8 (its transforms multiply by up to 8, its G holds 1/6, 1/12, 1/24); in double
// 6e-16 to 2.6e-15 (m = 2) and up to 1e-14 (m = 4). The GEMMs are kernels::small_gemm (one fused
// multiply-add chain per element). Every runner of a build calls the same code for every micro-batch size, one
// sample at a time, so executors stay bit-identical.
// Shapes: x, y, dy, dx are [b, C or OC, H, W] row-major (micro-batch first), w [OC, C, 3, 3] then bias [OC]; units
// those of the values. Errors: none here (no allocation, no throw): conv2d checks b against its stash first.
// Work done twice by design: p2 rebuilds the padded copy and V from x (as the direct form rebuilds its columns)
// instead of keeping alpha^2 x tiles x C values per sample in the stash for every micro-batch in flight.
// Layouts (per sample; channel-last so that the transforms vectorize over channels): a zero-padded copy
// [m tiles_h + 2, m tiles_w + 2, Ch]; V [alpha^2][tiles, Ch]; M [alpha^2][tiles, Och]; U [alpha^2][Ch, Och]; the
// output tiles [m tiles_h, m tiles_w, Och] before the transpose into [Och, H, W]; the kernels transposed one block
// at a time (vw input channels' [vw 9, OC] for the forward's U and p2's G^T dU G, one output channel's [9, C] for
// p1's U), never the whole weight tensor. Planes are padded by 16 values:
// 4 KiB apart they alias in the L1 cache (measured 3x slower transforms at 7 x 7). The transforms and the GEMM
// blocks are never inlined (PIPEPROP_REGISTER_KERNEL): inlined into a whole network's layer code, F(4x4, 3x3)'s
// measured no faster than F(2x2, 3x3)'s in the ResNet-20 step, and F(2x2, 3x3)'s 7 x 7 layers 10% slower.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>

#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/kernels/register_kernel.hpp"
#include "pipeprop/kernels/small_gemm.hpp"
#include "pipeprop/kernels/transpose_add.hpp"
#include "pipeprop/kernels/transpose_copy.hpp"
#include "pipeprop/layers/winograd_matrices.hpp"

namespace pipeprop::detail {

/// The smallest map height and width that take the Winograd form: 7 with vectors of 256 bits or less (AVX2), else 8
/// (see winograd_fits).
template <class T>
inline constexpr std::size_t winograd_min_map = sizeof(xsimd::batch<T>) <= 32 ? 7 : 8;

/// Where conv2d (3x3, stride 1, padding 1, with the xsimd GEMM) takes the Winograd form: 8+ channels in and out, in
/// whole SIMD vectors of T (the transforms run on vectors of channels), and maps of 8 x 8 or larger, or 7 x 7 or
/// larger with vectors of 256 bits or less (AVX2). At 7 x 7 (ResNet's last stage) 16 tiles cover 8 x 8 (1.72x fewer
/// multiply-adds, not 2.25x) and the transformed weights (16 C OC values, 1.8x the weights) are written and read in
/// every pass: with AVX2, whose direct kernel runs near 80% of its peak, the ResNet-20 step measured 5% faster at
/// b = 1 and 15% at b = 32 with them in Winograd form; with AVX-512 the b = 1 step measured 10% slower, so they stay
/// direct there (bench/README.md, "Winograd convolutions").
template <class T, std::size_t C, std::size_t OC, std::size_t H, std::size_t W>
inline constexpr bool winograd_fits = C >= 8 && OC >= 8 && C % xsimd::batch<T>::size == 0 &&
                                      OC % xsimd::batch<T>::size == 0 && H >= winograd_min_map<T> &&
                                      W >= winograd_min_map<T>;

/// The multiplications of F(m x m, 3x3) per channel pair on an H x W map: (m + 2)^2 per tile, partial tiles whole.
template <std::size_t M, std::size_t H, std::size_t W>
inline constexpr std::size_t winograd_products = (H + M - 1) / M * ((W + M - 1) / M) * (M + 2) * (M + 2);

/// The output tile m of F(m x m, 3x3) where winograd_fits: 4 on maps of 12 x 12 or larger where F(4x4, 3x3) does at
/// most 2/3 of F(2x2, 3x3)'s multiplications, else 2. At 28 x 28 it does 0.56 of them and a ResNet-20 28 x 28
/// layer measured 1.1-1.5x faster alone; at 14 x 14, whose 4 x 4 tiles cover 16 x 16, 0.73, and the step measured
/// no faster; at 7 x 7 (4 tiles) the transformed weights' 36 planes cost what the GEMMs save.
template <std::size_t H, std::size_t W>
inline constexpr std::size_t winograd_output_tile =
    H >= 12 && W >= 12 && 3 * winograd_products<4, H, W> <= 2 * winograd_products<2, H, W> ? 4 : 2;

/// F(M x M, 3x3) convolution of [C, H, W] samples into [OC, H, W] (3x3 kernel, stride 1, padding 1; see the file
/// comment); C and OC whole numbers of SIMD vectors of T; M = 2 or 4. The workspace is one buffer of workspace_size
/// values (make it zero: the padding positions stay zero).
template <class T, std::size_t C, std::size_t H, std::size_t W, std::size_t OC,
          std::size_t M = winograd_output_tile<H, W>>
struct conv2d_winograd {
    using batch = xsimd::batch<T>;
    using matrices = winograd_matrices<M>;
    static_assert(M == 2 || M == 4, "pipeprop::conv2d (Winograd form): the output tile must be 2 or 4.");
    /// The output tile m and the input tile alpha = m + 2; points = alpha^2 products per tile and channel pair.
    static constexpr std::size_t output_tile = M, vw = batch::size, alpha = matrices::alpha, points = alpha * alpha;
    static_assert(C % vw == 0 && OC % vw == 0,
                  "pipeprop::conv2d (Winograd form): the channel counts must be whole numbers of SIMD vectors.");
    static constexpr std::size_t tiles_h = (H + M - 1) / M, tiles_w = (W + M - 1) / M, tiles = tiles_h * tiles_w;
    static constexpr std::size_t padded_h = M * tiles_h + 2, padded_w = M * tiles_w + 2, out_w = M * tiles_w;
    static constexpr std::size_t wide = C > OC ? C : OC;  // the larger channel count (p1 swaps them)
    // Tiles go through the transforms and GEMMs in blocks of block_rows tile rows (about block_target tiles), whose
    // V and M stay in L1 / L2 from one block to the next instead of streaming every point's plane through memory.
    static constexpr std::size_t block_target = M == 2 ? 32 : 16;
    static constexpr std::size_t block_rows =
        tiles_w >= block_target ? 1 : (block_target / tiles_w < tiles_h ? block_target / tiles_w : tiles_h);
    static constexpr std::size_t block_tiles = block_rows * tiles_w, last_rows = tiles_h % block_rows;
    static constexpr std::size_t tile_plane = block_tiles * wide + 16;
    static constexpr std::size_t weight_plane = C * OC + 16;
    // The transposed kernels of one block: vw channels c's [vw 9, OC] (forward, p2) or one o's [9, C] (p1).
    static constexpr std::size_t weight_block = 9 * (vw * OC > C ? vw * OC : C);
    // workspace parts: padded input (C channels), padded dy (OC channels), output tiles, dy tiles (zero where
    // cropped), one block of transposed kernels, V, M, U, dU
    static constexpr std::size_t padded_c = padded_h * padded_w * C, padded_o = padded_h * padded_w * OC;
    static constexpr std::size_t at_padded_o = padded_c, at_out = at_padded_o + padded_o,
                                 at_dy = at_out + M * M * tiles * wide, at_wt = at_dy + M * M * tiles * OC,
                                 at_v = at_wt + weight_block, at_m = at_v + points * tile_plane,
                                 at_u = at_m + points * tile_plane, at_du = at_u + points * weight_plane;
    static constexpr std::size_t workspace_size = at_du + points * weight_plane;

    /// y [OC, H, W] = conv(x [C, H, W], w [OC, C, 3, 3]) + bias for b samples.
    static void forward(const T* w, const T* bias, const T* x, T* y, std::size_t b, T* ws) {
        forward_weights(w, ws);
        for (std::size_t n = 0; n < b; ++n) {
            pass<C, OC>(x + n * C * H * W, bias, ws);
            to_planar<OC>(ws + at_out, y + n * OC * H * W);
        }
    }

    /// dx [C, H, W] = the input gradient for dy [OC, H, W] (assigned), b samples.
    static void backward_input(const T* w, const T* dy, T* dx, std::size_t b, T* ws) {
        input_weights(w, ws);
        for (std::size_t n = 0; n < b; ++n) {
            pass<OC, C>(dy + n * OC * H * W, nullptr, ws);
            to_planar<C>(ws + at_out, dx + n * C * H * W);
        }
    }

    /// dw [OC, C, 3, 3] += the weight gradient and dbias [OC] += sum of dy, over b samples (none: nothing added).
    static void backward_weight(const T* x, const T* dy, T* dw, T* dbias, std::size_t b, T* ws) {
        if (b == 0) return;
        T* v = ws + at_v;
        T* dm = ws + at_m;
        T* du = ws + at_du;
        for (std::size_t n = 0; n < b; ++n) {
            to_padded<C>(x + n * C * H * W, ws);
            for (std::size_t h = 0; h < H; ++h)  // dy channel-last; the cropped positions stay zero
                kernels::transpose_copy(OC, W, dy + n * OC * H * W + h * W, H * W, ws + at_dy + h * out_w * OC, OC);
            // dU (+)= V^T dM block by block: each element one fused multiply-add chain over the tiles in order
            for_each_block([&]<std::size_t Rows>(std::size_t th) {
                input_transform<C, Rows>(ws, th, v);
                output_gradient_transform<Rows>(ws + at_dy, th, dm);
                for (std::size_t xi = 0; xi < points; ++xi)
                    kernels::small_gemm<T, true, C, Rows * tiles_w, OC, C>(
                        v + xi * tile_plane, dm + xi * tile_plane, du + xi * weight_plane, n > 0 || th > 0);
            });
            for (std::size_t o = 0; o < OC; ++o) dbias[o] += kernels::sum(H * W, dy + n * OC * H * W + o * H * W);
        }
        // g = G^T dU G per (c, o), vectorized over o, vw channels c at a time into [vw 9, OC], then added to dW
        // [OC, C 9] transposed (one rounded addition per element)
        T* g = ws + at_wt;
        for (std::size_t c0 = 0; c0 < C; c0 += vw) {
            for (std::size_t c = c0; c < c0 + vw; ++c)
                for (std::size_t o = 0; o < OC; o += vw) {
                    batch r[3][alpha];  // G^T dU
                    for (std::size_t s = 0; s < alpha; ++s) {
                        batch d[alpha];
                        for (std::size_t i = 0; i < alpha; ++i)
                            d[i] = batch::load_unaligned(du + (i * alpha + s) * weight_plane + c * OC + o);
                        winograd_for<3>([&]<std::size_t K>() { r[K][s] = winograd_combine<matrices::gt, K>(d); });
                    }
                    for (std::size_t k = 0; k < 3; ++k)  // (G^T dU) G
                        winograd_for<3>([&]<std::size_t L>() {
                            winograd_combine<matrices::gt, L>(r[k]).store_unaligned(
                                g + ((c - c0) * 9 + k * 3 + L) * OC + o);
                        });
                }
            kernels::transpose_add(vw * 9, OC, g, OC, dw + c0 * 9, C * 9);
        }
    }

private:
    // U = G k G^T for the 3x3 kernels k[i][j] = at(i, j)[0 .. vw) (vectors over the GEMM's output index), stored at
    // u[xi weight_plane].
    template <class At>
    PIPEPROP_REGISTER_KERNEL static void transform_kernels(At at, T* u) {
        batch r[alpha][3];  // G k
        for (std::size_t j = 0; j < 3; ++j) {
            const batch k[3] = {batch::load_unaligned(at(0, j)), batch::load_unaligned(at(1, j)),
                                batch::load_unaligned(at(2, j))};
            winograd_for<alpha>([&]<std::size_t I>() { r[I][j] = winograd_combine<matrices::g, I>(k); });
        }
        for (std::size_t i = 0; i < alpha; ++i)  // (G k) G^T
            winograd_for<alpha>([&]<std::size_t L>() {
                winograd_combine<matrices::g, L>(r[i]).store_unaligned(u + (i * alpha + L) * weight_plane);
            });
    }

    // The forward's U [points][C, OC] from w [OC, C 9], vw channels c at a time through their w^T [vw 9, OC] (vectors
    // over o; one block stays in L1 / L2 where a whole w^T, 9 C OC values, went out to memory and back).
    static void forward_weights(const T* w, T* ws) {
        T* wt = ws + at_wt;
        for (std::size_t c0 = 0; c0 < C; c0 += vw) {
            kernels::transpose_copy(OC, vw * 9, w + c0 * 9, C * 9, wt, OC);
            for (std::size_t c = c0; c < c0 + vw; ++c)
                for (std::size_t o = 0; o < OC; o += vw)
                    transform_kernels(
                        [&](std::size_t i, std::size_t j) { return wt + ((c - c0) * 9 + i * 3 + j) * OC + o; },
                        ws + at_u + c * OC + o);
        }
    }

    // p1's U [points][OC, C] of the kernels rotated by 180 degrees, one o at a time through w[o] [C, 9] as [9, C]
    // (vectors over c; kept in L1).
    static void input_weights(const T* w, T* ws) {
        T* wt = ws + at_wt;
        for (std::size_t o = 0; o < OC; ++o) {
            kernels::transpose_copy(C, 9, w + o * C * 9, 9, wt, C);
            for (std::size_t c = 0; c < C; c += vw)
                transform_kernels([&](std::size_t i, std::size_t j) { return wt + (8 - i * 3 - j) * C + c; },
                                  ws + at_u + o * C + c);
        }
    }

    // One sample's pass from src [In, H, W] into the output tiles [M tiles_h, M tiles_w, Out] (channel-last, + bias
    // where given) with the transformed weights U. A padded copy per channel count (their zero positions differ).
    template <std::size_t In, std::size_t Out>
    static void pass(const T* src, const T* bias, T* ws) {
        T* padded = ws + (In == C ? 0 : at_padded_o);
        T* v = ws + at_v;
        T* m = ws + at_m;
        to_padded<In>(src, padded);
        for_each_block([&]<std::size_t Rows>(std::size_t th) {
            input_transform<In, Rows>(padded, th, v);
            for (std::size_t xi = 0; xi < points; ++xi)
                kernels::small_gemm<T, false, Rows * tiles_w, In, Out, In>(
                    v + xi * tile_plane, ws + at_u + xi * weight_plane, m + xi * tile_plane, false);
            output_transform<Out, Rows>(m, bias, th, ws + at_out);
        });
    }

    // f.template operator()<Rows>(th) for the blocks of tile rows [th, th + Rows) in order.
    template <class F>
    static void for_each_block(F&& f) {
        for (std::size_t th = 0; th + block_rows <= tiles_h; th += block_rows) f.template operator()<block_rows>(th);
        if constexpr (last_rows != 0) f.template operator()<last_rows>(tiles_h - last_rows);
    }

    // [Ch, H, W] into the padded channel-last copy (row h, column x at padded (h + 1, x + 1)); the rest stays zero.
    template <std::size_t Ch>
    static void to_padded(const T* src, T* padded) {
        for (std::size_t h = 0; h < H; ++h)
            kernels::transpose_copy(Ch, W, src + h * W, H * W, padded + ((h + 1) * padded_w + 1) * Ch, Ch);
    }

    // The output tiles (channel-last) into dst [Out, H, W], cropped at H, W.
    template <std::size_t Out>
    static void to_planar(const T* out, T* dst) {
        for (std::size_t h = 0; h < H; ++h)
            kernels::transpose_copy(W, Out, out + h * out_w * Out, Out, dst + h * W, H * W);
    }

    // V [points][block tiles, Ch] = B^T d B for the tiles of rows [th0, th0 + Rows), vectors over the channels.
    template <std::size_t Ch, std::size_t Rows>
    PIPEPROP_REGISTER_KERNEL static void input_transform(const T* padded, std::size_t th0, T* v) {
        for (std::size_t th = th0; th < th0 + Rows; ++th)
            for (std::size_t tw = 0; tw < tiles_w; ++tw) {
                const T* d = padded + (M * th * padded_w + M * tw) * Ch;
                T* vt = v + ((th - th0) * tiles_w + tw) * Ch;
                for (std::size_t c = 0; c < Ch; c += vw) {
                    batch e[alpha][alpha];
                    for (std::size_t s = 0; s < alpha; ++s) {  // B^T d, column s
                        batch col[alpha];
                        for (std::size_t i = 0; i < alpha; ++i)
                            col[i] = batch::load_unaligned(d + (i * padded_w + s) * Ch + c);
                        winograd_for<alpha>([&]<std::size_t R>() { e[R][s] = winograd_combine<matrices::bt, R>(col); });
                    }
                    for (std::size_t r = 0; r < alpha; ++r)  // (B^T d) B
                        winograd_for<alpha>([&]<std::size_t L>() {
                            const batch vl = winograd_combine<matrices::bt, L>(e[r]);
                            vl.store_unaligned(vt + (r * alpha + L) * tile_plane + c);
                        });
                }
            }
    }

    // The output tiles [M tiles_h, M tiles_w, Out] of rows [th0, th0 + Rows) = A^T M A (+ bias) per tile, M the
    // block's [points][block tiles, Out], vectors over the channels.
    template <std::size_t Out, std::size_t Rows>
    PIPEPROP_REGISTER_KERNEL static void output_transform(const T* m, const T* bias, std::size_t th0, T* out) {
        for (std::size_t th = th0; th < th0 + Rows; ++th)
            for (std::size_t tw = 0; tw < tiles_w; ++tw) {
                const T* mt = m + ((th - th0) * tiles_w + tw) * Out;
                T* o0 = out + (M * th * out_w + M * tw) * Out;
                for (std::size_t o = 0; o < Out; o += vw) {
                    batch p[M][alpha];  // A^T M
                    for (std::size_t s = 0; s < alpha; ++s) {
                        batch col[alpha];
                        for (std::size_t i = 0; i < alpha; ++i)
                            col[i] = batch::load_unaligned(mt + (i * alpha + s) * tile_plane + o);
                        winograd_for<M>([&]<std::size_t R>() { p[R][s] = winograd_combine<matrices::at, R>(col); });
                    }
                    const batch bv = bias != nullptr ? batch::load_unaligned(bias + o) : batch(T(0));
                    for (std::size_t r = 0; r < M; ++r)  // (A^T M) A
                        winograd_for<M>([&]<std::size_t L>() {
                            batch y = winograd_combine<matrices::at, L>(p[r]);
                            if (bias != nullptr) y = y + bv;
                            y.store_unaligned(o0 + (r * out_w + L) * Out + o);
                        });
                }
            }
    }

    // dM [points][block tiles, OC] = A e A^T per tile of rows [th0, th0 + Rows), e the M x M tile of the
    // channel-last dy tiles [M tiles_h, M tiles_w, OC] (zero past H, W from the start), vectors over the channels.
    template <std::size_t Rows>
    PIPEPROP_REGISTER_KERNEL static void output_gradient_transform(const T* dy_tiles, std::size_t th0, T* dm) {
        for (std::size_t th = th0; th < th0 + Rows; ++th)
            for (std::size_t tw = 0; tw < tiles_w; ++tw) {
                const T* e0 = dy_tiles + (M * th * out_w + M * tw) * OC;
                T* mt = dm + ((th - th0) * tiles_w + tw) * OC;
                for (std::size_t o = 0; o < OC; o += vw) {
                    batch q[alpha][M];  // A e
                    for (std::size_t s = 0; s < M; ++s) {
                        batch col[M];
                        for (std::size_t i = 0; i < M; ++i)
                            col[i] = batch::load_unaligned(e0 + (i * out_w + s) * OC + o);
                        winograd_for<alpha>([&]<std::size_t R>() { q[R][s] = winograd_combine<matrices::a, R>(col); });
                    }
                    for (std::size_t r = 0; r < alpha; ++r)  // (A e) A^T
                        winograd_for<alpha>([&]<std::size_t L>() {
                            const batch dml = winograd_combine<matrices::a, L>(q[r]);
                            dml.store_unaligned(mt + (r * alpha + L) * tile_plane + o);
                        });
                }
            }
    }
};

}  // namespace pipeprop::detail
