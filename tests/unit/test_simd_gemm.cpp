// Tests of kernels::simd_gemm (kernels/simd_gemm.hpp) against a plain double-precision reference: every
// transposition case, shapes around the register-block and vector sizes (remainders of rows, columns and K), the
// layers' shapes, row strides larger than the matrix, alpha / beta, and beta == 0 with a NaN-filled C (C not read).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#include "pipeprop/kernels/simd_gemm.hpp"

namespace {

struct gemm_case {
    bool ta, tb;
    std::size_t m, n, k;
    float alpha, beta;
    std::size_t pad;  // extra elements per stored row (lda, ldb, ldc larger than the matrix)
};

/// Runs one case in value type T; returns the largest |simd - reference| / (1 + |reference|).
template <class T = float>
double max_error(const gemm_case& g, std::mt19937& rng) {
    std::uniform_real_distribution<T> u(T(-1), T(1));
    const std::size_t a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
    const std::size_t b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
    const std::size_t lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = g.n + g.pad;
    std::vector<T> a(a_rows * lda + 1), b(b_rows * ldb + 1), c(g.m * ldc + 1);
    for (auto& v : a) v = u(rng);
    for (auto& v : b) v = u(rng);
    for (auto& v : c) v = g.beta == 0.0f ? std::numeric_limits<T>::quiet_NaN() : u(rng);
    const std::vector<T> c0 = c;
    pipeprop::kernels::simd_gemm<T>(g.ta, g.tb, g.m, g.n, g.k, T(g.alpha), a.data(), lda, b.data(), ldb, T(g.beta),
                                    c.data(), ldc);
    double worst = 0.0;
    for (std::size_t i = 0; i < g.m; ++i)
        for (std::size_t j = 0; j < ldc; ++j) {
            const double got = c[i * ldc + j];
            if (j >= g.n) {  // padding between rows is never written
                if (!(std::isnan(got) && std::isnan(c0[i * ldc + j])) && got != c0[i * ldc + j]) return 1e9;
                continue;
            }
            double s = 0.0;
            for (std::size_t p = 0; p < g.k; ++p) {
                const double av = g.ta ? a[p * lda + i] : a[i * lda + p];
                const double bv = g.tb ? b[j * ldb + p] : b[p * ldb + j];
                s += av * bv;
            }
            const double want = g.alpha * s + (g.beta == 0.0f ? 0.0 : g.beta * double(c0[i * ldc + j]));
            const double err = std::abs(got - want) / (1.0 + std::abs(want));
            if (std::isnan(err)) return 1e9;  // e.g. a NaN of C read although beta == 0
            worst = std::max(worst, err);
        }
    return worst;
}

}  // namespace

TEST_CASE("simd_gemm matches a double-precision reference on all transposition cases and remainders", "[kernels]") {
    std::mt19937 rng(11);
    const std::size_t sizes[] = {1, 2, 3, 5, 6, 7, 13, 16, 17, 31, 33, 40};
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (std::size_t m : sizes)
                for (std::size_t n : sizes)
                    for (std::size_t k : {std::size_t(1), std::size_t(2), std::size_t(3), std::size_t(17),
                                          std::size_t(40)}) {
                        const gemm_case g{ta, tb, m, n, k, 1.0f, (m + n + k) % 2 ? 1.0f : 0.0f, (m * n) % 3};
                        INFO("ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k
                                   << " beta=" << g.beta << " pad=" << g.pad);
                        REQUIRE(max_error(g, rng) < 1e-5);
                    }
}

TEST_CASE("simd_gemm handles alpha, beta, K = 0 and K longer than one packed panel", "[kernels]") {
    std::mt19937 rng(12);
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            INFO("ta=" << ta << " tb=" << tb);
            CHECK(max_error({ta, tb, 9, 37, 0, 1.0f, 0.5f, 0}, rng) < 1e-6);     // C = beta C
            CHECK(max_error({ta, tb, 9, 37, 0, 1.0f, 0.0f, 0}, rng) < 1e-6);     // C = 0 (NaN never read)
            CHECK(max_error({ta, tb, 7, 35, 600, -0.5f, 2.0f, 1}, rng) < 1e-4);  // K > 256: several panels
            CHECK(max_error({ta, tb, 4, 20, 257, 1.0f, 0.0f, 0}, rng) < 1e-4);
        }
}

TEST_CASE("simd_gemm is exact enough on the small CNN's layer shapes", "[kernels]") {
    std::mt19937 rng(13);
    const gemm_case cases[] = {
        {false, true, 1, 128, 1568, 1.0f, 0.0f, 0},  {false, false, 1, 1568, 128, 1.0f, 0.0f, 0},
        {true, false, 128, 1568, 1, 1.0f, 1.0f, 0},  {false, true, 32, 128, 1568, 1.0f, 0.0f, 0},
        {true, false, 128, 1568, 32, 1.0f, 1.0f, 0}, {false, false, 32, 196, 144, 1.0f, 0.0f, 0},
        {true, false, 144, 196, 32, 1.0f, 0.0f, 0},  {false, true, 32, 144, 196, 1.0f, 1.0f, 0},
        {false, true, 16, 9, 784, 1.0f, 1.0f, 0},    {false, true, 32, 10, 128, 1.0f, 0.0f, 0},
    };
    for (const auto& g : cases) {
        INFO("ta=" << g.ta << " tb=" << g.tb << " m=" << g.m << " n=" << g.n << " k=" << g.k);
        CHECK(max_error(g, rng) < 1e-4);
    }
}

TEST_CASE("simd_gemm in double precision (the gradient checks' kernel) matches the reference", "[kernels]") {
    std::mt19937 rng(14);
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (std::size_t m : {1, 5, 9})
                for (std::size_t n : {1, 7, 8, 17, 40})
                    for (std::size_t k : {1, 2, 9, 300}) {
                        INFO("ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k);
                        CHECK(max_error<double>({ta, tb, m, n, k, 1.5f, k % 2 ? 1.0f : 0.0f, 1}, rng) < 1e-12);
                    }
}
