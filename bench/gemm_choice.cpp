// bench/gemm_choice.cpp: the measurement that decides, per GEMM shape, between CBLAS sgemm (OpenBLAS) and
// pipeprop's xsimd kernel (kernels/simd_gemm.hpp). Recorded in bench/README.md, sections "GEMM: BLAS or xsimd" and
// "Kernels at b = 1".
//
// Shapes are the exact calls the layers of the small CNN, of ResNet-20 (examples/train/networks.hpp) and of
// a 784-256 MLP make, with their transposition flags, at micro-batch sizes b = 1 and b = 32:
//   dense In->Out:  forward  C[b, Out]  = x[b, In] W[Out, In]^T        (N T)
//                   p1       C[b, In]   = dy[b, Out] W[Out, In]         (N N)
//                   p2       C[Out, In] += dy[b, Out]^T x[b, In]         (T N)
//   conv2d (im2col, one sample; P = C K K patch rows, Q = OH OW pixels):
//                   forward  C[OC, Q]   = W[OC, P] cols[P, Q]           (N N)
//                   p1       C[P, Q]    = W[OC, P]^T dy[OC, Q]          (T N)
//                   p2       C[OC, P]   += dy[OC, Q] cols[P, Q]^T        (N T)
// plus a few larger shapes (a CIFAR-size 3x3 convolution with 64 channels, square 256 and 512) that show where the
// BLAS library's cache blocking starts to pay. Every benchmark is named gemm/<shape>/<variant> and reports GFLOP/s
// (2 M N K per call):
//   blas   cblas_sgemm at the shape;
//   blas2  (dense at b = 1 only) the level-2 BLAS call with the same multiply-adds, which is what these products
//          are: forward y = W x is cblas_sgemv (no transpose), p1 dx = W^T dy is cblas_sgemv (transposed), p2
//          dW += dy x^T is cblas_sger;
//   xsimd  kernels::simd_gemm, what kernels::gemm runs for every shape listed here (M N K <= 2^27).
// Before timing, the xsimd and level-2 results are compared with sgemm on every shape; a mismatch aborts the program
// (exit code 1).
//
// Run: build-bench/bench/gemm_choice --benchmark_repetitions=10 --benchmark_enable_random_interleaving=true
//      (bench/side_by_side.sh does this and prints the ratio table with bench/ratios.py; bench/kernels_b1.sh prints
//      the b = 1 tables).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "pipeprop/kernels/gemm.hpp"
#include "pipeprop/kernels/simd_gemm.hpp"
#include "pipeprop/layer_stack.hpp"

#ifndef PIPEPROP_BENCH_MARCH
#define PIPEPROP_BENCH_MARCH "unknown"
#endif

namespace {

struct gemm_shape {
    std::string name;
    bool trans_a = false, trans_b = false;
    std::size_t m = 0, n = 0, k = 0;
    float beta = 0.0f;  // 1 for the accumulating p2 GEMMs
    /// Which level-2 BLAS call does the same multiply-adds (dense at b = 1), or none.
    enum class level2 { none, gemv_n, gemv_t, ger } blas2 = level2::none;
};

std::vector<gemm_shape> shapes() {
    std::vector<gemm_shape> s;
    const auto dense = [&](std::size_t in, std::size_t out, std::size_t b) {
        const std::string base = "dense" + std::to_string(in) + "-" + std::to_string(out) + "_b" + std::to_string(b);
        using l2 = gemm_shape::level2;
        s.push_back({base + "_fwd", false, true, b, out, in, 0.0f, b == 1 ? l2::gemv_n : l2::none});
        s.push_back({base + "_p1", false, false, b, in, out, 0.0f, b == 1 ? l2::gemv_t : l2::none});
        s.push_back({base + "_p2", true, false, out, in, b, 1.0f, b == 1 ? l2::ger : l2::none});
    };
    const auto conv = [&](const std::string& name, std::size_t oc, std::size_t patch, std::size_t pixels) {
        s.push_back({name + "_fwd", false, false, oc, pixels, patch, 0.0f});
        s.push_back({name + "_p1", true, false, patch, pixels, oc, 0.0f});
        s.push_back({name + "_p2", false, true, oc, patch, pixels, 1.0f});
    };
    for (std::size_t b : {1, 32}) {
        dense(1568, 128, b);
        dense(128, 10, b);
        dense(784, 256, b);
        dense(64, 10, b);  // ResNet-20's last layer
    }
    conv("conv1_16x1x3x3_28x28", 16, 1 * 9, 28 * 28);
    conv("conv2_32x16x3x3_14x14", 32, 16 * 9, 14 * 14);
    // ResNet-20 at 1x28x28 (its first conv is conv1 above; its 16->32 stride-2 conv has conv2's GEMM shape).
    conv("res_16x16x3x3_28x28", 16, 16 * 9, 28 * 28);
    conv("res_32x16x1x1s2_14x14", 32, 16, 14 * 14);
    conv("res_32x32x3x3_14x14", 32, 32 * 9, 14 * 14);
    conv("res_64x32x3x3s2_7x7", 64, 32 * 9, 7 * 7);
    conv("res_64x32x1x1s2_7x7", 64, 32, 7 * 7);
    conv("res_64x64x3x3_7x7", 64, 64 * 9, 7 * 7);
    // Larger shapes, to see where BLAS's cache blocking starts to pay: a CIFAR-size 3x3 conv with 64 channels at
    // 32x32, and square matrices.
    conv("conv_64x64x3x3_32x32", 64, 64 * 9, 32 * 32);
    for (std::size_t n : {256, 512}) {
        const std::string base = "square" + std::to_string(n);
        s.push_back({base + "_NN", false, false, n, n, n, 0.0f});
        s.push_back({base + "_NT", false, true, n, n, n, 0.0f});
        s.push_back({base + "_TN", true, false, n, n, n, 0.0f});
    }
    return s;
}

/// Operands of one shape, stored as the layer stores them.
struct operands {
    pipeprop::aligned_vector<float> a, b, c;
    std::size_t lda = 0, ldb = 0, ldc = 0;
    explicit operands(const gemm_shape& s) {
        const std::size_t a_rows = s.trans_a ? s.k : s.m, a_cols = s.trans_a ? s.m : s.k;
        const std::size_t b_rows = s.trans_b ? s.n : s.k, b_cols = s.trans_b ? s.k : s.n;
        lda = a_cols;
        ldb = b_cols;
        ldc = s.n;
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        a.resize(a_rows * a_cols);
        b.resize(b_rows * b_cols);
        c.resize(s.m * s.n);
        for (auto& v : a) v = u(rng);
        for (auto& v : b) v = u(rng);
        for (auto& v : c) v = u(rng);
    }
};

/// The level-2 BLAS call of a b = 1 dense shape (gemm_shape::blas2), on the operands as the layer stores them:
/// W [Out x In] is the N T forward's B, the N N p1's B; for p2 x is B (a row) and dy is A (a column).
void blas2_call(const gemm_shape& s, const float* a, const float* b, float* c) noexcept {
    using l2 = gemm_shape::level2;
    switch (s.blas2) {
    case l2::gemv_n:  // y[Out] = W[Out x In] x[In]: M = 1, N = Out, K = In
        cblas_sgemv(CblasRowMajor, CblasNoTrans, int(s.n), int(s.k), 1.0f, b, int(s.k), a, 1, s.beta, c, 1);
        break;
    case l2::gemv_t:  // dx[In] = W[Out x In]^T dy[Out]: M = 1, N = In, K = Out
        cblas_sgemv(CblasRowMajor, CblasTrans, int(s.k), int(s.n), 1.0f, b, int(s.n), a, 1, s.beta, c, 1);
        break;
    case l2::ger:  // dW[Out x In] += dy[Out] x[In]^T: M = Out, N = In, K = 1 (beta = 1)
        cblas_sger(CblasRowMajor, int(s.m), int(s.n), 1.0f, a, 1, b, 1, c, int(s.n));
        break;
    case l2::none: break;
    }
}

void run_blas2(benchmark::State& state, const gemm_shape& s) {
    operands o(s);
    for (auto _ : state) {
        blas2_call(s, o.a.data(), o.b.data(), o.c.data());
        benchmark::ClobberMemory();
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * double(s.m * s.n * s.k) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void run_blas(benchmark::State& state, const gemm_shape& s) {
    operands o(s);
    for (auto _ : state) {
        pipeprop::kernels::blas_gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb,
                                s.beta, o.c.data(), o.ldc);
        benchmark::ClobberMemory();
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * double(s.m * s.n * s.k) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void run_xsimd(benchmark::State& state, const gemm_shape& s) {
    operands o(s);
    for (auto _ : state) {
        pipeprop::kernels::simd_gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb,
                                     s.beta, o.c.data(), o.ldc);
        benchmark::ClobberMemory();
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(2.0 * double(s.m * s.n * s.k) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

/// Max relative difference between sgemm and the xsimd kernel (and the level-2 call, when s has one) on shape s
/// (beta as in s, C starting equal).
double max_difference(const gemm_shape& s) {
    operands o(s);
    auto c_blas = o.c, c_simd = o.c, c_blas2 = o.c;
    pipeprop::kernels::blas_gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb,
                                 s.beta, c_blas.data(), o.ldc);
    pipeprop::kernels::simd_gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb,
                                 s.beta, c_simd.data(), o.ldc);
    if (s.blas2 != gemm_shape::level2::none) blas2_call(s, o.a.data(), o.b.data(), c_blas2.data());
    double worst = 0.0;
    for (std::size_t i = 0; i < c_blas.size(); ++i) {
        const double ref = c_blas[i], scale = 1.0 + std::abs(ref);
        worst = std::max(worst, std::abs(ref - double(c_simd[i])) / scale);
        if (s.blas2 != gemm_shape::level2::none) worst = std::max(worst, std::abs(ref - double(c_blas2[i])) / scale);
    }
    return worst;
}

}  // namespace

int main(int argc, char** argv) {
    openblas_set_num_threads(1);
    const auto all = shapes();
    for (const auto& s : all) {
        const double d = max_difference(s);
        if (!(d < 1e-4)) {
            std::fprintf(stderr,
                         "gemm_choice: xsimd kernel or level-2 BLAS differs from sgemm on %s by %g (relative)\n",
                         s.name.c_str(), d);
            return 1;
        }
    }
    for (const auto& s : all) {
        const std::string shape = s.name + "_" + (s.trans_a ? "T" : "N") + (s.trans_b ? "T" : "N") + "_" +
                                  std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
        benchmark::RegisterBenchmark(("gemm/" + shape + "/blas").c_str(), run_blas, s);
        benchmark::RegisterBenchmark(("gemm/" + shape + "/xsimd").c_str(), run_xsimd, s);
        if (s.blas2 != gemm_shape::level2::none)
            benchmark::RegisterBenchmark(("gemm/" + shape + "/blas2").c_str(), run_blas2, s);
    }
    // Which OpenBLAS kernels the BLAS rows measure (OPENBLAS_CORETYPE or what OpenBLAS detected), and this program's
    // -march (bench/CMakeLists.txt): both are in the console header and in the JSON context.
    benchmark::AddCustomContext("openblas_core", openblas_get_corename());
    benchmark::AddCustomContext("pipeprop_march", PIPEPROP_BENCH_MARCH);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
