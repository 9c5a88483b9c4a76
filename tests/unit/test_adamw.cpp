// AdamW (optim/adamw.hpp): hand-computed steps t = 1, 2; a closed-form scalar reference written from the paper's
// formula (m_hat, v_hat) in long double; bit-identical results however the block is chunked; the trajectory of
// torch.optim.AdamW over 10 steps (tests/golden/make_adamw.py); configuration and argument errors.
#include <catch2/catch.hpp>

#include <pipeprop/optim/adamw.hpp>

#include <xtensor/xarray.hpp>
#include <xtensor/xnpy.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace po = pipeprop::optim;

namespace {

/// Relative difference |a - b| / max(|a|, |b|) (0 when both are 0).
double rel(double a, double b) {
    const double s = std::max(std::abs(a), std::abs(b));
    return s == 0.0 ? 0.0 : std::abs(a - b) / s;
}

/// 19 parameters (SIMD body and scalar tail for float and double up to AVX-512): element i follows triple i % 3.
template <class T>
std::vector<T> triple(T a, T b, T c) {
    std::vector<T> v(19);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = i % 3 == 0 ? a : i % 3 == 1 ? b : c;
    return v;
}

template <class T>
void check_triple(const std::vector<T>& v, double a, double b, double c, double tol) {
    for (std::size_t i = 0; i < v.size(); ++i) {
        const double want = i % 3 == 0 ? a : i % 3 == 1 ? b : c;
        INFO("element " << i << ": " << double(v[i]) << " vs " << want);
        CHECK(rel(double(v[i]), want) <= tol);
    }
}

/// Closed-form AdamW step of one scalar, written from Loshchilov & Hutter Algorithm 2 / PyTorch's documentation
/// (decay, m, v, bias-corrected m_hat and v_hat, sqrt(v_hat) + eps), in long double.
struct scalar_adamw {
    long double w, m = 0, v = 0;
    void step(long double g, long double lr, long double wd, long double b1, long double b2, long double eps,
              int t) {
        w -= lr * wd * w;
        m = b1 * m + (1 - b1) * g;
        v = b2 * v + (1 - b2) * g * g;
        const long double m_hat = m / (1 - std::pow(b1, static_cast<long double>(t)));
        const long double v_hat = v / (1 - std::pow(b2, static_cast<long double>(t)));
        w -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
};

}  // namespace

// Hand computation (beta1 = 0.9, beta2 = 0.999, eps = 1e-8, lambda = 0.1, lr = 0.01; decimal arithmetic, 40 digits):
//   element      w0    g1     g2    | t = 1: m, v, w                          | t = 2: m, v, w
//   a            1     0.5    -1    | 0.05, 0.00025,   0.98900000019999999600 | -0.055, 0.00124975,   0.99167203542385656029
//   b           -2    -0.25   0.5   | -0.025, 6.25e-5, -1.98800000039999998400 | 0.0275, 3.124375e-4, -1.98967303557735465810
//   c (g = 0)    0.5   0      0     | 0, 0,            0.4995                  | 0, 0,                 0.4990005
// t = 1: w = w0 (1 - 0.001) - 0.01 g / (|g| + 1e-8) (m_hat = g, v_hat = g^2); t = 2: m_hat = m / 0.19,
// v_hat = v / 0.001999 (a: m_hat = -0.28947368421052631579, v_hat = 0.62518759379689844922).
TEMPLATE_TEST_CASE("adamw: steps t = 1 and t = 2 match hand-computed values", "[optim][adamw]", float, double) {
    using T = TestType;
    const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
    po::adamw<T> opt(19, {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8});
    const po::hyperparameters<> h{.learning_rate = 0.01, .momentum = 0.0, .weight_decay = 0.1};
    auto w = triple<T>(1, -2, 0.5);
    opt.step(w, triple<T>(0.5, -0.25, 0), h);
    CHECK(opt.step_count() == 1);
    check_triple(w, 0.98900000019999999600, -1.98800000039999998400, 0.4995, tol);
    check_triple(std::vector<T>(opt.first_moment().begin(), opt.first_moment().end()), 0.05, -0.025, 0.0, tol);
    check_triple(std::vector<T>(opt.second_moment().begin(), opt.second_moment().end()), 0.00025, 6.25e-5, 0.0,
                 tol);
    opt.step(w, triple<T>(-1, 0.5, 0), h);
    CHECK(opt.step_count() == 2);
    check_triple(w, 0.99167203542385656029, -1.98967303557735465810, 0.4990005, tol);
    check_triple(std::vector<T>(opt.first_moment().begin(), opt.first_moment().end()), -0.055, 0.0275, 0.0, tol);
    check_triple(std::vector<T>(opt.second_moment().begin(), opt.second_moment().end()), 0.00124975, 3.124375e-4,
                 0.0, tol);
}

TEST_CASE("adamw: 50 steps follow the closed-form scalar reference (double, 1e-12)", "[optim][adamw]") {
    const std::size_t n = 23;
    const double b1 = 0.8, b2 = 0.95, eps = 1e-6, wd = 0.05;
    po::adamw<double> opt(n, {.beta1 = b1, .beta2 = b2, .eps = eps});
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<double> w(n), g(n);
    std::vector<scalar_adamw> ref;
    for (auto& x : w) {
        x = 1.0 + u(rng);
        ref.push_back({static_cast<long double>(x)});
    }
    for (int t = 1; t <= 50; ++t) {
        const double lr = 0.02 / t;
        for (std::size_t i = 0; i < n; ++i) g[i] = std::ldexp(u(rng), static_cast<int>(i % 7) - 3);
        opt.step(w, g, {.learning_rate = lr, .momentum = 0.0, .weight_decay = wd});
        for (std::size_t i = 0; i < n; ++i) ref[i].step(g[i], lr, wd, b1, b2, eps, t);
    }
    for (std::size_t i = 0; i < n; ++i) {
        INFO("element " << i);
        CHECK(rel(w[i], static_cast<double>(ref[i].w)) <= 1e-12);
        CHECK(rel(opt.first_moment()[i], static_cast<double>(ref[i].m)) <= 1e-12);
        CHECK(rel(opt.second_moment()[i], static_cast<double>(ref[i].v)) <= 1e-12);
    }
}

TEMPLATE_TEST_CASE("adamw_update: bit-identical however the block is chunked", "[optim][adamw]", float, double) {
    using T = TestType;
    const std::size_t n = 77;
    std::mt19937_64 rng(3);
    std::normal_distribution<double> nd;
    std::vector<T> w0(n), g(n), m0(n), v0(n);
    for (std::size_t i = 0; i < n; ++i) {
        w0[i] = T(nd(rng));
        g[i] = T(nd(rng) * 0.1);
        m0[i] = T(nd(rng) * 0.01);
        v0[i] = T(std::abs(nd(rng)) * 1e-3);
    }
    const auto c = po::adamw_step_coefficients<T>(3e-3, 0.01, 0.9, 0.999, 1e-8, 5);
    std::vector<T> w = w0, m = m0, v = v0;
    po::adamw_update(n, w.data(), m.data(), v.data(), g.data(), c);
    // Chunkings: all scalar (1 element per call), and chunk sizes that split the SIMD batches anywhere.
    for (const std::size_t chunk : {std::size_t(1), std::size_t(3), std::size_t(5), std::size_t(8), std::size_t(13),
                                    std::size_t(16), std::size_t(31)}) {
        std::vector<T> wc = w0, mc = m0, vc = v0;
        for (std::size_t i = 0; i < n; i += chunk) {
            const std::size_t k = std::min(chunk, n - i);
            po::adamw_update(k, wc.data() + i, mc.data() + i, vc.data() + i, g.data() + i, c);
        }
        INFO("chunk " << chunk);
        CHECK(std::memcmp(w.data(), wc.data(), n * sizeof(T)) == 0);
        CHECK(std::memcmp(m.data(), mc.data(), n * sizeof(T)) == 0);
        CHECK(std::memcmp(v.data(), vc.data(), n * sizeof(T)) == 0);
    }
    // An offset start (unaligned vector body over other elements) gives the same values too.
    std::vector<T> wo = w0, mo = m0, vo = v0;
    po::adamw_update(2, wo.data(), mo.data(), vo.data(), g.data(), c);
    po::adamw_update(n - 2, wo.data() + 2, mo.data() + 2, vo.data() + 2, g.data() + 2, c);
    CHECK(std::memcmp(w.data(), wo.data(), n * sizeof(T)) == 0);
}

namespace {
template <class T>
void check_golden(const char* suffix, double tol) {
    const std::string dir = std::string(PIPEPROP_GOLDEN_DIR) + "/adamw/";
    const auto config = xt::load_npy<double>(dir + "config.npy");
    const auto lr = xt::load_npy<double>(dir + "lr.npy");
    const auto w0 = xt::load_npy<T>(dir + "w0_" + suffix + ".npy");
    const auto grads = xt::load_npy<T>(dir + "grads_" + suffix + ".npy");
    const auto want = xt::load_npy<T>(dir + "weights_" + suffix + ".npy");
    REQUIRE(config.size() == 4);
    REQUIRE(w0.dimension() == 1);
    const std::size_t n = w0.shape()[0], steps = lr.size();
    REQUIRE(steps == 10);
    REQUIRE(grads.shape() == std::vector<std::size_t>{steps, n});
    REQUIRE(want.shape() == std::vector<std::size_t>{steps, n});
    po::adamw<T> opt(n, {.beta1 = config(0), .beta2 = config(1), .eps = config(2)});
    std::vector<T> w(w0.begin(), w0.end()), g(n);
    double worst = 0;
    for (std::size_t t = 0; t < steps; ++t) {
        for (std::size_t i = 0; i < n; ++i) g[i] = grads(t, i);
        opt.step(w, g, {.learning_rate = lr(t), .momentum = 0.0, .weight_decay = config(3)});
        for (std::size_t i = 0; i < n; ++i) {
            INFO("step " << t + 1 << " element " << i << ": " << double(w[i]) << " vs torch " << double(want(t, i)));
            const double r = rel(double(w[i]), double(want(t, i)));
            worst = std::max(worst, r);
            CHECK(r <= tol);
        }
    }
    INFO("largest relative difference to torch.optim.AdamW: " << worst);
    CHECK(worst <= tol);
}
}  // namespace

TEST_CASE("adamw: 10 steps equal torch.optim.AdamW (float64 1e-12, float32 1e-6 relative)", "[optim][adamw][golden]") {
    SECTION("float64") { check_golden<double>("f64", 1e-12); }
    SECTION("float32") { check_golden<float>("f32", 1e-6); }
}

TEST_CASE("adamw: invalid configuration and arguments throw", "[optim][adamw]") {
    auto message = [](auto&& f) {
        try {
            f();
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no exception");
    };
    using Catch::Matchers::Contains;
    CHECK_THAT(message([] { po::adamw<float>(4, {.beta1 = 1.0}); }), Contains("beta1 1.000000 is outside [0, 1)"));
    CHECK_THAT(message([] { po::adamw<float>(4, {.beta1 = -0.1}); }), Contains("beta1"));
    CHECK_THAT(message([] { po::adamw<float>(4, {.beta2 = 1.5}); }), Contains("beta2 1.500000 is outside [0, 1)"));
    CHECK_THAT(message([] { po::adamw<float>(4, {.eps = 0.0}); }), Contains("eps 0.000000 must be a finite value > 0"));
    CHECK_THAT(message([] { po::adamw<float>(4, {.eps = std::nan("")}); }), Contains("eps"));
    CHECK_THAT(message([] { (void)po::adamw_step_coefficients<float>(0.1, 0, 0.9, 0.999, 1e-8, 0); }),
               Contains("starts at 1"));

    po::adamw<float> opt(4, {});
    std::vector<float> w(4, 1.0f), g3(3, 0.5f), g(4, 0.5f);
    const auto lr = [](double v) { return po::hyperparameters<>{.learning_rate = v, .momentum = 0.0}; };
    CHECK_THAT(message([&] { opt.step(w, g3, lr(0.1)); }),
               Contains("parameter block has 4 and gradient 3 elements, the optimizer state 4"));
    CHECK_THAT(message([&] { opt.step(w, g, lr(-0.1)); }),
               Contains("pipeprop::optim::adamw: learning_rate = -0.100000 must be finite and >= 0"));
    CHECK_THAT(message([&] { opt.step(w, g, lr(std::nan(""))); }), Contains("learning_rate"));
    CHECK_THAT(message([&] { opt.step(w, g, {.learning_rate = 0.1, .momentum = 0.0, .weight_decay = -1.0}); }),
               Contains("weight_decay = -1.000000 must be finite and >= 0"));
    CHECK_THAT(message([&] { opt.step(w, g, {.learning_rate = 0.1, .momentum = 0.0, .weight_decay = INFINITY}); }),
               Contains("weight_decay"));
    CHECK_THAT(message([&] { opt.step(w, g, {.learning_rate = 0.1, .momentum = 0.9}); }),
               Contains("pipeprop::optim::adamw: momentum = 0.900000 must be 0"));
    CHECK(opt.step_count() == 0);  // nothing applied
    CHECK(w == std::vector<float>(4, 1.0f));
    CHECK(opt.first_moment()[0] == 0.0f);
}
