// Tests of kernels::simd_gemm (kernels/simd_gemm.hpp) against a plain double-precision reference: every
// transposition case, shapes around the register-block and vector sizes (remainders of rows, columns and K), the
// layers' shapes, row strides larger than the matrix, alpha / beta, and beta == 0 with a NaN-filled C (C not read).
// Also the kernels beside it: shifted_gemm_indexed_a (a direct convolution's backward-p1), transpose_add, and the
// Winograd convolution's small_gemm (bitwise one fused multiply-add chain per element) and transpose_copy.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "pipeprop/kernels/shifted_gemm.hpp"
#include "pipeprop/kernels/simd_gemm.hpp"
#include "pipeprop/kernels/small_gemm.hpp"
#include "pipeprop/kernels/transpose_add.hpp"
#include "pipeprop/kernels/transpose_copy.hpp"

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
            CHECK(max_error({ta, tb, 40, 37, 600, 1.0f, 1.0f, 2}, rng) < 1e-4);  // A B^T: packed K panels
            CHECK(max_error({ta, tb, 16, 20, 784, 1.0f, 1.0f, 0}, rng) < 1e-4);  // A B^T: dot products
            CHECK(max_error({ta, tb, 300, 17, 40, 1.0f, 1.0f, 1}, rng) < 1e-4);  // op(A) B: last column, M > 256
            CHECK(max_error({ta, tb, 64, 49, 576, 1.0f, 0.0f, 0}, rng) < 1e-4);  // conv at 7 x 7: N = 3 W + 1
        }
}

TEST_CASE("simd_gemm's GEMV-shaped paths (M < 4): long K, wide N, every row-block remainder", "[kernels]") {
    // N T with M < 4 (dense forward at small b): blocks of 8, 4, 2, 1 rows of B, K unrolled up to 16 vectors deep
    // (K >= 256 reaches the unrolled loop of a 1-row block on AVX-512), full vectors after it, and a K remainder.
    // N N with M < 4 (dense p1): column blocks of 8, 4, 2, 1 vectors and the packed last columns.
    std::mt19937 rng(15);
    for (std::size_t m : {1, 2, 3})
        for (std::size_t n : {1, 2, 3, 5, 7, 8, 9, 10, 15, 16, 17, 31, 64, 130, 257})
            for (std::size_t k : {std::size_t(5), std::size_t(64), std::size_t(255), std::size_t(256),
                                  std::size_t(300), std::size_t(1568)}) {
                for (bool tb : {false, true}) {
                    const gemm_case g{false, tb, m, n, k, 0.75f, (n + k) % 2 ? 1.0f : 0.0f, n % 3};
                    INFO("tb=" << tb << " m=" << m << " n=" << n << " k=" << k << " beta=" << g.beta);
                    REQUIRE(max_error(g, rng) < 1e-4);
                }
                const gemm_case gd{false, true, m, n, k, 1.5f, n % 2 ? 1.0f : 0.0f, 1};
                INFO("double, N T: m=" << m << " n=" << n << " k=" << k);
                REQUIRE(max_error<double>(gd, rng) < 1e-12);
            }
}

TEST_CASE("simd_gemm gives the same bits whatever the operands' alignment", "[kernels]") {
    // The executors are compared bit for bit (the concurrent PB run equals the sequential reference) while their
    // buffers sit at different addresses: no kernel path may depend on alignment. Each product is computed with A, B
    // and C shifted by 0 to 9 elements from an aligned start and compared bitwise with the unshifted one.
    std::mt19937 rng(16);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const gemm_case cases[] = {
        {false, true, 1, 128, 1568, 1.0f, 1.0f, 0},  {false, false, 1, 1568, 128, 0.7f, 1.3f, 0},
        {true, false, 128, 1568, 1, 0.7f, 1.3f, 0},  {false, false, 2, 100, 37, 0.7f, 1.3f, 0},
        {true, false, 3, 300, 2, 0.7f, 1.3f, 0},     {false, false, 1, 300, 40, 0.7f, 1.3f, 0},
        {true, false, 64, 1568, 1, 1.0f, 1.0f, 0},   {true, false, 3, 300, 2, 1.0f, 1.0f, 0},
        {true, false, 10, 70, 2, 0.7f, 0.3f, 0},     {false, false, 64, 49, 576, 1.0f, 1.0f, 0},
        {true, false, 576, 49, 64, 1.0f, 0.0f, 0},   {false, true, 16, 144, 784, 1.0f, 1.0f, 0},
        {false, true, 32, 144, 196, 1.0f, 1.0f, 0},  {false, false, 1, 23, 40, 0.7f, 1.3f, 0},
    };
    for (const auto& g : cases) {
        const std::size_t a_size = g.m * g.k, b_size = g.k * g.n, c_size = g.m * g.n;
        std::vector<float> a0(a_size), b0(b_size), c0(c_size);
        for (auto& v : a0) v = u(rng);
        for (auto& v : b0) v = u(rng);
        for (auto& v : c0) v = u(rng);
        const std::size_t lda = g.ta ? g.m : g.k, ldb = g.tb ? g.k : g.n;
        std::vector<float> reference;
        for (std::size_t shift : {0, 1, 3, 4, 9}) {
            std::vector<float, xsimd::aligned_allocator<float>> a(a_size + shift), b(b_size + 2 * shift),
                c(c_size + 3 * shift);
            std::copy(a0.begin(), a0.end(), a.begin() + std::ptrdiff_t(shift));
            std::copy(b0.begin(), b0.end(), b.begin() + std::ptrdiff_t(2 * shift));
            std::copy(c0.begin(), c0.end(), c.begin() + std::ptrdiff_t(3 * shift));
            pipeprop::kernels::simd_gemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.data() + shift, lda,
                                         b.data() + 2 * shift, ldb, g.beta, c.data() + 3 * shift, g.n);
            const std::vector<float> out(c.begin() + std::ptrdiff_t(3 * shift), c.end());
            if (shift == 0) reference = out;
            INFO("ta=" << g.ta << " tb=" << g.tb << " m=" << g.m << " n=" << g.n << " k=" << g.k
                       << " shift=" << shift);
            REQUIRE(std::memcmp(out.data(), reference.data(), c_size * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("simd_gemm is exact enough on the small CNN's and ResNet-20's layer shapes", "[kernels]") {
    std::mt19937 rng(13);
    const gemm_case cases[] = {
        {false, true, 1, 128, 1568, 1.0f, 0.0f, 0},  {false, false, 1, 1568, 128, 1.0f, 0.0f, 0},
        {true, false, 128, 1568, 1, 1.0f, 1.0f, 0},  {false, true, 32, 128, 1568, 1.0f, 0.0f, 0},
        {true, false, 128, 1568, 32, 1.0f, 1.0f, 0}, {false, false, 32, 196, 144, 1.0f, 0.0f, 0},
        {true, false, 144, 196, 32, 1.0f, 0.0f, 0},  {false, true, 32, 144, 196, 1.0f, 1.0f, 0},
        {false, true, 16, 9, 784, 1.0f, 1.0f, 0},    {false, true, 32, 10, 128, 1.0f, 0.0f, 0},
        // ResNet-20's dense 64 -> 10 at b = 1 (forward, p1, p2) and its convolutions' im2col GEMMs
        {false, true, 1, 10, 64, 1.0f, 1.0f, 0},     {false, false, 1, 64, 10, 1.0f, 0.0f, 0},
        {true, false, 10, 64, 1, 1.0f, 1.0f, 0},     {false, false, 16, 784, 144, 1.0f, 1.0f, 0},
        {true, false, 144, 784, 16, 1.0f, 0.0f, 0},  {false, true, 16, 144, 784, 1.0f, 1.0f, 0},
        {false, false, 64, 49, 576, 1.0f, 1.0f, 0},  {true, false, 576, 49, 64, 1.0f, 0.0f, 0},
        {false, true, 64, 576, 49, 1.0f, 1.0f, 0},   {false, false, 64, 49, 32, 1.0f, 1.0f, 0},
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

/// dst += src^T element by element, the definition kernels::transpose_add must equal bit for bit.
template <class T>
void check_transpose_add(std::size_t rows, std::size_t cols, std::mt19937& rng) {
    std::uniform_real_distribution<T> u(T(-1), T(1));
    const std::size_t ld_src = cols + 3, ld_dst = rows + 5;  // strides wider than the matrices: gaps never written
    std::vector<T> src(rows * ld_src), dst(cols * ld_dst);
    for (auto& v : src) v = u(rng);
    for (auto& v : dst) v = u(rng);
    std::vector<T> want = dst;
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) want[j * ld_dst + i] += src[i * ld_src + j];
    pipeprop::kernels::transpose_add(rows, cols, src.data(), ld_src, dst.data(), ld_dst);
    INFO("rows=" << rows << " cols=" << cols);
    CHECK(dst == want);
}

TEST_CASE("transpose_add adds src^T with one rounding per element: tiles, edges and strides", "[kernels]") {
    std::mt19937 rng(15);
    // Around the register tiles (8 x 8 with AVX, 16 x 16 with AVX-512) and conv2d's shapes (C K K x OC: 144 x 16,
    // 288 x 32, 576 x 64, 9 x 16 for the 1-channel stem).
    for (std::size_t rows : {1, 7, 8, 9, 15, 16, 17, 33, 144, 288, 576})
        for (std::size_t cols : {1, 5, 8, 9, 16, 17, 31, 32, 64}) {
            check_transpose_add<float>(rows, cols, rng);
            check_transpose_add<double>(rows, cols, rng);
        }
}

TEST_CASE("transpose_copy writes src^T exactly: tiles, overlapping last tiles, edges and strides", "[kernels]") {
    std::mt19937 rng(16);
    const auto check = [&](auto zero, std::size_t rows, std::size_t cols) {
        using T = decltype(zero);
        const std::size_t ld_src = cols + 3, ld_dst = rows + 2;
        std::vector<T> src(rows * ld_src), dst(cols * ld_dst, T(-7)), want(dst);
        std::uniform_real_distribution<T> u(-1, 1);
        for (auto& e : src) e = u(rng);
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < cols; ++j) want[j * ld_dst + i] = src[i * ld_src + j];
        pipeprop::kernels::transpose_copy(rows, cols, src.data(), ld_src, dst.data(), ld_dst);
        INFO("rows=" << rows << " cols=" << cols);
        CHECK(dst == want);  // the padding between rows of dst untouched
    };
    for (std::size_t rows : {1, 7, 8, 9, 12, 16, 28, 64})
        for (std::size_t cols : {1, 5, 7, 8, 9, 14, 28, 576}) {
            check(0.0f, rows, cols);
            check(0.0, rows, cols);
        }
}

namespace {

/// small_gemm<T, TransA, M, K, N, Lda> against one std::fma chain per element over k in order (from 0, or from C's
/// value with accumulate): the same bits.
template <class T, bool TransA, std::size_t M, std::size_t K, std::size_t N>
void check_small_gemm(std::mt19937& rng) {
    constexpr std::size_t lda = (TransA ? M : K) + 3;
    std::uniform_real_distribution<T> u(-1, 1);
    std::vector<T> a((TransA ? K : M) * lda), b(K * N), c(M * N), want(M * N);
    for (auto& e : a) e = u(rng);
    for (auto& e : b) e = u(rng);
    for (bool accumulate : {false, true}) {
        for (auto& e : c) e = u(rng);
        for (std::size_t i = 0; i < M; ++i)
            for (std::size_t j = 0; j < N; ++j) {
                T acc = accumulate ? c[i * N + j] : T(0);
                for (std::size_t k = 0; k < K; ++k)
                    acc = std::fma(TransA ? a[k * lda + i] : a[i * lda + k], b[k * N + j], acc);
                want[i * N + j] = acc;
            }
        pipeprop::kernels::small_gemm<T, TransA, M, K, N, lda>(a.data(), b.data(), c.data(), accumulate);
        INFO("M=" << M << " K=" << K << " N=" << N << " trans_a=" << TransA << " accumulate=" << accumulate);
        CHECK(c == want);
    }
}

}  // namespace

TEST_CASE("small_gemm: each element one fused multiply-add chain over k, bitwise, every block remainder",
          "[kernels]") {
    std::mt19937 rng(17);
    constexpr std::size_t vf = xsimd::batch<float>::size, vd = xsimd::batch<double>::size;
    // the Winograd convolution's shapes (tiles x C x OC, and C x tiles x OC transposed) and row remainders
    check_small_gemm<float, false, 196, 16, 16>(rng);
    check_small_gemm<float, false, 49, 32, 2 * vf>(rng);
    check_small_gemm<float, false, 16, 64, 4 * vf>(rng);
    check_small_gemm<float, false, 13, 5, 8 * vf>(rng);
    check_small_gemm<float, true, 16, 196, 16>(rng);
    check_small_gemm<float, true, 33, 16, 3 * vf>(rng);
    check_small_gemm<float, false, 14, 16, 16>(rng);  // F(4x4, 3x3) at 28 x 28: blocks of 14 tiles
    check_small_gemm<float, true, 16, 14, 16>(rng);
    check_small_gemm<double, false, 15, 9, vd>(rng);
    check_small_gemm<double, false, 20, 8, 6 * vd>(rng);
    check_small_gemm<double, true, 8, 12, 2 * vd>(rng);
}

TEST_CASE("shifted_gemm (indexed A too) is the product; indexed A equals the matrix it describes, bitwise",
          "[kernels]") {
    // A's columns read at offsets, as conv2d's direct backward-p1 reads W' from the weights [OC, C, K, K]: A[r, p] =
    // a[r lda + a_offsets[p]] with the columns in reverse order within groups of 3 and the groups strided.
    std::mt19937 rng(16);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    constexpr std::size_t w = xsimd::batch<float>::size;
    for (std::size_t m : {1, 3, 8, 13, 32})
        for (std::size_t n : {w, 2 * w, 3 * w, 7 * w})
            for (std::size_t k : {1, 3, 9, 48}) {
                const std::size_t lda = 3, groups = (k + 2) / 3, group_stride = m * lda;
                std::vector<float> a(groups * group_stride + lda), b(k * 2 + n + 64);
                for (auto& v : a) v = u(rng);
                for (auto& v : b) v = u(rng);
                std::vector<std::ptrdiff_t> a_offsets(k), b_offsets(k);
                std::vector<float> dense(m * k);  // the same A, materialized row-major
                for (std::size_t p = 0; p < k; ++p) {
                    a_offsets[p] = static_cast<std::ptrdiff_t>((p / 3) * group_stride + 2 - p % 3);
                    b_offsets[p] = static_cast<std::ptrdiff_t>((p * 7) % 64);
                    for (std::size_t r = 0; r < m; ++r) dense[r * k + p] = a[r * lda + a_offsets[p]];
                }
                std::vector<float> c1(m * n), c2(m * n);
                pipeprop::kernels::shifted_gemm_indexed_a(m, n, k, a.data(), lda, a_offsets.data(), b.data(),
                                                          b_offsets.data(), c1.data(), n);
                pipeprop::kernels::shifted_gemm(m, n, k, dense.data(), k, b.data(), b_offsets.data(), c2.data(), n);
                INFO("m=" << m << " n=" << n << " k=" << k);
                CHECK(c1 == c2);
                double worst = 0.0;  // and both are the product
                for (std::size_t r = 0; r < m; ++r)
                    for (std::size_t j = 0; j < n; ++j) {
                        double s = 0.0;
                        for (std::size_t p = 0; p < k; ++p) s += double(dense[r * k + p]) * b[b_offsets[p] + j];
                        worst = std::max(worst, std::abs(c1[r * n + j] - s) / (1.0 + std::abs(s)));
                    }
                CHECK(worst < 1e-5);
            }
}
