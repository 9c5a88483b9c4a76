// pipeprop/layers/conv2d_winograd.hpp: conv2d's three passes for a 3x3 kernel, stride 1 and padding 1 by Winograd's
// minimal filtering F(2x2, 3x3) (Lavin & Gray 2016, "Fast Algorithms for Convolutional Neural Networks", §4): 16
// multiplications per 2x2 output tile and channel pair instead of 36, so 2.25x fewer multiply-adds where the output
// is a whole number of tiles (28 x 28, 14 x 14; an odd size such as 7 x 7 computes the last tiles' extra row /
// column).
//
// With the tile transforms (d a 4x4 input tile, g a 3x3 kernel, m a 4x4 product, e a 2x2 output-gradient tile)
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1],
// and xi one of the 16 positions of a 4x4 tile:
//   forward: U = G g G^T per (o, c); V = B^T d B per (tile, c); M[xi] = V[xi] U[xi] (a GEMM [tiles, C] x [C, OC]
//            per xi); y tile = A^T M A + bias (cropped at an odd height / width);
//   p1:      the same with dy as input and the kernel rotated by 180 degrees and transposed in channels (a stride-1
//            "same" convolution's input gradient is such a convolution), no bias; dx assigned;
//   p2:      the exact gradient of the forward's algorithm: dM = A e A^T per (tile, o), dU[xi] (+)= V[xi]^T dM[xi]
//            (a GEMM [C, tiles] x [tiles, OC] per xi, the samples of a micro-batch added in order), then once per call
//            dW += G^T dU G; dbias += the sum of dy per channel (as the direct form).
// Rounding: the transforms add and subtract (and halve, exactly) before the multiplications, so the results differ
// from a direct convolution's in the last bits. Against the exact convolution in float at ResNet's 28 x 28 and
// 14 x 14 shapes: max |y - exact| / max |exact| 1.8e-7 to 2.8e-7 for the forward and p1 (the direct kernel: 4e-7 to
// 7e-7), up to 1.2e-6 for p2 (a sum over 196 tiles); in double 6e-16 to 1.7e-15. The GEMMs are
// kernels::small_gemm (one fused multiply-add chain per element). Every runner of a build calls the same code for
// every micro-batch size, one sample at a time, so executors stay bit-identical.
// Shapes: x, y, dy, dx are [b, C or OC, H, W] row-major (micro-batch first), w [OC, C, 3, 3] then bias [OC]; units
// those of the values. Errors: none here (no allocation, no throw): conv2d checks b against its stash first.
// Work done twice by design: p2 rebuilds the padded copy and V from x (as the direct form rebuilds its columns)
// instead of keeping 16 x tiles x C values per sample in the stash for every micro-batch in flight.
// Layouts (per sample; channel-last so that the transforms vectorize over channels): a zero-padded copy
// [2 tiles_h + 2, 2 tiles_w + 2, Ch]; V [16][tiles, Ch]; M [16][tiles, Och]; U [16][Ch, Och]; the output tiles
// [2 tiles_h, 2 tiles_w, Och] before the transpose into [Och, H, W]. Planes are padded by 16 values: 4 KiB apart
// they alias in the L1 cache (measured 3x slower transforms at 7 x 7).
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>

#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/kernels/small_gemm.hpp"
#include "pipeprop/kernels/transpose_add.hpp"
#include "pipeprop/kernels/transpose_copy.hpp"

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

/// F(2x2, 3x3) convolution of [C, H, W] samples into [OC, H, W] (3x3 kernel, stride 1, padding 1; see the file
/// comment); C and OC whole numbers of SIMD vectors of T. The workspace is one buffer of workspace_size values (make
/// it zero: the padding positions stay zero).
template <class T, std::size_t C, std::size_t H, std::size_t W, std::size_t OC>
struct conv2d_winograd {
    using batch = xsimd::batch<T>;
    static constexpr std::size_t vw = batch::size;
    static_assert(C % vw == 0 && OC % vw == 0,
                  "pipeprop::conv2d (Winograd form): the channel counts must be whole numbers of SIMD vectors.");
    static constexpr std::size_t tiles_h = (H + 1) / 2, tiles_w = (W + 1) / 2, tiles = tiles_h * tiles_w;
    static constexpr std::size_t padded_h = 2 * tiles_h + 2, padded_w = 2 * tiles_w + 2, out_w = 2 * tiles_w;
    static constexpr std::size_t wide = C > OC ? C : OC;  // the larger channel count (p1 swaps them)
    // Tiles go through the transforms and GEMMs in blocks of block_rows tile rows (about 32 tiles), whose V and M
    // stay in L1 / L2 from one block to the next instead of streaming 16 planes of every tile through memory.
    static constexpr std::size_t block_rows = tiles_w >= 32 ? 1 : (32 / tiles_w < tiles_h ? 32 / tiles_w : tiles_h);
    static constexpr std::size_t block_tiles = block_rows * tiles_w, last_rows = tiles_h % block_rows;
    static constexpr std::size_t tile_plane = block_tiles * wide + 16;
    static constexpr std::size_t weight_plane = C * OC + 16;
    // workspace parts: padded input (C channels), padded dy (OC channels), output tiles, dy tiles (zero where
    // cropped), the weights transposed, V, M, U, dU
    static constexpr std::size_t padded_c = padded_h * padded_w * C, padded_o = padded_h * padded_w * OC;
    static constexpr std::size_t at_padded_o = padded_c, at_out = at_padded_o + padded_o,
                                 at_dy = at_out + 4 * tiles * wide, at_wt = at_dy + 4 * tiles * OC,
                                 at_v = at_wt + 9 * C * OC, at_m = at_v + 16 * tile_plane,
                                 at_u = at_m + 16 * tile_plane, at_du = at_u + 16 * weight_plane;
    static constexpr std::size_t workspace_size = at_du + 16 * weight_plane;

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
                for (std::size_t xi = 0; xi < 16; ++xi)
                    kernels::small_gemm<T, true, C, Rows * tiles_w, OC, C>(
                        v + xi * tile_plane, dm + xi * tile_plane, du + xi * weight_plane, n > 0 || th > 0);
            });
            for (std::size_t o = 0; o < OC; ++o) dbias[o] += kernels::sum(H * W, dy + n * OC * H * W + o * H * W);
        }
        // g = G^T dU G per (c, o), G^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 1], vectorized over o into
        // [C 9, OC], then added to dW [OC, C 9] transposed (one rounded addition per element)
        T* g = ws + at_wt;
        const batch half(T(0.5));
        for (std::size_t c = 0; c < C; ++c)
            for (std::size_t o = 0; o < OC; o += vw) {
                batch r[3][4];  // G^T dU
                for (std::size_t s = 0; s < 4; ++s) {
                    const batch d0 = batch::load_unaligned(du + (0 + s) * weight_plane + c * OC + o);
                    const batch d1 = batch::load_unaligned(du + (4 + s) * weight_plane + c * OC + o);
                    const batch d2 = batch::load_unaligned(du + (8 + s) * weight_plane + c * OC + o);
                    const batch d3 = batch::load_unaligned(du + (12 + s) * weight_plane + c * OC + o);
                    r[0][s] = d0 + half * (d1 + d2);
                    r[1][s] = half * (d1 - d2);
                    r[2][s] = half * (d1 + d2) + d3;
                }
                for (std::size_t k = 0; k < 3; ++k) {  // (G^T dU) G
                    T* gk = g + (c * 9 + k * 3) * OC + o;
                    (r[k][0] + half * (r[k][1] + r[k][2])).store_unaligned(gk);
                    (half * (r[k][1] - r[k][2])).store_unaligned(gk + OC);
                    (half * (r[k][1] + r[k][2]) + r[k][3]).store_unaligned(gk + 2 * OC);
                }
            }
        kernels::transpose_add(C * 9, OC, g, OC, dw, C * 9);
    }

private:
    // U = G k G^T for the 3x3 kernels k[i][j] = at(i, j)[0 .. vw) (vectors over the GEMM's output index), stored at
    // u[xi weight_plane], G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
    template <class At>
    static void transform_kernels(At at, T* u) {
        const batch half(T(0.5));
        batch r[4][3];  // G k
        for (std::size_t j = 0; j < 3; ++j) {
            const batch k0 = batch::load_unaligned(at(0, j)), k1 = batch::load_unaligned(at(1, j));
            const batch k2 = batch::load_unaligned(at(2, j));
            r[0][j] = k0;
            r[1][j] = half * (k0 + k1 + k2);
            r[2][j] = half * (k0 - k1 + k2);
            r[3][j] = k2;
        }
        for (std::size_t i = 0; i < 4; ++i) {  // (G k) G^T
            r[i][0].store_unaligned(u + (i * 4 + 0) * weight_plane);
            (half * (r[i][0] + r[i][1] + r[i][2])).store_unaligned(u + (i * 4 + 1) * weight_plane);
            (half * (r[i][0] - r[i][1] + r[i][2])).store_unaligned(u + (i * 4 + 2) * weight_plane);
            r[i][2].store_unaligned(u + (i * 4 + 3) * weight_plane);
        }
    }

    // The forward's U [16][C, OC] from w [OC, C 9], through w^T [C 9, OC] (vectors over o).
    static void forward_weights(const T* w, T* ws) {
        T* wt = ws + at_wt;
        kernels::transpose_copy(OC, C * 9, w, C * 9, wt, OC);
        for (std::size_t c = 0; c < C; ++c)
            for (std::size_t o = 0; o < OC; o += vw)
                transform_kernels([&](std::size_t i, std::size_t j) { return wt + (c * 9 + i * 3 + j) * OC + o; },
                                  ws + at_u + c * OC + o);
    }

    // p1's U [16][OC, C] of the kernels rotated by 180 degrees, through w [OC, C, 9] as [OC, 9, C] (vectors over c).
    static void input_weights(const T* w, T* ws) {
        T* wt = ws + at_wt;
        for (std::size_t o = 0; o < OC; ++o) kernels::transpose_copy(C, 9, w + o * C * 9, 9, wt + o * 9 * C, C);
        for (std::size_t o = 0; o < OC; ++o)
            for (std::size_t c = 0; c < C; c += vw)
                transform_kernels([&](std::size_t i, std::size_t j) { return wt + (o * 9 + 8 - i * 3 - j) * C + c; },
                                  ws + at_u + o * C + c);
    }

    // One sample's pass from src [In, H, W] into the output tiles [2 tiles_h, 2 tiles_w, Out] (channel-last, + bias
    // where given) with the transformed weights U. A padded copy per channel count (their zero positions differ).
    template <std::size_t In, std::size_t Out>
    static void pass(const T* src, const T* bias, T* ws) {
        T* padded = ws + (In == C ? 0 : at_padded_o);
        T* v = ws + at_v;
        T* m = ws + at_m;
        to_padded<In>(src, padded);
        for_each_block([&]<std::size_t Rows>(std::size_t th) {
            input_transform<In, Rows>(padded, th, v);
            for (std::size_t xi = 0; xi < 16; ++xi)
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

    // V [16][block tiles, Ch] = B^T d B for the tiles of rows [th0, th0 + Rows), vectors over the channels.
    template <std::size_t Ch, std::size_t Rows>
    static void input_transform(const T* padded, std::size_t th0, T* v) {
        for (std::size_t th = th0; th < th0 + Rows; ++th)
            for (std::size_t tw = 0; tw < tiles_w; ++tw) {
                const T* d = padded + (2 * th * padded_w + 2 * tw) * Ch;
                T* vt = v + ((th - th0) * tiles_w + tw) * Ch;
                for (std::size_t c = 0; c < Ch; c += vw) {
                    batch e[4][4];
                    for (std::size_t s = 0; s < 4; ++s) {  // B^T d, column s
                        const batch d0 = batch::load_unaligned(d + (0 * padded_w + s) * Ch + c);
                        const batch d1 = batch::load_unaligned(d + (1 * padded_w + s) * Ch + c);
                        const batch d2 = batch::load_unaligned(d + (2 * padded_w + s) * Ch + c);
                        const batch d3 = batch::load_unaligned(d + (3 * padded_w + s) * Ch + c);
                        e[0][s] = d0 - d2;
                        e[1][s] = d1 + d2;
                        e[2][s] = d2 - d1;
                        e[3][s] = d1 - d3;
                    }
                    for (std::size_t r = 0; r < 4; ++r) {  // (B^T d) B
                        (e[r][0] - e[r][2]).store_unaligned(vt + (r * 4 + 0) * tile_plane + c);
                        (e[r][1] + e[r][2]).store_unaligned(vt + (r * 4 + 1) * tile_plane + c);
                        (e[r][2] - e[r][1]).store_unaligned(vt + (r * 4 + 2) * tile_plane + c);
                        (e[r][1] - e[r][3]).store_unaligned(vt + (r * 4 + 3) * tile_plane + c);
                    }
                }
            }
    }

    // The output tiles [2 tiles_h, 2 tiles_w, Out] of rows [th0, th0 + Rows) = A^T M A (+ bias) per tile, M the
    // block's [16][block tiles, Out], vectors over the channels.
    template <std::size_t Out, std::size_t Rows>
    static void output_transform(const T* m, const T* bias, std::size_t th0, T* out) {
        for (std::size_t th = th0; th < th0 + Rows; ++th)
            for (std::size_t tw = 0; tw < tiles_w; ++tw) {
                const T* mt = m + ((th - th0) * tiles_w + tw) * Out;
                T* o0 = out + (2 * th * out_w + 2 * tw) * Out;
                T* o1 = o0 + out_w * Out;
                for (std::size_t o = 0; o < Out; o += vw) {
                    batch p[2][4];  // A^T M
                    for (std::size_t s = 0; s < 4; ++s) {
                        const batch m0 = batch::load_unaligned(mt + (0 + s) * tile_plane + o);
                        const batch m1 = batch::load_unaligned(mt + (4 + s) * tile_plane + o);
                        const batch m2 = batch::load_unaligned(mt + (8 + s) * tile_plane + o);
                        const batch m3 = batch::load_unaligned(mt + (12 + s) * tile_plane + o);
                        p[0][s] = m0 + m1 + m2;
                        p[1][s] = m1 - m2 - m3;
                    }
                    batch y[4] = {p[0][0] + p[0][1] + p[0][2], p[0][1] - p[0][2] - p[0][3],
                                  p[1][0] + p[1][1] + p[1][2], p[1][1] - p[1][2] - p[1][3]};
                    if (bias != nullptr) {
                        const batch bv = batch::load_unaligned(bias + o);
                        for (auto& e : y) e = e + bv;
                    }
                    y[0].store_unaligned(o0 + o);
                    y[1].store_unaligned(o0 + Out + o);
                    y[2].store_unaligned(o1 + o);
                    y[3].store_unaligned(o1 + Out + o);
                }
            }
    }

    // dM [16][block tiles, OC] = A e A^T per tile of rows [th0, th0 + Rows), e the 2x2 tile of the channel-last dy
    // tiles [2 tiles_h, 2 tiles_w, OC] (zero past H, W from the start), vectors over the channels.
    template <std::size_t Rows>
    static void output_gradient_transform(const T* dy_tiles, std::size_t th0, T* dm) {
        for (std::size_t th = th0; th < th0 + Rows; ++th)
            for (std::size_t tw = 0; tw < tiles_w; ++tw) {
                const T* e0 = dy_tiles + (2 * th * out_w + 2 * tw) * OC;
                const T* e1 = e0 + out_w * OC;
                T* mt = dm + ((th - th0) * tiles_w + tw) * OC;
                for (std::size_t o = 0; o < OC; o += vw) {
                    const batch e00 = batch::load_unaligned(e0 + o), e01 = batch::load_unaligned(e0 + OC + o);
                    const batch e10 = batch::load_unaligned(e1 + o), e11 = batch::load_unaligned(e1 + OC + o);
                    // A e with A = [1 0; 1 1; 1 -1; 0 -1], rows q[r] = (q[r][0], q[r][1]); then (A e) A^T
                    const batch q[4][2] = {{e00, e01}, {e00 + e10, e01 + e11}, {e00 - e10, e01 - e11}, {-e10, -e11}};
                    for (std::size_t r = 0; r < 4; ++r) {
                        q[r][0].store_unaligned(mt + (r * 4 + 0) * tile_plane + o);
                        (q[r][0] + q[r][1]).store_unaligned(mt + (r * 4 + 1) * tile_plane + o);
                        (q[r][0] - q[r][1]).store_unaligned(mt + (r * 4 + 2) * tile_plane + o);
                        (-q[r][1]).store_unaligned(mt + (r * 4 + 3) * tile_plane + o);
                    }
                }
            }
    }
};

}  // namespace pipeprop::detail
