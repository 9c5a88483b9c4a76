// Bit-for-bit checks of the layers' fast paths against independent element loops written here from the definitions:
// - max_pool2d with 2 x 2 windows and stride 2 (its own forward, and a dense p1 from 10 outputs per row): values,
//   stashed indices and input gradients equal the general form's (first maximum wins, dx = 0 then dx[argmax] += dy),
//   with ties, NaN inputs, -0 and NaN gradients, odd heights / widths, float and double;
// - the strided reductions (kernels/strided_sums.hpp) against one call of the one-array kernel per array;
// - group_norm's forward, p1 and p2 against the same formulas reduced one group / channel at a time with the
//   one-array kernels (the order the strided kernels must keep), at group and channel counts that leave remainders,
//   spatial extents below one vector (the scalar path) and without the affine map.
// The finite-difference and definition checks of these layers are in test_layers_image.cpp.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace pp = pipeprop;
using pp::shape;

namespace {

template <class T>
std::vector<T> tie_values(std::size_t n, unsigned seed) {  // few distinct values: many ties
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> u(-3, 3);
    std::vector<T> v(n);
    for (auto& e : v) e = static_cast<T>(u(rng)) * T(0.5);
    return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
bool same_bits(T a, T b) {  // tells -0 from +0
    return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// max_pool2d<2, 2> on [C, H, W] against the general algorithm written out here.
template <class T, std::size_t C, std::size_t H, std::size_t W>
void check_pool_pairs(std::size_t b) {
    using l = pp::max_pool2d_layer<T, shape<C, H, W>, 2, 2>;
    constexpr std::size_t oh_n = H / 2, ow_n = W / 2, in = C * H * W, out = C * oh_n * ow_n;
    static_assert(l::pairs);
    auto x = tie_values<T>(b * in, 7);
    auto dy = tie_values<T>(b * out, 8);
    x[1] = std::numeric_limits<T>::quiet_NaN();  // a NaN never wins a comparison (the first value stays)
    x[in - 1] = std::numeric_limits<T>::quiet_NaN();
    dy[0] = T(-0.0);
    dy[2] = std::numeric_limits<T>::quiet_NaN();
    dy[out - 1] = T(-0.0);

    std::vector<T> y_ref(b * out), dx_ref(b * in, T(0));
    std::vector<std::uint32_t> a_ref(b * out);
    for (std::size_t n = 0; n < b; ++n)
        for (std::size_t c = 0; c < C; ++c)
            for (std::size_t oh = 0; oh < oh_n; ++oh)
                for (std::size_t ow = 0; ow < ow_n; ++ow) {
                    std::size_t at = (c * H + 2 * oh) * W + 2 * ow;
                    T best = x[n * in + at];
                    for (std::size_t kh = 0; kh < 2; ++kh)
                        for (std::size_t kw = 0; kw < 2; ++kw) {
                            const std::size_t i = (c * H + 2 * oh + kh) * W + 2 * ow + kw;
                            if (x[n * in + i] > best) {
                                best = x[n * in + i];
                                at = i;
                            }
                        }
                    const std::size_t o = n * out + (c * oh_n + oh) * ow_n + ow;
                    y_ref[o] = best;
                    a_ref[o] = static_cast<std::uint32_t>(at);
                    dx_ref[n * in + at] += dy[o];
                }

    auto st = l{}.make_stash(b);
    pp::no_workspace ws;
    std::vector<T> y(b * out), dx(b * in, T(5));
    l{}.forward({}, x.data(), y.data(), b, st, ws);
    CHECK(same_bits(y, y_ref));
    CHECK(std::memcmp(st.argmax.data(), a_ref.data(), b * out * sizeof(std::uint32_t)) == 0);
    l{}.backward_input({}, x.data(), y.data(), dy.data(), dx.data(), b, st, ws);
    CHECK(same_bits(dx, dx_ref));
}

}  // namespace

TEST_CASE("max_pool2d 2x2 stride 2: forward, indices and p1 bitwise equal to the general form",
          "[layers][max_pool2d]") {
    static_assert(pp::max_pool2d_layer<float, shape<16, 28, 28>, 2, 2>::dense_p1);   // 14 outputs per row
    static_assert(!pp::max_pool2d_layer<float, shape<32, 14, 14>, 2, 2>::dense_p1);  // 7: zero and scatter
    static_assert(!pp::max_pool2d_layer<float, shape<2, 7, 9>, 3, 2>::pairs);
    SECTION("float 16x28x28, dense p1") { check_pool_pairs<float, 16, 28, 28>(3); }
    SECTION("float 3x14x14, scatter p1") { check_pool_pairs<float, 3, 14, 14>(2); }
    SECTION("double 2x21x23, odd height and width, dense p1") { check_pool_pairs<double, 2, 21, 23>(2); }
    SECTION("float 3x9x22, odd height, dense p1") { check_pool_pairs<float, 3, 9, 22>(1); }
    SECTION("double 1x5x5, odd, scatter p1") { check_pool_pairs<double, 1, 5, 5>(2); }
}

TEST_CASE("strided sums: bitwise equal to one call of the one-array kernel per array", "[kernels][strided_sums]") {
    const auto check = [](auto zero) {
        using T = decltype(zero);
        std::mt19937 rng(11);
        std::normal_distribution<T> u(T(0.3), T(1));
        for (std::size_t n : {1, 3, 8, 16, 17, 37, 64, 100, 196}) {
            const std::size_t stride = n + 5;  // gaps between the arrays
            std::vector<T> x(4 * stride), dy(4 * stride);
            for (auto& e : x) e = u(rng);
            for (auto& e : dy) e = u(rng);
            const T means[4] = {T(0.1), T(-0.7), T(0.3), T(2)};
            T s[4], q[4], ds[4], dd[4];
            pp::kernels::strided_sums<4>(n, x.data(), stride, s);
            pp::kernels::strided_centered_square_sums<4>(n, x.data(), stride, means, q);
            pp::kernels::strided_sums_and_centered_dots<4>(n, dy.data(), x.data(), stride, means[1], ds, dd);
            for (std::size_t j = 0; j < 4; ++j) {
                CAPTURE(n, j);
                CHECK(same_bits(s[j], pp::kernels::sum(n, x.data() + j * stride)));
                CHECK(same_bits(q[j], pp::kernels::centered_square_sum(n, x.data() + j * stride, means[j])));
                CHECK(same_bits(ds[j], pp::kernels::sum(n, dy.data() + j * stride)));
                CHECK(same_bits(dd[j],
                                pp::kernels::centered_dot(n, dy.data() + j * stride, x.data() + j * stride, means[1])));
            }
            if (n == 3 || n == 17) {  // the compile-time length of the normalization layers
                T fs[4], fd[4];
                if (n == 3)
                    pp::kernels::fixed_sums_and_centered_dots<3, 4>(dy.data(), x.data(), stride, means[3], fs, fd);
                else
                    pp::kernels::fixed_sums_and_centered_dots<17, 4>(dy.data(), x.data(), stride, means[3], fs, fd);
                for (std::size_t j = 0; j < 4; ++j) {
                    CAPTURE(n, j);
                    CHECK(same_bits(fs[j], pp::kernels::sum(n, dy.data() + j * stride)));
                    CHECK(same_bits(fd[j], pp::kernels::centered_dot(n, dy.data() + j * stride,
                                                                     x.data() + j * stride, means[3])));
                }
            }
            T one_s, one_d;
            pp::kernels::strided_sums_and_centered_dots<1>(n, dy.data(), x.data(), stride, means[2], &one_s, &one_d);
            CHECK(same_bits(one_s, pp::kernels::sum(n, dy.data())));
            CHECK(same_bits(one_d, pp::kernels::centered_dot(n, dy.data(), x.data(), means[2])));
        }
    };
    SECTION("float") { check(0.0f); }
    SECTION("double") { check(0.0); }
}

namespace {

/// group_norm forward / p1 / p2 against the formulas with one-array reductions, one group / channel at a time.
template <class T, std::size_t C, std::size_t S, std::size_t G, bool Affine = true>
void check_group_norm_bits(std::size_t b) {
    using l = pp::group_norm_layer<T, shape<C, S>, G, Affine>;
    constexpr std::size_t cpg = C / G, m = cpg * S, size = C * S;
    std::mt19937 rng(5);
    std::normal_distribution<T> u(T(0.2), T(1));
    std::vector<T> x(b * size), dy(b * size), w(Affine ? 2 * C : 0);
    for (auto& e : x) e = u(rng);
    for (auto& e : dy) e = u(rng);
    for (auto& e : w) e = u(rng);
    const T inv_m = T(1) / static_cast<T>(m);
    std::vector<T> y_ref(b * size), dx_ref(b * size), dw_ref(w.size(), T(0.25));
    const auto gamma = [&](std::size_t c) { return Affine ? w[c] : T(1); };
    for (std::size_t n = 0; n < b; ++n)
        for (std::size_t g = 0; g < G; ++g) {
            const std::size_t first = n * size + g * m;
            const T mean = pp::kernels::sum(m, x.data() + first) * inv_m;
            const T var = pp::kernels::centered_square_sum(m, x.data() + first, mean) * inv_m;
            const T rstd = T(1) / std::sqrt(var + static_cast<T>(1e-5));
            T s1 = 0, s2 = 0;
            for (std::size_t k = 0; k < cpg; ++k) {
                const std::size_t c = g * cpg + k, at = first + k * S;
                const T a = gamma(c) * rstd, shift = (Affine ? w[C + c] : T(0)) - a * mean;
                for (std::size_t i = 0; i < S; ++i) y_ref[at + i] = a * x[at + i] + shift;
                const T sum = pp::kernels::sum(S, dy.data() + at);
                const T dot = pp::kernels::centered_dot(S, dy.data() + at, x.data() + at, mean);
                s1 += gamma(c) * sum;
                s2 += gamma(c) * dot;
                if constexpr (Affine) {
                    dw_ref[c] += rstd * dot;
                    dw_ref[C + c] += sum;
                }
            }
            s2 *= rstd;
            const T bx = -rstd * rstd * s2 * inv_m;
            const T c0 = -rstd * s1 * inv_m - bx * mean;
            for (std::size_t k = 0; k < cpg; ++k) {
                const std::size_t at = first + k * S;
                const T a = gamma(g * cpg + k) * rstd;
                for (std::size_t i = 0; i < S; ++i) dx_ref[at + i] = a * dy[at + i] + bx * x[at + i] + c0;
            }
        }
    auto st = l{}.make_stash(b);
    pp::no_workspace ws;
    std::vector<T> y(b * size), dx(b * size), dw(w.size(), T(0.25));
    l{}.forward(w, x.data(), y.data(), b, st, ws);
    l{}.backward_input(w, x.data(), y.data(), dy.data(), dx.data(), b, st, ws);
    if constexpr (Affine) l{}.backward_weight(dw, x.data(), y.data(), dy.data(), b, st, ws);
    CHECK(same_bits(y, y_ref));
    CHECK(same_bits(dx, dx_ref));
    CHECK(same_bits(dw, dw_ref));
}

}  // namespace

TEST_CASE("group_norm: forward, p1 and p2 bitwise equal to one group / channel at a time", "[layers][group_norm]") {
    SECTION("float 16 x 784, 4 groups") { check_group_norm_bits<float, 16, 784, 4>(2); }
    SECTION("float 30 x 37, 5 groups (chunk remainders)") { check_group_norm_bits<float, 30, 37, 5>(3); }
    SECTION("double 28 x 64, 7 groups (4 channels per group)") { check_group_norm_bits<double, 28, 64, 7>(2); }
    SECTION("float 20 x 1, 1 group") { check_group_norm_bits<float, 20, 1, 1>(4); }
    SECTION("double 6 x 9, 6 groups") { check_group_norm_bits<double, 6, 9, 6>(2); }
    SECTION("double 24 x 17, 4 groups (6 channels per group: chunk remainders)") {
        check_group_norm_bits<double, 24, 17, 4>(2);
    }
    // spatial extents below one vector: p1 and p2 take the scalar path of fixed_sums_and_centered_dots
    SECTION("float 32 x 3, 4 groups (8 channels per group)") { check_group_norm_bits<float, 32, 3, 4>(3); }
    SECTION("float 24 x 7, 2 groups") { check_group_norm_bits<float, 24, 7, 2>(2); }
    SECTION("double 40 x 1, 5 groups") { check_group_norm_bits<double, 40, 1, 5>(3); }
    SECTION("without the affine map: float 30 x 37 and 32 x 3, double 24 x 17") {
        check_group_norm_bits<float, 30, 37, 5, false>(2);
        check_group_norm_bits<float, 32, 3, 4, false>(2);
        check_group_norm_bits<double, 24, 17, 4, false>(2);
    }
}
