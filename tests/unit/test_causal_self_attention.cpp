// causal_self_attention (LLaMA-style multi-head self-attention with RoPE, include/pipeprop/layers/
// causal_self_attention.hpp):
// - backward-p1 / backward-p2 against central finite differences in double (pipeprop::testing::check_gradients, which
//   also checks the contract: p1 assigns and is repeatable, p2 adds and gives the same result before or after p1) on
//   odd shapes: L = 1 and L = 7 (not a multiple of any SIMD width), one head (D = 6) and three heads of 4 (D = 12),
//   b = 1 and b = 3, RoPE base 10000 and 500000; and L = 40, more than one tile of the causal tiling (causal_tile).
// - causality: the output at position i does not change (bit for bit) when inputs at positions > i change, and an
//   upstream gradient at position i gives zero input gradient at positions > i.
// - torch.autograd: forward, p1 and p2 against tests/golden/causal_self_attention/ (made by
//   tests/golden/make_causal_self_attention.py with torch 1.13), float64 to 1e-10 and float32 to 1e-5 relative
//   (max |ours - torch| / max |torch| per tensor).
// - two attention layers through layer_stack: fused backward == p1 then p2; forward, p1 and p2 allocate nothing
//   after make_stash / make_workspace.
#include <catch2/catch.hpp>

#include <cblas.h>
#include <xtensor/xnpy.hpp>

#include <pipeprop/pipeprop.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "unit/allocation_counter.hpp"

namespace pp = pipeprop;
using pp::shape;

namespace {

template <class T, std::size_t L, std::size_t D, std::size_t H, std::size_t Base = 10000>
using attention = typename pp::causal_self_attention<H, Base>::template bind<T, shape<L, D>>;

static_assert(pp::layer<attention<float, 7, 12, 3>> && pp::layer<attention<double, 1, 6, 1>>);
static_assert(pp::total_size(attention<float, 7, 12, 3>::parameter_tensors()) ==
              attention<float, 7, 12, 3>::parameter_count);
static_assert(attention<float, 7, 12, 3>::head_dim == 4 && attention<float, 7, 12, 3>::parameter_count == 4 * 144);
static_assert(std::is_same_v<attention<float, 7, 12, 3>::output_shape, shape<7, 12>>);

template <class L>
void check_layer(const char* what) {
    for (std::size_t b : {1u, 3u}) {
        const auto r = pp::testing::check_gradients(L{}, {.batch = b, .tolerance = 1e-6});
        INFO(what << ": " << r.report);
        CHECK(r.passed);
    }
}

template <class T>
std::vector<T> random_vector(std::size_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
    std::mt19937_64 rng(seed);
    std::vector<T> v(n);
    for (auto& e : v) e = pp::uniform<T>(rng, static_cast<T>(lo), static_cast<T>(hi));
    return v;
}

/// max |a - r| / max(max |r|, 1e-300).
template <class T, class R>
double relative_error(const std::vector<T>& a, const std::vector<R>& r) {
    REQUIRE(a.size() == r.size());
    double num = 0, den = 1e-300;
    for (std::size_t i = 0; i < a.size(); ++i) {
        num = std::max(num, std::abs(static_cast<double>(a[i]) - static_cast<double>(r[i])));
        den = std::max(den, std::abs(static_cast<double>(r[i])));
    }
    return num / den;
}

/// A golden .npy file as a flat vector of T, after checking its shape.
template <class T>
std::vector<T> load_golden(const std::string& file, const std::vector<std::size_t>& expected_shape) {
    const auto a = xt::load_npy<T>(std::string(PIPEPROP_GOLDEN_DIR) + "/causal_self_attention/" + file);
    INFO(file);
    REQUIRE(std::vector<std::size_t>(a.shape().begin(), a.shape().end()) == expected_shape);
    return std::vector<T>(a.begin(), a.end());
}

/// Forward, p1 and p2 of layer L (value type T) against the torch.autograd outputs of one golden case.
template <class L>
void check_against_torch(const std::string& name, std::size_t b, double tolerance) {
    using T = typename L::value_type;
    constexpr std::size_t len = L::input_shape::dims[0], d = L::input_shape::dims[1];
    const std::vector<std::size_t> act_shape{b, len, d}, w_shape{4, d, d};
    // Inputs in float64; the float32 reference was computed from the same values rounded to float32.
    const auto w64 = load_golden<double>(name + "/w.npy", w_shape);
    const auto x64 = load_golden<double>(name + "/x.npy", act_shape);
    const auto dy64 = load_golden<double>(name + "/dy.npy", act_shape);
    const std::vector<T> w(w64.begin(), w64.end()), x(x64.begin(), x64.end()), dy(dy64.begin(), dy64.end());
    const std::string suffix = std::is_same_v<T, float> ? "_f32.npy" : ".npy";
    const auto y_ref = load_golden<T>(name + "/y" + suffix, act_shape);
    const auto dx_ref = load_golden<T>(name + "/dx" + suffix, act_shape);
    const auto dw_ref = load_golden<T>(name + "/dw" + suffix, w_shape);

    const L l;
    auto st = l.make_stash(b);
    auto ws = l.make_workspace(b);
    std::vector<T> y(x.size()), dx(x.size()), dw(w.size(), T(0));
    l.forward(std::span<const T>(w), x.data(), y.data(), b, st, ws);
    l.backward_input(std::span<const T>(w), x.data(), y.data(), dy.data(), dx.data(), b, st, ws);
    l.backward_weight(std::span<const T>(w), std::span<T>(dw), x.data(), y.data(), dy.data(), b, st, ws);
    const double ey = relative_error(y, y_ref), edx = relative_error(dx, dx_ref), edw = relative_error(dw, dw_ref);
    // Per tensor of the parameter block, so that a wrong W_q gradient is not hidden by a large W_o gradient.
    double edw_each[4];
    for (std::size_t t = 0; t < 4; ++t)
        edw_each[t] = relative_error(std::vector<T>(dw.begin() + t * d * d, dw.begin() + (t + 1) * d * d),
                                     std::vector<T>(dw_ref.begin() + t * d * d, dw_ref.begin() + (t + 1) * d * d));
    INFO(name << (std::is_same_v<T, float> ? " float32" : " float64") << ": y " << ey << ", dx " << edx << ", dw "
              << edw << " (w_q " << edw_each[0] << ", w_k " << edw_each[1] << ", w_v " << edw_each[2] << ", w_o "
              << edw_each[3] << "), tolerance " << tolerance);
    CHECK(ey <= tolerance);
    CHECK(edx <= tolerance);
    CHECK(edw <= tolerance);
    for (double e : edw_each) CHECK(e <= tolerance);
}

template <class T>
void check_all_golden(double tolerance) {
    check_against_torch<attention<T, 7, 12, 3>>("l7_d12_h3_b3", 3, tolerance);
    check_against_torch<attention<T, 1, 6, 1>>("l1_d6_h1_b1", 1, tolerance);
    check_against_torch<attention<T, 7, 6, 1, 500000>>("l7_d6_h1_b1_base500000", 1, tolerance);
    check_against_torch<attention<T, 1, 12, 3>>("l1_d12_h3_b3", 3, tolerance);
    check_against_torch<attention<T, 19, 16, 2>>("l19_d16_h2_b2", 2, tolerance);
    static_assert(attention<T, 37, 8, 2>::causal_tile < 37, "l37_d8_h2_b2 is meant to span two causal tiles");
    check_against_torch<attention<T, 37, 8, 2>>("l37_d8_h2_b2", 2, tolerance);
}

}  // namespace

TEST_CASE("causal_self_attention: backward-p1 and backward-p2 match finite differences",
          "[layers][attention]") {
    check_layer<attention<double, 1, 6, 1>>("L 1, D 6, 1 head");
    check_layer<attention<double, 7, 6, 1>>("L 7, D 6, 1 head");
    check_layer<attention<double, 1, 12, 3>>("L 1, D 12, 3 heads");
    check_layer<attention<double, 7, 12, 3>>("L 7, D 12, 3 heads");
    check_layer<attention<double, 7, 12, 3, 500000>>("L 7, D 12, 3 heads, RoPE base 500000");
    check_layer<attention<double, 5, 8, 4>>("L 5, D 8, 4 heads of 2");
    static_assert(attention<double, 40, 8, 2>::causal_tile < 40);
    check_layer<attention<double, 40, 8, 2>>("L 40 (two causal tiles), D 8, 2 heads");
}

TEST_CASE("causal_self_attention: position i does not depend on positions after i", "[layers][attention]") {
    using L = attention<double, 7, 12, 3>;
    constexpr std::size_t len = 7, d = 12, b = 2, n = b * len * d;
    const L l;
    auto st = l.make_stash(b);
    auto ws = l.make_workspace(b);
    std::vector<double> w(L::parameter_count);
    l.init_parameters(w, 11);
    const auto x = random_vector<double>(n, 12);
    std::vector<double> y(n), y2(n);
    l.forward(std::span<const double>(w), x.data(), y.data(), b, st, ws);
    for (std::size_t i = 0; i < len; ++i) {
        // Change every input at positions > i (in both samples).
        auto x2 = x;
        const auto noise = random_vector<double>(n, 100 + i, -3, 3);
        for (std::size_t s = 0; s < b; ++s)
            for (std::size_t m = i + 1; m < len; ++m)
                for (std::size_t f = 0; f < d; ++f) x2[(s * len + m) * d + f] += noise[(s * len + m) * d + f];
        l.forward(std::span<const double>(w), x2.data(), y2.data(), b, st, ws);
        bool past_same = true, future_changed = false;
        for (std::size_t s = 0; s < b; ++s)
            for (std::size_t m = 0; m < len; ++m)
                for (std::size_t f = 0; f < d; ++f) {
                    const std::size_t k = (s * len + m) * d + f;
                    if (m <= i) past_same = past_same && y2[k] == y[k];
                    if (m > i) future_changed = future_changed || y2[k] != y[k];
                }
        INFO("perturbed positions > " << i);
        CHECK(past_same);
        CHECK(future_changed == (i + 1 < len));  // the perturbation is seen where it may be (the test can fail)
    }
    // Backward: an upstream gradient only at position i reaches the inputs at positions <= i only.
    l.forward(std::span<const double>(w), x.data(), y.data(), b, st, ws);
    for (std::size_t i = 0; i < len; ++i) {
        std::vector<double> dy(n, 0.0), dx(n, 1.0);
        const auto r = random_vector<double>(n, 200 + i);
        for (std::size_t s = 0; s < b; ++s)
            for (std::size_t f = 0; f < d; ++f) dy[(s * len + i) * d + f] = r[(s * len + i) * d + f];
        l.backward_input(std::span<const double>(w), x.data(), y.data(), dy.data(), dx.data(), b, st, ws);
        bool future_zero = true, past_nonzero = true;
        for (std::size_t s = 0; s < b; ++s)
            for (std::size_t m = 0; m < len; ++m) {
                bool any = false;
                for (std::size_t f = 0; f < d; ++f) any = any || dx[(s * len + m) * d + f] != 0.0;
                if (m > i) future_zero = future_zero && !any;
                if (m <= i) past_nonzero = past_nonzero && any;
            }
        INFO("upstream gradient at position " << i);
        CHECK(future_zero);
        CHECK(past_nonzero);
    }
}

TEST_CASE("causal_self_attention: forward, p1 and p2 match torch.autograd (float64, 1e-10)",
          "[layers][attention][golden]") {
    check_all_golden<double>(1e-10);
}

TEST_CASE("causal_self_attention: forward, p1 and p2 match torch.autograd (float32, 1e-5)",
          "[layers][attention][golden]") {
    check_all_golden<float>(1e-5);
}

TEST_CASE("causal_self_attention: b outside [1, max_b] throws", "[layers][attention]") {
    using L = attention<float, 7, 12, 3>;
    const L l;
    auto st = l.make_stash(2);
    auto ws = l.make_workspace(2);
    std::vector<float> w(L::parameter_count), x(3 * 84), y(3 * 84), dw(L::parameter_count);
    CHECK_THROWS_AS(l.forward(std::span<const float>(w), x.data(), y.data(), 3, st, ws), std::invalid_argument);
    CHECK_THROWS_AS(l.forward(std::span<const float>(w), x.data(), y.data(), 0, st, ws), std::invalid_argument);
    auto small_ws = l.make_workspace(1);
    l.forward(std::span<const float>(w), x.data(), y.data(), 2, st, ws);
    CHECK_THROWS_AS(
        l.backward_input(std::span<const float>(w), x.data(), y.data(), y.data(), x.data(), 2, st, small_ws),
        std::invalid_argument);
    CHECK_THROWS_AS(l.backward_weight(std::span<const float>(w), std::span<float>(dw), x.data(), y.data(), y.data(),
                                      2, st, small_ws),
                    std::invalid_argument);
}

using two_blocks = pp::network<shape<7, 12>, pp::causal_self_attention<3>, pp::causal_self_attention<2, 500000>>;

TEST_CASE("causal_self_attention in a network: fused backward equals p1 then p2", "[layers][attention][network]") {
    using stack_t = pp::layer_stack<two_blocks, double>;
    static_assert(stack_t::parameter_count == 2 * 4 * 144);
    stack_t stack;
    std::vector<double> w(stack_t::parameter_count);
    stack.init_parameters(w, 5);
    const std::size_t b = 3, n = b * 84;
    auto act = stack.make_activations(stack_t::all(), b);
    auto ws = stack.make_workspaces(stack_t::all(), b);
    const auto x = random_vector<double>(n, 6), dy = random_vector<double>(n, 7);
    std::copy(x.begin(), x.end(), act.input());
    stack.forward(w, act, b, ws);
    std::copy(dy.begin(), dy.end(), act.output_gradient());
    std::vector<double> dw_fused(w.size(), 0.0), dw_split(w.size(), 0.0);
    stack.backward(w, dw_fused, act, b, ws);
    const std::vector<double> dx_fused(act.input_gradient(), act.input_gradient() + n);
    stack.backward_input(w, act, b, ws);
    stack.backward_weight(w, dw_split, act, b, ws);
    CHECK(dw_fused == dw_split);
    CHECK(std::vector<double>(act.input_gradient(), act.input_gradient() + n) == dx_fused);
    CHECK(std::any_of(dw_fused.begin(), dw_fused.end(), [](double v) { return v != 0.0; }));
}

TEST_CASE("causal_self_attention: forward, p1 and p2 allocate nothing after setup", "[layers][attention][allocation]") {
#if defined(OPENBLAS_VERSION)
    openblas_set_num_threads(1);  // multi-threaded OpenBLAS allocates per call (tests/unit/test_no_allocation.cpp)
#endif
    using L = attention<float, 19, 16, 2>;
    constexpr std::size_t b = 3, n = b * 19 * 16;
    const L l;
    auto st = l.make_stash(b);
    auto ws = l.make_workspace(b);
    std::vector<float> w(L::parameter_count), dw(L::parameter_count, 0.0f), y(n), dx(n);
    l.init_parameters(w, 9);
    const auto x = random_vector<float>(n, 10), dy = random_vector<float>(n, 11);
    auto step = [&] {
        l.forward(std::span<const float>(w), x.data(), y.data(), b, st, ws);
        l.backward_input(std::span<const float>(w), x.data(), y.data(), dy.data(), dx.data(), b, st, ws);
        l.backward_weight(std::span<const float>(w), std::span<float>(dw), x.data(), y.data(), dy.data(), b, st, ws);
    };
    step();  // warm-up (first BLAS call, if any shape uses BLAS)
    const auto before = allocation_counter::snapshot();
    for (int i = 0; i < 3; ++i) step();
    const auto after = allocation_counter::snapshot();
    // The counters are live in this program: a vector allocates.
    const auto probe_before = allocation_counter::snapshot();
    { std::vector<float> probe(100, 1.0f); volatile float keep = probe[7]; (void)keep; }
    const auto probe_after = allocation_counter::snapshot();
    CHECK(probe_after.operator_new == probe_before.operator_new + 1);
    CHECK(after.operator_new - before.operator_new == 0);
    CHECK(after.c_level - before.c_level == 0);
    CHECK(std::all_of(dx.begin(), dx.end(), [](float v) { return std::isfinite(v); }));
    CHECK(std::any_of(dw.begin(), dw.end(), [](float v) { return v != 0.0f; }));
}
