// Image layers: conv2d, max_pool2d, avg_pool2d, global_avg_pool, group_norm.
// - backward-p1 / backward-p2 against central finite differences in double (pipeprop::testing::check_gradients, which
//   also checks the contract: p1 assigns and is repeatable, p2 adds and does not depend on the order p1/p2), at
//   b = 1 and b = 3, including stride 2, no padding, non-square inputs, 3 input channels and 1x1 kernels.
//   Every check here uses the default tolerance 1e-6 (max |analytic - numeric| / max |numeric| per tensor).
// - conv2d forward, p1 and p2 against a naive direct convolution written from the definition (both im2col paths:
//   the contiguous-block path of stride 1 with output width == input width, and the general one).
// - max_pool2d / avg_pool2d / global_avg_pool / group_norm forward against direct definitions.
// - A small CNN through layer_stack in double: fused backward == p1 then p2, and the gradient of the loss w.r.t.
//   sampled parameters against finite differences through the whole network.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <vector>

namespace pp = pipeprop;
using pp::shape;

namespace {

constexpr double default_tolerance = 1e-6;

/// check_gradients of layer L at b = 1 and b = 3 with the default tolerance.
template <class L>
void check_layer(const char* what) {
    for (std::size_t b : {1u, 3u}) {
        const auto r = pp::testing::check_gradients(L{}, {.batch = b, .tolerance = default_tolerance});
        INFO(what << ": " << r.report);
        CHECK(r.passed);
    }
}

std::vector<double> random_vector(std::size_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
    std::mt19937_64 rng(seed);
    std::vector<double> v(n);
    for (auto& e : v) e = pp::uniform<double>(rng, lo, hi);
    return v;
}

/// max |a - b| / max(max |b|, 1e-300): the relative error measure used below.
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    double num = 0, den = 1e-300;
    for (std::size_t i = 0; i < a.size(); ++i) {
        num = std::max(num, std::abs(a[i] - b[i]));
        den = std::max(den, std::abs(b[i]));
    }
    return num / den;
}

/// Forward, p1 and p2 of a bound conv2d layer L against direct loops over the definition
/// y[n,o,oh,ow] = bias[o] + sum_{c,kh,kw} W[o,c,kh,kw] x[n,c,oh S+kh-P, ow S+kw-P] (zero outside the input).
template <class L>
void check_conv_against_direct(std::size_t b) {
    const L layer{};
    constexpr std::size_t C = L::channels, H = L::height, W = L::width, O = L::out_channels, K = L::kernel,
                          S = L::stride, P = L::padding, OH = L::out_height, OW = L::out_width;
    const auto x = random_vector(b * C * H * W, 11);
    const auto w = random_vector(L::parameter_count, 12);
    const auto dy = random_vector(b * O * OH * OW, 13);
    auto at = [](std::size_t n, std::size_t c, std::size_t h, std::size_t w_) {
        return ((n * C + c) * H + h) * W + w_;
    };
    auto weight = [](std::size_t o, std::size_t c, std::size_t kh, std::size_t kw) {
        return ((o * C + c) * K + kh) * K + kw;
    };
    std::vector<double> y_ref(b * O * OH * OW), dx_ref(x.size(), 0.0), dw_ref(w.size(), 0.0);
    for (std::size_t n = 0; n < b; ++n)
        for (std::size_t o = 0; o < O; ++o)
            for (std::size_t oh = 0; oh < OH; ++oh)
                for (std::size_t ow = 0; ow < OW; ++ow) {
                    const std::size_t yi = ((n * O + o) * OH + oh) * OW + ow;
                    double acc = w[O * C * K * K + o];
                    dw_ref[O * C * K * K + o] += dy[yi];
                    for (std::size_t c = 0; c < C; ++c)
                        for (std::size_t kh = 0; kh < K; ++kh)
                            for (std::size_t kw = 0; kw < K; ++kw) {
                                const long ih = static_cast<long>(oh * S + kh) - static_cast<long>(P);
                                const long iw = static_cast<long>(ow * S + kw) - static_cast<long>(P);
                                if (ih < 0 || iw < 0 || ih >= static_cast<long>(H) || iw >= static_cast<long>(W))
                                    continue;
                                const std::size_t xi =
                                    at(n, c, static_cast<std::size_t>(ih), static_cast<std::size_t>(iw));
                                acc += w[weight(o, c, kh, kw)] * x[xi];
                                dx_ref[xi] += w[weight(o, c, kh, kw)] * dy[yi];
                                dw_ref[weight(o, c, kh, kw)] += x[xi] * dy[yi];
                            }
                    y_ref[yi] = acc;
                }
    auto st = layer.make_stash(b);
    auto ws = layer.make_workspace(b);
    std::vector<double> y(y_ref.size(), -5.0), dx(x.size(), 3.0), dw(w.size(), 0.0);
    layer.forward(w, x.data(), y.data(), b, st, ws);
    layer.backward_input(w, x.data(), y.data(), dy.data(), dx.data(), b, st, ws);
    layer.backward_weight(dw, x.data(), y.data(), dy.data(), b, st, ws);
    // Same sums in a different order: agreement to a few ulps of the largest value.
    CHECK(relative_error(y, y_ref) < 1e-13);
    CHECK(relative_error(dx, dx_ref) < 1e-13);
    CHECK(relative_error(dw, dw_ref) < 1e-13);
    // p2 rebuilds the column matrices from x: a workspace that never saw the forward gives the same bits.
    auto fresh = layer.make_workspace(b);
    std::vector<double> dw_fresh(w.size(), 0.0);
    layer.backward_weight(dw_fresh, x.data(), y.data(), dy.data(), b, layer.make_stash(b), fresh);
    CHECK(dw_fresh == dw);
    // A workspace every pass has used gives a fresh one's bits for other data, in another order of passes (nothing
    // carried over: padding that must stay zero, partial tiles, accumulators).
    std::vector<double> x2(x.size()), dy2(dy.size());
    for (std::size_t i = 0; i < x.size(); ++i) x2[i] = 0.5 - x[i];
    for (std::size_t i = 0; i < dy.size(); ++i) dy2[i] = 1.5 * dy[i] + 0.25;
    std::vector<double> y_used(y.size()), dx_used(x.size()), dw_used(w.size(), 0.0);
    layer.backward_weight(dw_used, x2.data(), y.data(), dy2.data(), b, st, ws);
    layer.forward(w, x2.data(), y_used.data(), b, st, ws);
    layer.backward_input(w, x2.data(), y_used.data(), dy2.data(), dx_used.data(), b, st, ws);
    auto st_new = layer.make_stash(b);
    auto ws_new = layer.make_workspace(b);
    std::vector<double> y_new(y.size()), dx_new(x.size()), dw_new(w.size(), 0.0);
    layer.forward(w, x2.data(), y_new.data(), b, st_new, ws_new);
    layer.backward_input(w, x2.data(), y_new.data(), dy2.data(), dx_new.data(), b, st_new, ws_new);
    layer.backward_weight(dw_new, x2.data(), y_new.data(), dy2.data(), b, st_new, ws_new);
    CHECK(y_used == y_new);
    CHECK(dx_used == dx_new);
    CHECK(dw_used == dw_new);
}

}  // namespace

TEST_CASE("conv2d: output shape and parameter tensors are computed at compile time", "[layers][conv2d]") {
    using a = pp::conv2d_layer<float, shape<1, 28, 28>, 16, 3, 1, 1>;
    static_assert(std::is_same_v<a::output_shape, shape<16, 28, 28>>);
    static_assert(a::parameter_count == 16 * 9 + 16);
    static_assert(pp::total_size(a::parameter_tensors()) == a::parameter_count);
    static_assert(a::parameter_tensors()[0].name == "weight" && a::parameter_tensors()[1].name == "bias");
    using s2 = pp::conv2d_layer<float, shape<3, 5, 7>, 4, 3, 2, 0>;  // (5-3)/2+1 = 2, (7-3)/2+1 = 3
    static_assert(std::is_same_v<s2::output_shape, shape<4, 2, 3>>);
    using s2p = pp::conv2d_layer<float, shape<3, 6, 5>, 2, 3, 2, 1>;  // (6+2-3)/2+1 = 3, (5+2-3)/2+1 = 3
    static_assert(std::is_same_v<s2p::output_shape, shape<2, 3, 3>>);
    // Which im2col / col2im path the tests below exercise.
    static_assert(a::contiguous_rows && !s2::contiguous_rows && !s2p::contiguous_rows);
    static_assert(!pp::conv2d_layer<double, shape<3, 5, 7>, 2, 3, 1, 0>::contiguous_rows);
    static_assert(pp::conv2d_layer<double, shape<1, 4, 9>, 3, 5, 1, 2>::contiguous_rows);
    static_assert(pp::layer<a> && pp::layer<s2> && pp::layer<pp::conv2d_layer<double, shape<2, 4, 4>, 3, 1, 1, 0>>);
    SUCCEED();
}

TEST_CASE("conv2d: backward-p1 and backward-p2 match finite differences", "[layers][conv2d]") {
    check_layer<pp::conv2d_layer<double, shape<3, 5, 7>, 4, 3, 1, 1>>("3x5x7, 3x3, stride 1, pad 1");
    check_layer<pp::conv2d_layer<double, shape<3, 5, 7>, 4, 3, 2, 0>>("3x5x7, 3x3, stride 2, no padding");
    check_layer<pp::conv2d_layer<double, shape<3, 6, 5>, 2, 3, 2, 1>>("3x6x5, 3x3, stride 2, pad 1");
    check_layer<pp::conv2d_layer<double, shape<2, 6, 5>, 3, 2, 2, 1>>("2x6x5, 2x2 (even kernel), stride 2, pad 1");
    check_layer<pp::conv2d_layer<double, shape<3, 5, 7>, 2, 1, 1, 0>>("3x5x7, 1x1 kernel (identity im2col)");
    check_layer<pp::conv2d_layer<double, shape<3, 5, 7>, 2, 1, 2, 0>>("3x5x7, 1x1 kernel, stride 2");
    check_layer<pp::conv2d_layer<double, shape<1, 4, 9>, 3, 5, 1, 2>>("1x4x9, 5x5 kernel wider than the height");
    check_layer<pp::conv2d_layer<double, shape<2, 3, 3>, 2, 3, 1, 0>>("2x3x3, 3x3 kernel, 1x1 output");
    check_layer<pp::conv2d_layer<double, shape<3, 5, 7>, 2, 3, 1, 0>>("3x5x7, 3x3, stride 1, no padding");
    check_layer<pp::conv2d_layer<double, shape<2, 4, 1>, 3, 3, 1, 1>>("2x4x1 (one column), 3x3, pad 1");
    check_layer<pp::conv2d_layer<double, shape<1, 1, 5>, 2, 3, 1, 1>>("1x1x5 (one row), 3x3, pad 1");
    // 16 or more output channels and 64 or more output pixels: backward-p2 as cols dy^T through the workspace
    // (transposed_p2) where the build's GEMM is pipeprop's; 17 and 18 leave a partial vector of output channels.
    check_layer<pp::conv2d_layer<double, shape<3, 9, 8>, 17, 3, 1, 1>>("3x9x8 -> 17 channels, 3x3, pad 1");
    check_layer<pp::conv2d_layer<double, shape<3, 16, 15>, 18, 3, 2, 1>>("3x16x15 -> 18 channels, 3x3, stride 2");
    check_layer<pp::conv2d_layer<double, shape<5, 9, 8>, 16, 1, 1, 0>>("5x9x8 -> 16 channels, 1x1 (identity im2col)");
    // 4+ input channels, a whole number of vectors of output channels, stride 1, 'same':
    // backward-p2 over the padded sample read in place (direct_p2) where the build's GEMM is pipeprop's.
    check_layer<pp::conv2d_layer<double, shape<4, 8, 8>, 8, 3, 1, 1>>("4x8x8 -> 8 channels, 3x3, pad 1 (direct p2)");
    // 8+ channels, whole vectors, stride 1, padding 1, 8 x 8 or larger: Winograd F(2x2, 3x3) in all three passes
    // where the build's GEMM is pipeprop's (F(4x4, 3x3) at 12 x 12 and up, below); odd sizes leave partial tiles.
    check_layer<pp::conv2d_layer<double, shape<8, 9, 11>, 8, 3, 1, 1>>("8x9x11 -> 8 channels, 3x3, pad 1 (Winograd)");
    check_layer<pp::conv2d_layer<double, shape<8, 8, 13>, 16, 3, 1, 1>>("8x8x13 -> 16, 3x3, pad 1 (Winograd)");
    check_layer<pp::conv2d_layer<double, shape<8, 7, 9>, 8, 3, 1, 1>>("8x7x9 -> 8, 3x3, pad 1 (Winograd on AVX2)");
    // maps of 12 x 12 or larger where 4 x 4 output tiles waste little: F(4x4, 3x3), partial tiles at 13 and 17
    check_layer<pp::conv2d_layer<double, shape<8, 13, 12>, 8, 3, 1, 1>>("8x13x12 -> 8, 3x3, pad 1 (F(4x4, 3x3))");
    check_layer<pp::conv2d_layer<double, shape<8, 16, 17>, 16, 3, 1, 1>>("8x16x17 -> 16, 3x3, pad 1 (F(4x4, 3x3))");
    STATIC_REQUIRE((!pp::kernels::simd_gemm_preferred ||
                    (pp::conv2d_layer<double, shape<8, 9, 11>, 8, 3, 1, 1>::winograd &&
                     pp::conv2d_layer<double, shape<8, 8, 13>, 16, 3, 1, 1>::winograd)));
    if constexpr (pp::kernels::simd_gemm_preferred)
        STATIC_REQUIRE(pp::conv2d_layer<double, shape<8, 13, 12>, 8, 3, 1, 1>::winograd_conv::output_tile == 4 &&
                       pp::conv2d_layer<double, shape<8, 16, 17>, 16, 3, 1, 1>::winograd_conv::output_tile == 4 &&
                       pp::conv2d_layer<double, shape<8, 9, 11>, 8, 3, 1, 1>::winograd_conv::output_tile == 2);
    // F(4x4, 3x3) from 12 x 12 where it does at most 2/3 of F(2x2, 3x3)'s products: 14 x 14 (0.73) stays F(2x2)
    STATIC_REQUIRE(pp::detail::winograd_output_tile<28, 28> == 4 && pp::detail::winograd_output_tile<16, 16> == 4 &&
                   pp::detail::winograd_output_tile<13, 12> == 4 && pp::detail::winograd_output_tile<14, 14> == 2 &&
                   pp::detail::winograd_output_tile<12, 11> == 2 && pp::detail::winograd_output_tile<8, 8> == 2 &&
                   pp::detail::winograd_output_tile<7, 7> == 2);
    STATIC_REQUIRE(!pp::conv2d_layer<double, shape<4, 8, 8>, 8, 3, 1, 1>::winograd);  // under 8 input channels
    STATIC_REQUIRE(!pp::conv2d_layer<double, shape<8, 6, 9>, 8, 3, 1, 1>::winograd);  // under 7 rows
    // 7 rows: Winograd with vectors of 256 bits (AVX2), direct with AVX-512's
    STATIC_REQUIRE(pp::conv2d_layer<double, shape<8, 7, 9>, 8, 3, 1, 1>::winograd ==
                   (pp::kernels::simd_gemm_preferred && sizeof(xsimd::batch<double>) == 32));
}

TEST_CASE("conv2d: the finite-difference and direct checks reach every form of backward-p2", "[layers][conv2d]") {
    // With pipeprop's GEMM (FMA, 256-bit vectors or wider: 4 or 8 doubles per vector) 16+ output channels and 64+
    // output pixels in double fill two vectors of channels and eight of pixels and take the transposed form (cols
    // dy^T through the workspace); 2-4 channels (under two vectors) or 25 pixels (under eight) never do. A stride-1
    // 'same' conv with 4+ input channels and whole vectors of output channels reads cols in place (direct_p2).
    static_assert(!pp::kernels::simd_gemm_preferred ||
                  (pp::conv2d_layer<double, shape<3, 9, 8>, 17, 3, 1, 1>::transposed_p2 &&
                   pp::conv2d_layer<double, shape<3, 16, 15>, 18, 3, 2, 1>::transposed_p2 &&
                   pp::conv2d_layer<double, shape<5, 9, 8>, 16, 1, 1, 0>::transposed_p2 &&
                   pp::conv2d_layer<double, shape<16, 14, 14>, 32, 3, 1, 1>::direct_p2 &&
                   pp::conv2d_layer<double, shape<4, 8, 8>, 8, 3, 1, 1>::direct_p2));
    static_assert(!pp::conv2d_layer<double, shape<3, 9, 8>, 17, 3, 1, 1>::direct_p2);  // 3 input channels
    static_assert(!pp::conv2d_layer<double, shape<16, 14, 14>, 32, 3, 1, 1>::transposed_p2);
    {
        const auto ws = pp::conv2d_layer<double, shape<4, 8, 8>, 8, 3, 1, 1>{}.make_workspace(3);
        if constexpr (pp::kernels::simd_gemm_preferred) {  // dy^T in the padded-width layout; no column matrix
            CHECK(ws.dy_t.size() == pp::detail::conv2d_direct<double, 4, 8, 8, 8, 3>::columns * 8);
            CHECK(ws.columns.empty());
        }
    }
    static_assert(!pp::conv2d_layer<double, shape<3, 5, 7>, 4, 3, 1, 1>::transposed_p2);
    static_assert(!pp::conv2d_layer<double, shape<3, 5, 5>, 17, 3, 1, 1>::transposed_p2);
    const auto ws = pp::conv2d_layer<double, shape<3, 9, 8>, 17, 3, 1, 1>{}.make_workspace(3);
    CHECK(ws.dy_t.size() == (pp::kernels::simd_gemm_preferred ? 9 * 8 * 17 : 0));  // one sample's dy, transposed
    CHECK(ws.dw_t.size() == (pp::kernels::simd_gemm_preferred ? 3 * 9 * 17 : 0));  // the weight gradient, transposed
    CHECK(pp::conv2d_layer<double, shape<3, 5, 7>, 4, 3, 1, 1>{}.make_workspace(3).dy_t.size() == 0);
}

/// The float32 layer of a conv2d shape against its float64 layer on the same values: forward, p1 and p2 to float
/// rounding. At stride 1 with 'same' padding on an AVX2 or AVX-512 build the float layer runs the direct
/// convolution (conv2d_direct.hpp; its p1 from 4 input channels on), whose float SIMD blocks the double checks
/// above do not reach.
template <std::size_t C, std::size_t H, std::size_t W, std::size_t O, std::size_t K, std::size_t S, std::size_t P>
void check_float_against_double(std::size_t b) {
    using Ld = pp::conv2d_layer<double, shape<C, H, W>, O, K, S, P>;
    using Lf = pp::conv2d_layer<float, shape<C, H, W>, O, K, S, P>;
    const auto x = random_vector(b * C * H * W, 21), w = random_vector(Ld::parameter_count, 22),
               dy = random_vector(b * Ld::output_shape::size, 23);
    auto to_float = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    const auto xf = to_float(x), wf = to_float(w), dyf = to_float(dy);
    std::vector<double> y(dy.size()), dx(x.size()), dw(w.size(), 0.0);
    std::vector<float> yf(dy.size()), dxf(x.size()), dwf(w.size(), 0.0f);
    const Ld ld{};
    auto sd = ld.make_stash(b);
    auto wsd = ld.make_workspace(b);
    ld.forward(w, x.data(), y.data(), b, sd, wsd);
    ld.backward_input(w, x.data(), y.data(), dy.data(), dx.data(), b, sd, wsd);
    ld.backward_weight(dw, x.data(), y.data(), dy.data(), b, sd, wsd);
    const Lf lf{};
    auto sf = lf.make_stash(b);
    auto wsf = lf.make_workspace(b);
    lf.forward(wf, xf.data(), yf.data(), b, sf, wsf);
    lf.backward_input(wf, xf.data(), yf.data(), dyf.data(), dxf.data(), b, sf, wsf);
    lf.backward_weight(dwf, xf.data(), yf.data(), dyf.data(), b, sf, wsf);
    auto to_double = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
    INFO(C << "x" << H << "x" << W << " -> " << O << ", " << K << "x" << K << ", stride " << S << ", pad " << P
           << ", b = " << b << (Lf::direct ? " (direct)" : "") << (Lf::direct_p1 ? " (direct p1)" : ""));
    // F(4x4, 3x3) rounds 15-20x coarser than the other forms (its transforms multiply by up to 8 and its G holds
    // 1/6, 1/12, 1/24; measured 3e-6 to 6e-6 at 28 x 28 and 14 x 14): its own bound.
    double tolerance = 2e-6;
    if constexpr (Lf::winograd)
        if (Lf::winograd_conv::output_tile == 4) tolerance = 1.5e-5;
    CHECK(relative_error(to_double(yf), y) < tolerance);
    CHECK(relative_error(to_double(dxf), dx) < tolerance);
    CHECK(relative_error(to_double(dwf), dw) < tolerance);
}

TEST_CASE("conv2d: float32 equals float64 to rounding, direct convolution included", "[layers][conv2d]") {
    for (std::size_t b : {1u, 3u}) {
        check_float_against_double<16, 14, 14, 32, 3, 1, 1>(b);  // the small CNN's 2nd conv
        check_float_against_double<4, 6, 5, 5, 5, 1, 2>(b);      // 5x5, odd sizes
        check_float_against_double<3, 5, 7, 4, 3, 1, 1>(b);      // p1 by im2col (fewer than 4 channels)
        check_float_against_double<16, 9, 9, 8, 3, 2, 1>(b);     // stride 2: im2col
        // p2 as cols dy^T through the workspace (transposed_p2, dy^T by register transposes in float)
        check_float_against_double<16, 28, 28, 32, 3, 2, 1>(b);
        check_float_against_double<16, 28, 28, 32, 1, 2, 0>(b);
        check_float_against_double<32, 7, 7, 64, 3, 1, 1>(b);    // ResNet's 7x7 layers
        check_float_against_double<32, 7, 7, 60, 3, 1, 1>(b);    // 60 channels, not whole vectors: p2 by im2col
        check_float_against_double<16, 28, 28, 16, 3, 1, 1>(b);  // ResNet's 28x28 layers
        // channel counts that are not whole vectors keep the direct forms at ResNet's sizes
        check_float_against_double<12, 14, 14, 32, 3, 1, 1>(b);
        check_float_against_double<36, 7, 7, 64, 3, 1, 1>(b);
        check_float_against_double<12, 28, 28, 16, 3, 1, 1>(b);
    }
    // The small CNN's and ResNet's 3x3 layers at 14 x 14 run Winograd F(2x2, 3x3), at 7 x 7 too with AVX2 (direct
    // with AVX-512), ResNet's at 28 x 28 F(4x4, 3x3); the shapes above with 12 or 36 input channels (not whole
    // vectors of float) and 60 output channels run the direct forms.
    if constexpr (pp::kernels::simd_gemm_preferred)
        STATIC_REQUIRE(pp::conv2d_layer<float, shape<16, 28, 28>, 16, 3, 1, 1>::winograd_conv::output_tile == 4 &&
                       pp::conv2d_layer<float, shape<16, 14, 14>, 32, 3, 1, 1>::winograd_conv::output_tile == 2 &&
                       pp::conv2d_layer<float, shape<32, 14, 14>, 32, 3, 1, 1>::winograd_conv::output_tile == 2);
    if constexpr (pp::kernels::simd_gemm_preferred)
        STATIC_REQUIRE(pp::conv2d_layer<float, shape<16, 14, 14>, 32, 3, 1, 1>::winograd &&
                       (pp::conv2d_layer<float, shape<32, 7, 7>, 64, 3, 1, 1>::winograd ==
                        (sizeof(xsimd::batch<float>) == 32)) &&
                       pp::conv2d_layer<float, shape<16, 28, 28>, 16, 3, 1, 1>::winograd &&
                       !pp::conv2d_layer<float, shape<32, 7, 7>, 60, 3, 1, 1>::winograd &&
                       !pp::conv2d_layer<float, shape<12, 14, 14>, 32, 3, 1, 1>::winograd &&
                       pp::conv2d_layer<float, shape<12, 14, 14>, 32, 3, 1, 1>::direct_p2 &&
                       !pp::conv2d_layer<float, shape<36, 7, 7>, 64, 3, 1, 1>::winograd &&
                       pp::conv2d_layer<float, shape<36, 7, 7>, 64, 3, 1, 1>::direct_p2 &&
                       !pp::conv2d_layer<float, shape<12, 28, 28>, 16, 3, 1, 1>::winograd &&
                       pp::conv2d_layer<float, shape<12, 28, 28>, 16, 3, 1, 1>::direct_p2);
    if constexpr (pp::kernels::simd_gemm_preferred)
        STATIC_REQUIRE(pp::conv2d_layer<float, shape<16, 14, 14>, 32, 3, 1, 1>::direct_p1 &&
                       pp::conv2d_layer<float, shape<4, 6, 5>, 5, 5, 1, 2>::direct_p1 &&
                       !pp::conv2d_layer<float, shape<3, 5, 7>, 4, 3, 1, 1>::direct_p1 &&
                       pp::conv2d_layer<float, shape<16, 14, 14>, 32, 3, 1, 1>::direct_p2 &&
                       pp::conv2d_layer<float, shape<16, 28, 28>, 16, 3, 1, 1>::direct_p2 &&
                       pp::conv2d_layer<float, shape<32, 7, 7>, 64, 3, 1, 1>::direct_p2 &&
                       !pp::conv2d_layer<float, shape<32, 7, 7>, 60, 3, 1, 1>::direct_p2 &&
                       pp::conv2d_layer<float, shape<16, 28, 28>, 32, 3, 2, 1>::transposed_p2 &&
                       pp::conv2d_layer<float, shape<16, 28, 28>, 32, 1, 2, 0>::transposed_p2);
}

TEST_CASE("conv2d: forward, p1 and p2 equal a naive direct convolution", "[layers][conv2d]") {
    for (std::size_t b : {1u, 3u}) {
        check_conv_against_direct<pp::conv2d_layer<double, shape<3, 5, 7>, 4, 3, 1, 1>>(b);
        check_conv_against_direct<pp::conv2d_layer<double, shape<3, 5, 7>, 4, 3, 2, 0>>(b);
        check_conv_against_direct<pp::conv2d_layer<double, shape<3, 6, 5>, 2, 3, 2, 1>>(b);
        check_conv_against_direct<pp::conv2d_layer<double, shape<2, 6, 5>, 3, 2, 2, 1>>(b);
        check_conv_against_direct<pp::conv2d_layer<double, shape<3, 5, 7>, 2, 1, 1, 0>>(b);
        check_conv_against_direct<pp::conv2d_layer<double, shape<1, 4, 9>, 3, 5, 1, 2>>(b);
        check_conv_against_direct<pp::conv2d_layer<double, shape<3, 5, 7>, 2, 3, 1, 0>>(b);
        check_conv_against_direct<pp::conv2d_layer<double, shape<2, 4, 1>, 3, 3, 1, 1>>(b);
        check_conv_against_direct<pp::conv2d_layer<double, shape<1, 1, 5>, 2, 3, 1, 1>>(b);
        check_conv_against_direct<pp::conv2d_layer<double, shape<16, 14, 14>, 32, 3, 1, 1>>(b);  // CNN's 2nd conv
        check_conv_against_direct<pp::conv2d_layer<double, shape<8, 9, 11>, 8, 3, 1, 1>>(b);  // Winograd, odd sizes
        check_conv_against_direct<pp::conv2d_layer<double, shape<16, 13, 10>, 8, 3, 1, 1>>(b);  // Winograd, C > OC
        check_conv_against_direct<pp::conv2d_layer<double, shape<8, 9, 66>, 24, 3, 1, 1>>(b);   // 33 tiles per row
        check_conv_against_direct<pp::conv2d_layer<double, shape<8, 7, 7>, 16, 3, 1, 1>>(b);  // Winograd on AVX2
        check_conv_against_direct<pp::conv2d_layer<double, shape<8, 13, 12>, 16, 3, 1, 1>>(b);  // F(4x4, 3x3)
        check_conv_against_direct<pp::conv2d_layer<double, shape<16, 12, 17>, 8, 3, 1, 1>>(b);  // F(4x4), C > OC
        check_conv_against_direct<pp::conv2d_layer<double, shape<3, 16, 15>, 17, 3, 2, 1>>(b);
        check_conv_against_direct<pp::conv2d_layer<double, shape<5, 9, 8>, 16, 1, 1, 0>>(b);
    }
}

TEST_CASE("conv2d: the stash keeps no column matrices (p2 rebuilds them from x in the workspace); bad b throws",
          "[layers][conv2d]") {
    using l3 = pp::conv2d_layer<float, shape<16, 14, 14>, 32, 3, 1, 1>;
    const l3 layer{};
    const auto st = layer.make_stash(4);
    CHECK(pp::stash_bytes(layer, st) < 64);  // was 4 * 144 * 196 floats while the stash kept the column matrices
    using l1 = pp::conv2d_layer<float, shape<16, 14, 14>, 32, 1, 1, 0>;  // 1x1: the input is the column matrix
    CHECK(pp::stash_bytes(l1{}, l1{}.make_stash(4)) < 64);
    // One sample's column matrix, whatever max_b; none where forward, p1 and p2 all read the padded sample in place.
    CHECK(layer.make_workspace(4).columns.size() == (l3::direct_p1 && l3::direct_p2 ? 0 : (16 * 9) * (14 * 14)));
    using l2 = pp::conv2d_layer<float, shape<16, 14, 14>, 32, 3, 2, 1>;  // stride 2: im2col in every pass
    CHECK(l2{}.make_workspace(4).columns.size() == (16 * 9) * (7 * 7));
    CHECK(l1{}.make_workspace(4).columns.size() == 0);

    auto ws = layer.make_workspace(4);
    auto st2 = layer.make_stash(2);
    std::vector<float> w(l3::parameter_count), x(3 * l3::input_shape::size), y(3 * l3::output_shape::size);
    CHECK_THROWS_WITH(layer.forward(w, x.data(), y.data(), 3, st2, ws),
                      Catch::Contains("pipeprop::conv2d::forward") && Catch::Contains("b = 3"));
    CHECK_THROWS_AS(layer.forward(w, x.data(), y.data(), 0, st2, ws), std::invalid_argument);
}

TEST_CASE("conv2d: initialization is He uniform, seeded and reproducible", "[layers][conv2d][init]") {
    using l = pp::conv2d_layer<double, shape<3, 8, 8>, 16, 3, 1, 1>;
    std::vector<double> a(l::parameter_count), b(l::parameter_count), c(l::parameter_count);
    l{}.init_parameters(a, 5);
    l{}.init_parameters(b, 5);
    l{}.init_parameters(c, 6);
    CHECK(a == b);
    CHECK(a != c);
    const double bound = std::sqrt(6.0 / 27.0);
    double mx = 0;
    for (std::size_t i = 0; i < 16 * 27; ++i) mx = std::max(mx, std::abs(a[i]));
    CHECK(mx <= bound);
    CHECK(mx > 0.9 * bound);  // 432 draws from U(-bound, bound) come close to the bound
    for (std::size_t i = 16 * 27; i < a.size(); ++i) CHECK(a[i] == 0.0);
}

TEST_CASE("max_pool2d: forward is the window maximum; gradients match finite differences", "[layers][max_pool2d]") {
    check_layer<pp::max_pool2d_layer<double, shape<2, 7, 9>, 3, 2>>("2x7x9, size 3, stride 2 (overlapping)");
    check_layer<pp::max_pool2d_layer<double, shape<3, 6, 5>, 2, 2>>("3x6x5, size 2 (odd width: last column dropped)");
    check_layer<pp::max_pool2d_layer<double, shape<1, 5, 7>, 3, 1>>("1x5x7, size 3, stride 1");

    using l = pp::max_pool2d_layer<double, shape<2, 7, 9>, 3, 2>;
    static_assert(std::is_same_v<l::output_shape, shape<2, 3, 4>>);
    static_assert(l::parameter_count == 0 && !pp::layer_has_backward_weight<l>);
    const std::size_t b = 3;
    const auto x = random_vector(b * l::input_shape::size, 21);
    std::vector<double> y(b * l::output_shape::size);
    auto st = l{}.make_stash(b);
    pp::no_workspace ws;
    l{}.forward({}, x.data(), y.data(), b, st, ws);
    for (std::size_t n = 0; n < b; ++n)
        for (std::size_t c = 0; c < 2; ++c)
            for (std::size_t oh = 0; oh < 3; ++oh)
                for (std::size_t ow = 0; ow < 4; ++ow) {
                    double m = -1e300;
                    for (std::size_t kh = 0; kh < 3; ++kh)
                        for (std::size_t kw = 0; kw < 3; ++kw)
                            m = std::max(m, x[((n * 2 + c) * 7 + oh * 2 + kh) * 9 + ow * 2 + kw]);
                    CHECK(y[((n * 2 + c) * 3 + oh) * 4 + ow] == m);
                }
    CHECK(pp::stash_bytes(l{}, st) >= b * l::output_shape::size * sizeof(std::uint32_t));
}

TEST_CASE("max_pool2d: ties go to the first element; overlapping windows accumulate in p1", "[layers][max_pool2d]") {
    using l = pp::max_pool2d_layer<double, shape<1, 3, 5>, 3, 2>;  // windows at columns 0-2 and 2-4 share column 2
    std::vector<double> x(15, 0.0), y(2), dy{1.0, 10.0}, dx(15, 7.0);
    x[1 * 5 + 2] = 4.0;  // the maximum of both windows
    auto st = l{}.make_stash(1);
    pp::no_workspace ws;
    l{}.forward({}, x.data(), y.data(), 1, st, ws);
    CHECK(y == std::vector<double>{4.0, 4.0});
    l{}.backward_input({}, x.data(), y.data(), dy.data(), dx.data(), 1, st, ws);
    std::vector<double> expected(15, 0.0);
    expected[1 * 5 + 2] = 11.0;
    CHECK(dx == expected);
    std::vector<double> flat(15, 1.0);  // all equal: the first element of each window wins
    l{}.forward({}, flat.data(), y.data(), 1, st, ws);
    l{}.backward_input({}, flat.data(), y.data(), dy.data(), dx.data(), 1, st, ws);
    expected.assign(15, 0.0);
    expected[0] = 1.0;
    expected[2] = 10.0;
    CHECK(dx == expected);
}

TEST_CASE("avg_pool2d and global_avg_pool: forward definitions and finite differences", "[layers][avg_pool2d]") {
    check_layer<pp::avg_pool2d_layer<double, shape<2, 7, 9>, 3, 2>>("avg_pool2d 2x7x9, size 3, stride 2");
    check_layer<pp::avg_pool2d_layer<double, shape<3, 6, 5>, 2, 2>>("avg_pool2d 3x6x5, size 2");
    check_layer<pp::global_avg_pool_layer<double, shape<3, 5, 7>>>("global_avg_pool 3x5x7");

    using a = pp::avg_pool2d_layer<double, shape<1, 4, 5>, 2, 2>;
    static_assert(std::is_same_v<a::output_shape, shape<1, 2, 2>>);
    std::vector<double> x(20);
    for (std::size_t i = 0; i < 20; ++i) x[i] = static_cast<double>(i);
    std::vector<double> y(4);
    pp::no_stash st;
    pp::no_workspace ws;
    a{}.forward({}, x.data(), y.data(), 1, st, ws);
    // rows 0-1, columns 0-1: (0 + 1 + 5 + 6) / 4 = 3; columns 2-3: 5; rows 2-3: 13, 15.
    CHECK(y == std::vector<double>{3.0, 5.0, 13.0, 15.0});

    using g = pp::global_avg_pool_layer<double, shape<2, 2, 3>>;
    static_assert(std::is_same_v<g::output_shape, shape<2>>);
    std::vector<double> gy(2);
    g{}.forward({}, x.data(), gy.data(), 1, st, ws);
    CHECK(gy[0] == Approx(2.5).epsilon(1e-15));  // mean of 0..5
    CHECK(gy[1] == Approx(8.5).epsilon(1e-15));  // mean of 6..11
}

TEST_CASE("group_norm: finite differences for groups, affine on/off, rank 1 and 3", "[layers][group_norm]") {
    check_layer<pp::group_norm_layer<double, shape<6, 5, 7>, 3, true>>("6x5x7, 3 groups");
    check_layer<pp::group_norm_layer<double, shape<6, 5, 7>, 1, true>>("6x5x7, Groups = 1 (layer norm)");
    check_layer<pp::group_norm_layer<double, shape<6, 5, 7>, 6, true>>("6x5x7, Groups = C (instance norm)");
    check_layer<pp::group_norm_layer<double, shape<6, 5, 7>, 2, false>>("6x5x7, 2 groups, Affine = false");
    check_layer<pp::group_norm_layer<double, shape<4, 3, 3>, 4, false>>("4x3x3, Groups = C, Affine = false");
    check_layer<pp::group_norm_layer<double, shape<12>, 3, true>>("rank 1 [12], 3 groups");
    check_layer<pp::group_norm_layer<double, shape<3, 2, 5>, 3, true>>("3x2x5, 3 input channels, 3 groups");
}

TEST_CASE("group_norm: normalizes each (sample, group); independent of the micro-batch", "[layers][group_norm]") {
    using l = pp::group_norm_layer<double, shape<6, 4, 5>, 3, false>;
    static_assert(l::parameter_count == 0 && !pp::layer_has_backward_weight<l> && !pp::layer_has_init<l>);
    using la = pp::group_norm_layer<double, shape<6, 4, 5>, 3, true>;
    static_assert(la::parameter_count == 12 && pp::total_size(la::parameter_tensors()) == 12);
    static_assert(la::parameter_tensors()[0].name == "gamma" && la::parameter_tensors()[1].name == "beta");
    const std::size_t b = 3, m = 2 * 20;
    auto x = random_vector(b * 120, 31, -2.0, 3.0);
    std::vector<double> y(x.size());
    auto st = l{}.make_stash(b);
    pp::no_workspace ws;
    l{}.forward({}, x.data(), y.data(), b, st, ws);
    for (std::size_t n = 0; n < b; ++n)
        for (std::size_t g = 0; g < 3; ++g) {
            const double* xg = x.data() + n * 120 + g * m;
            const double* yg = y.data() + n * 120 + g * m;
            double mean = 0, var = 0, ymean = 0, yvar = 0;
            for (std::size_t i = 0; i < m; ++i) mean += xg[i] / m;
            for (std::size_t i = 0; i < m; ++i) var += (xg[i] - mean) * (xg[i] - mean) / m;
            for (std::size_t i = 0; i < m; ++i) ymean += yg[i] / m;
            for (std::size_t i = 0; i < m; ++i) yvar += yg[i] * yg[i] / m;
            CHECK(std::abs(ymean) < 1e-14);
            CHECK(yvar == Approx(var / (var + 1e-5)).epsilon(1e-12));
            CHECK(yg[7] == Approx((xg[7] - mean) / std::sqrt(var + 1e-5)).epsilon(1e-12));
        }
    // Sample 1 alone (b = 1) gives the same output as inside the micro-batch of 3.
    std::vector<double> y1(120);
    auto st1 = l{}.make_stash(1);
    l{}.forward({}, x.data() + 120, y1.data(), 1, st1, ws);
    CHECK(std::equal(y1.begin(), y1.end(), y.begin() + 120));

    // Affine: gamma scales and beta shifts each channel; init is gamma = 1, beta = 0 (identity).
    std::vector<double> p(la::parameter_count);
    la{}.init_parameters(p, 0);
    for (std::size_t c = 0; c < 6; ++c) CHECK((p[c] == 1.0 && p[6 + c] == 0.0));
    p[4] = 2.0;
    p[6 + 4] = -1.0;
    std::vector<double> ya(x.size());
    auto sta = la{}.make_stash(b);
    la{}.forward(p, x.data(), ya.data(), b, sta, ws);
    for (std::size_t i = 0; i < 20; ++i) {
        CHECK(ya[120 + 4 * 20 + i] == Approx(2.0 * y[120 + 4 * 20 + i] - 1.0).epsilon(1e-13));
        CHECK(ya[120 + 3 * 20 + i] == Approx(y[120 + 3 * 20 + i]).epsilon(1e-13));
    }
}

TEST_CASE("image layers: the micro-batch size is checked against the stash", "[layers]") {
    pp::no_workspace ws;
    using mp = pp::max_pool2d_layer<float, shape<1, 4, 4>, 2, 2>;
    auto st = mp{}.make_stash(1);
    std::vector<float> x(2 * 16), y(2 * 4);
    CHECK_THROWS_WITH(mp{}.forward({}, x.data(), y.data(), 2, st, ws),
                      Catch::Contains("pipeprop::max_pool2d::forward"));
    using gn = pp::group_norm_layer<float, shape<2, 2, 2>, 2, false>;
    auto sg = gn{}.make_stash(1);
    std::vector<float> gx(16), gy(16);
    CHECK_THROWS_WITH(gn{}.forward({}, gx.data(), gy.data(), 2, sg, ws),
                      Catch::Contains("pipeprop::group_norm::forward"));
}

// A small CNN of every parametric image layer, in double, through layer_stack.
using small_cnn = pp::network<shape<2, 8, 7>,                                                      //
                              pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>, pp::relu, pp::max_pool2d<2>,  // 4x4x3
                              pp::conv2d<6, 3, 1, 1>, pp::group_norm<3>, pp::relu, pp::max_pool2d<2>,  // 6x2x1
                              pp::flatten, pp::dense<10>, pp::relu, pp::dense<3>>;

TEST_CASE("small CNN: fused backward equals p1 then p2; loss gradient matches finite differences",
          "[network][layer_stack][conv2d][group_norm]") {
    using stack_t = pp::layer_stack<small_cnn, double>;
    using loss = pp::softmax_cross_entropy<double, 3>;
    static_assert(std::is_same_v<stack_t::layer_type<7>::output_shape, shape<6, 2, 1>>);
    static_assert(stack_t::layer_count == 12);
    stack_t stack;
    std::vector<double> w(stack_t::parameter_count);
    stack.init_parameters(w, 2024);
    {  // Perturb gamma / beta away from 1 / 0 so that their gradients are generic.
        std::mt19937_64 rng(9);
        for (auto& v : w) v += pp::uniform<double>(rng, -0.2, 0.2);
    }
    for (std::size_t b : {1u, 3u}) {
        auto act = stack.make_activations(stack_t::all(), b);
        auto ws = stack.make_workspaces(stack_t::all(), b);
        const auto x = random_vector(b * stack_t::input_shape::size, 40 + b);
        std::vector<std::int32_t> labels(b);
        for (std::size_t n = 0; n < b; ++n) labels[n] = static_cast<std::int32_t>((n * 2 + 1) % 3);

        auto loss_at = [&](const std::vector<double>& ww) {
            auto a2 = stack.make_activations(stack_t::all(), b);
            std::copy(x.begin(), x.end(), a2.input());
            stack.forward(ww, a2, b, ws);
            return loss::loss(a2.output(), labels.data(), b);
        };

        std::copy(x.begin(), x.end(), act.input());
        stack.forward(w, act, b, ws);
        loss::loss_and_gradient(act.output(), labels.data(), b, act.output_gradient());
        std::vector<double> dw_fused(w.size(), 0.0), dw_split(w.size(), 0.0);
        stack.backward(w, dw_fused, act, b, ws);
        const std::vector<double> dx_fused(act.input_gradient(), act.input_gradient() + x.size());
        stack.backward_input(w, act, b, ws);
        stack.backward_weight(dw_split, act, b, ws);
        CHECK(dw_fused == dw_split);
        CHECK(std::vector<double>(act.input_gradient(), act.input_gradient() + x.size()) == dx_fused);

        // Finite differences through the loss on sampled coordinates: 5 of every parametric layer (first, last and
        // three random ones) so that every weight, bias, gamma and beta tensor is represented.
        std::mt19937_64 rng(77 + b);
        std::vector<std::size_t> coords;
        for (std::size_t i = 0; i < stack_t::layer_count; ++i) {
            const std::size_t lo = stack_t::parameter_offset[i], hi = stack_t::parameter_offset[i + 1];
            if (lo == hi) continue;
            coords.push_back(lo);
            coords.push_back(hi - 1);
            for (int k = 0; k < 3; ++k) coords.push_back(lo + rng() % (hi - lo));
        }
        std::vector<double> analytic, numeric;
        const double h = 1e-5;
        for (std::size_t i : coords) {
            auto wp = w, wm = w;
            wp[i] += h;
            wm[i] -= h;
            analytic.push_back(dw_fused[i]);
            numeric.push_back((loss_at(wp) - loss_at(wm)) / (2 * h));
        }
        std::ostringstream os;
        for (std::size_t k = 0; k < coords.size(); ++k)
            os << coords[k] << ": " << analytic[k] << " vs " << numeric[k] << "\n";
        INFO("b = " << b << "\n" << os.str());
        CHECK(relative_error(analytic, numeric) < default_tolerance);
    }
}
