// The exponential kernels (pipeprop/kernels/exp_kernels.hpp) against std::exp in double, for every row length up to
// three vector widths (so the vector body, the padded tail and both together are covered):
// - exp_sum's terms and sum, row_max, scale_row;
// - an element's value does not depend on its position or on the row's length (the tail goes through the same
//   vector exponential as the body);
// - the SwiGLU gate row and its backward against the scalar formulas, and at extreme gate values (no NaN: 0 and 1
//   limits of the sigmoid).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#include "pipeprop/kernels/exp_kernels.hpp"

namespace kernels = pipeprop::kernels;

namespace {
template <class T>
std::vector<T> random_row(std::size_t n, unsigned seed, T scale) {
    std::mt19937 gen(seed);
    std::normal_distribution<T> dist(T(0), scale);
    std::vector<T> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

// A few ulp of float, relative.
template <class T>
constexpr T rel_tol = std::is_same_v<T, float> ? T(4e-7) : T(1e-14);
}  // namespace

TEMPLATE_TEST_CASE("exp_sum, row_max and scale_row match std::exp at every row length", "[kernels]", float, double) {
    using T = TestType;
    constexpr std::size_t w = xsimd::batch<T>::size;
    for (std::size_t n = 1; n <= 3 * w + 1; ++n) {
        const auto z = random_row<T>(n, static_cast<unsigned>(n), T(3));
        T mx = z[0];
        for (const T v : z) mx = std::max(mx, v);
        REQUIRE(kernels::row_max(z.data(), n) == mx);
        std::vector<T> e(n);
        const T s = kernels::exp_sum(z.data(), mx, n, e.data());
        double ref_sum = 0;
        for (std::size_t c = 0; c < n; ++c) {
            const double ref = std::exp(static_cast<double>(T(z[c] - mx)));  // the kernel subtracts in T
            ref_sum += ref;
            CHECK(std::abs(e[c] - ref) <= rel_tol<T> * ref);
        }
        CHECK(std::abs(s - ref_sum) <= T(n) * rel_tol<T> * ref_sum);
        // Without an output row the sum is the same bits; in place (out == z) the terms are the same bits.
        CHECK(kernels::exp_sum(z.data(), mx, n, static_cast<T*>(nullptr)) == s);
        auto in_place = z;
        CHECK(kernels::exp_sum(in_place.data(), mx, n, in_place.data()) == s);
        CHECK(in_place == e);
        kernels::scale_row(e.data(), n, T(1) / s);
        for (std::size_t c = 0; c < n; ++c) CHECK(e[c] == in_place[c] * (T(1) / s));
    }
}

TEMPLATE_TEST_CASE("exp_sum: an element's exponential does not depend on its position or the row's length",
                   "[kernels]", float, double) {
    using T = TestType;
    constexpr std::size_t w = xsimd::batch<T>::size;
    const T value = T(-1.2345678);
    T first = 0;
    for (std::size_t n = 1; n <= 2 * w + 1; ++n) {
        for (std::size_t at = 0; at < n; ++at) {
            std::vector<T> z(n, T(0.5)), out(n);
            z[at] = value;
            (void)kernels::exp_sum(z.data(), T(0.25), n, out.data());
            if (n == 1) first = out[at];
            CHECK(out[at] == first);
        }
    }
}

TEMPLATE_TEST_CASE("swiglu_gate_row and its backward match the scalar formulas at every length and at extremes",
                   "[kernels]", float, double) {
    using T = TestType;
    constexpr std::size_t w = xsimd::batch<T>::size;
    for (std::size_t n = 1; n <= 3 * w + 1; ++n) {
        auto g = random_row<T>(n, 100 + static_cast<unsigned>(n), T(4));
        const auto u = random_row<T>(n, 200 + static_cast<unsigned>(n), T(1));
        const auto dh = random_row<T>(n, 300 + static_cast<unsigned>(n), T(1));
        if (n > 1) {  // the sigmoid's limits: exp(1000) overflows to inf in float and double, which must give 1 and 0
            g[0] = T(1000);
            g[1] = T(-1000);
        }
        std::vector<T> h(n), dg(n), du(n);
        kernels::swiglu_gate_row(n, g.data(), u.data(), h.data());
        kernels::swiglu_gate_row_backward(n, g.data(), u.data(), dh.data(), dg.data(), du.data());
        for (std::size_t j = 0; j < n; ++j) {
            const double gj = g[j], s = 1.0 / (1.0 + std::exp(-gj));
            const double silu = gj * s;
            const double ref_h = silu * u[j];
            const double ref_dg = dh[j] * u[j] * s * (1.0 + gj * (1.0 - s));
            const double ref_du = dh[j] * silu;
            const double tol = 8 * rel_tol<T>;
            CHECK(std::abs(h[j] - ref_h) <= tol * (std::abs(ref_h) + 1e-30));
            CHECK(std::abs(dg[j] - ref_dg) <= tol * (std::abs(dh[j] * u[j]) + 1e-30));
            CHECK(std::abs(du[j] - ref_du) <= tol * (std::abs(dh[j] * gj) + 1e-30));
        }
        if (n > 1) {
            CHECK(h[0] == T(1000) * u[0]);  // sigmoid(1000) = 1
            CHECK(h[1] == T(0));            // sigmoid(-1000) = 0: -1000 * 0 * u, no NaN
            CHECK(dg[0] == dh[0] * u[0]);   // s = 1: d silu / dg = 1
            CHECK(dg[1] == T(0));
            CHECK(du[1] == T(0));
        }
    }
}
