// online_norm (pipeprop/layers/online_norm.hpp), a stateful layer.
// - Golden: forward, backward-p1, backward-p2, infer and the state after every forward and every backward, over
//   streams of micro-batches at b = 1 and b = 3, for [3, 5, 4] (per channel) and [7] (per feature), default and fast
//   decays, with clamping active, against the independent float64 numpy implementation
//   tests/golden/make_online_norm.py. Agreement: max |got - expected| <= 1e-12 * max(1, max |expected|) per tensor
//   (absolute for tensors whose values are at most 1 in magnitude, relative to the largest value above that).
// - The paper's property of the corrected gradient: over a long stream, the per-channel mean of dx and of dx * yhat
//   go to ~0 relative to their scale (they do not for the uncorrected gradient dy / s, checked as a control).
// - The micro-batch split and the forward / backward interleaving do not change any result (bit for bit).
// - infer changes no state and equals the training forward's output with the statistics frozen.
// - backward-p2 (gamma, beta) against central finite differences given the stash; backward-p1 against finite
//   differences where it is exact (b = 1 from u = g_acc = 0) and shown NOT exact at b = 3.
// - No heap allocation in forward / backward / infer after make_stash; float agrees with double.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>

#include <xtensor/xarray.hpp>
#include <xtensor/xnpy.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <ratio>
#include <string>
#include <vector>

#include "unit/allocation_counter.hpp"

namespace pp = pipeprop;
using pp::shape;

namespace {

using conv_default = pp::online_norm<>::bind<double, shape<3, 5, 4>>;
using dense_default = pp::online_norm<>::bind<double, shape<7>>;
using fast = pp::online_norm<std::ratio<3, 4>, std::ratio<1, 2>>;
using conv_fast = fast::bind<double, shape<3, 5, 4>>;
using dense_fast = fast::bind<double, shape<7>>;

constexpr double golden_tolerance = 1e-12;

std::vector<double> random_vector(std::size_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
    std::mt19937_64 rng(seed);
    std::vector<double> v(n);
    for (auto& e : v) e = pp::uniform<double>(rng, lo, hi);
    return v;
}

/// max |got - expected| / max(1, max |expected|): absolute below magnitude 1, relative above.
double golden_error(const double* got, const double* expected, std::size_t n) {
    double num = 0, den = 1;
    for (std::size_t i = 0; i < n; ++i) {
        num = std::max(num, std::abs(got[i] - expected[i]));
        den = std::max(den, std::abs(expected[i]));
    }
    return num / den;
}

std::filesystem::path golden_file(const std::string& case_name, const std::string& array) {
    return std::filesystem::path(PIPEPROP_GOLDEN_DIR) / "online_norm" / case_name / (array + ".npy");
}

template <class V = double>
xt::xarray<V> load_golden(const std::string& case_name, const std::string& array) {
    const auto file = golden_file(case_name, array);
    INFO("golden file " << file.string() << " (made by tests/golden/make_online_norm.py)");
    REQUIRE(std::filesystem::exists(file));
    return xt::load_npy<V>(file.string());
}

/// Forward, backward-p1, backward-p2, infer and the state of layer L over the golden stream `name`.
template <class L>
void check_golden(const std::string& name) {
    INFO("golden case " << name);
    const L layer{};
    constexpr std::size_t C = L::channels, N = L::input_shape::size;
    const auto x = load_golden(name, "x"), dy = load_golden(name, "dy"), gamma = load_golden(name, "gamma"),
               beta = load_golden(name, "beta"), y_ref = load_golden(name, "y"), dx_ref = load_golden(name, "dx"),
               y_infer_ref = load_golden(name, "y_infer"), dgamma_ref = load_golden(name, "dgamma"),
               dbeta_ref = load_golden(name, "dbeta"), state_forward = load_golden(name, "state_forward"),
               state_backward = load_golden(name, "state_backward");
    const auto config = load_golden<std::int64_t>(name, "config");
    const auto clipped_ref = load_golden<std::int64_t>(name, "clipped");
    // The stream was made for this layer's decays and clamp value.
    REQUIRE(config.size() == 5);
    CHECK(config(0) == L::alpha_forward_ratio::num);
    CHECK(config(1) == L::alpha_forward_ratio::den);
    CHECK(config(2) == L::alpha_backward_ratio::num);
    CHECK(config(3) == L::alpha_backward_ratio::den);
    CHECK(static_cast<double>(config(4)) == L::clamp_value);
    REQUIRE(x.dimension() >= 3);
    const std::size_t steps = x.shape()[0], b = x.shape()[1];
    REQUIRE(x.size() == steps * b * N);
    REQUIRE(dy.size() == x.size());
    REQUIRE(gamma.size() == steps * C);
    REQUIRE(state_forward.size() == steps * 4 * C);

    std::vector<double> s(L::state_count), s_before(L::state_count), w(L::parameter_count);
    layer.init_state(s);
    auto st = layer.make_stash(b);
    auto ws = pp::make_workspace(layer, b);
    std::vector<double> y(b * N), dx(b * N), yi(b * N), dw(L::parameter_count);
    std::int64_t clipped = 0;
    for (std::size_t k = 0; k < steps; ++k) {
        INFO("micro-batch " << k << " of " << steps << ", b = " << b);
        for (std::size_t c = 0; c < C; ++c) {
            w[c] = gamma(k, c);
            w[C + c] = beta(k, c);
        }
        const double* xk = x.data() + k * b * N;
        const double* dyk = dy.data() + k * b * N;
        s_before = s;
        layer.infer(w, xk, yi.data(), b, ws, std::span<const double>(s));
        CHECK(s == s_before);
        layer.forward(w, xk, y.data(), b, st, ws, s);
        std::fill(dx.begin(), dx.end(), 1e30);  // p1 assigns
        std::fill(dw.begin(), dw.end(), 0.0);
        const double e_infer = golden_error(yi.data(), y_infer_ref.data() + k * b * N, b * N);
        const double e_y = golden_error(y.data(), y_ref.data() + k * b * N, b * N);
        const double e_sf = golden_error(s.data(), state_forward.data() + k * 4 * C, 4 * C);
        layer.backward_weight(dw, xk, y.data(), dyk, b, st, ws);  // p2 before p1: needs only the stash
        layer.backward_input(w, xk, y.data(), dyk, dx.data(), b, st, ws, s);
        const double e_dx = golden_error(dx.data(), dx_ref.data() + k * b * N, b * N);
        const double e_sb = golden_error(s.data(), state_backward.data() + k * 4 * C, 4 * C);
        const double e_dg = golden_error(dw.data(), dgamma_ref.data() + k * C, C);
        const double e_db = golden_error(dw.data() + C, dbeta_ref.data() + k * C, C);
        for (double v : y) clipped += std::abs(v) == L::clamp_value ? 1 : 0;
        INFO("errors: infer " << e_infer << ", y " << e_y << ", state after forward " << e_sf << ", dx " << e_dx
                              << ", state after backward " << e_sb << ", dgamma " << e_dg << ", dbeta " << e_db);
        CHECK(e_infer <= golden_tolerance);
        CHECK(e_y <= golden_tolerance);
        CHECK(e_sf <= golden_tolerance);
        CHECK(e_dx <= golden_tolerance);
        CHECK(e_sb <= golden_tolerance);
        CHECK(e_dg <= golden_tolerance);
        CHECK(e_db <= golden_tolerance);
    }
    CHECK(clipped == clipped_ref());
}

/// The paper's property of the corrected gradient, for layer L (gamma = 1, beta = 0, default decays): a stationary
/// stream (x per channel c uniform around 0.4 with a width growing with c) with dy correlated with the output
/// (dy = 0.3 + 0.5 yhat + noise). The uncorrected gradient dy / s has a mean and a component along yhat; the
/// control process (u, g_acc) removes both in expectation. Measured over the second half of a stream of 16000
/// samples (4000 micro-batches of b = 4), per channel, relative to the gradient's scale: |E[mean(dx)]| / rms(dx) and
/// |E[mean(dx yhat)]| / (rms(dx) rms(yhat)) must be below 0.01, while the same measures of dy / s exceed 0.2
/// (without u, g_acc the layer's dx would be dy / s and fail).
template <class L>
void check_orthogonality(const char* what) {
    INFO(what);
    const L l{};
    constexpr std::size_t b = 4, C = L::channels, S = L::spatial, N = C * S, micro_batches = 4000;
    std::vector<double> s(L::state_count), w(L::parameter_count), x(b * N), y(b * N), dy(b * N), dx(b * N);
    l.init_state(s);
    l.init_parameters(w, 1);
    auto st = l.make_stash(b);
    pp::no_workspace ws;
    std::mt19937_64 rng(2024);
    // Per channel: sums over the measured samples of mean(dx), mean(dx yhat), mean(dx^2), mean(yhat^2), and the same
    // for the uncorrected gradient g = dy / s (means over the channel's S values).
    std::vector<double> sum_dx(C), sum_dxy(C), sum_dx2(C), sum_y2(C), sum_g(C), sum_gy(C), sum_g2(C);
    std::size_t measured = 0, clipped = 0;
    for (std::size_t k = 0; k < micro_batches; ++k) {
        for (std::size_t n = 0; n < b; ++n)
            for (std::size_t c = 0; c < C; ++c)
                for (std::size_t i = 0; i < S; ++i)
                    x[n * N + c * S + i] =
                        0.4 + (1.0 + 0.25 * static_cast<double>(c)) * pp::uniform<double>(rng, -1.5, 1.5);
        l.forward(w, x.data(), y.data(), b, st, ws, s);
        for (std::size_t i = 0; i < b * N; ++i) {
            dy[i] = 0.3 + 0.5 * st.yhat[i] + pp::uniform<double>(rng, -1.0, 1.0);
            clipped += std::abs(y[i]) == L::clamp_value ? 1 : 0;
        }
        l.backward_input(w, x.data(), y.data(), dy.data(), dx.data(), b, st, ws, s);
        if (k < micro_batches / 2) continue;
        for (std::size_t n = 0; n < b; ++n) {
            ++measured;
            for (std::size_t c = 0; c < C; ++c) {
                const double sd = st.scale[n * C + c];
                double m_dx = 0, m_dxy = 0, m_dx2 = 0, m_y2 = 0, m_g = 0, m_gy = 0, m_g2 = 0;
                for (std::size_t i = 0; i < S; ++i) {
                    const std::size_t at = n * N + c * S + i;
                    const double yh = st.yhat[at], g = dy[at] / sd;
                    m_dx += dx[at];
                    m_dxy += dx[at] * yh;
                    m_dx2 += dx[at] * dx[at];
                    m_y2 += yh * yh;
                    m_g += g;
                    m_gy += g * yh;
                    m_g2 += g * g;
                }
                sum_dx[c] += m_dx / S;
                sum_dxy[c] += m_dxy / S;
                sum_dx2[c] += m_dx2 / S;
                sum_y2[c] += m_y2 / S;
                sum_g[c] += m_g / S;
                sum_gy[c] += m_gy / S;
                sum_g2[c] += m_g2 / S;
            }
        }
    }
    REQUIRE(clipped == 0);  // y = yhat here (gamma = 1, beta = 0, nothing clipped)
    const double cnt = static_cast<double>(measured);
    for (std::size_t c = 0; c < C; ++c) {
        const double rms_dx = std::sqrt(sum_dx2[c] / cnt), rms_y = std::sqrt(sum_y2[c] / cnt);
        const double rms_g = std::sqrt(sum_g2[c] / cnt);
        const double mean_dx = std::abs(sum_dx[c] / cnt) / rms_dx;
        const double along_y = std::abs(sum_dxy[c] / cnt) / (rms_dx * rms_y);
        const double mean_g = std::abs(sum_g[c] / cnt) / rms_g;
        const double along_y_g = std::abs(sum_gy[c] / cnt) / (rms_g * rms_y);
        INFO("channel " << c << ": corrected |E[mean dx]| / rms " << mean_dx << ", |E[mean dx yhat]| / rms " << along_y
                        << "; uncorrected dy / s: " << mean_g << ", " << along_y_g << "; u = " << s[2 * C + c]
                        << ", g_acc = " << s[3 * C + c]);
        CHECK(mean_dx < 0.01);
        CHECK(along_y < 0.01);
        CHECK(mean_g > 0.2);  // control: the stream does have the components the correction removes
        CHECK(along_y_g > 0.2);
    }
}

/// Training forward then backward-p1 of one micro-batch through layer l with state s.
template <class L>
void train_step(const L& l, std::span<const double> w, const double* x, const double* dy, double* y, double* dx,
                std::size_t b, pp::stash_t<L>& st, std::span<double> s) {
    auto ws = pp::make_workspace(l, b);
    l.forward(w, x, y, b, st, ws, s);
    l.backward_input(w, x, y, dy, dx, b, st, ws, s);
}

}  // namespace

TEST_CASE("online_norm: shapes, parameter and state blocks are fixed at compile time", "[layers][online_norm]") {
    static_assert(pp::layer<conv_default> && pp::layer<dense_default> && pp::layer<conv_fast>);
    static_assert(pp::layer<pp::online_norm<>::bind<float, shape<16, 28, 28>>>);
    static_assert(pp::layer_declares_state<conv_default> && pp::layer_has_state_passes<conv_default>);
    static_assert(pp::state_count_v<conv_default> == 12 && pp::state_count_v<dense_default> == 28);
    static_assert(conv_default::parameter_count == 6 && dense_default::parameter_count == 14);
    static_assert(pp::total_size(conv_default::parameter_tensors()) == conv_default::parameter_count);
    static_assert(pp::total_size(conv_default::state_tensors()) == conv_default::state_count);
    static_assert(pp::total_size(dense_default::state_tensors()) == dense_default::state_count);
    static_assert(conv_default::state_tensors()[0].name == "m" && conv_default::state_tensors()[1].name == "v" &&
                  conv_default::state_tensors()[2].name == "u" && conv_default::state_tensors()[3].name == "g_acc");
    static_assert(std::is_same_v<conv_default::output_shape, shape<3, 5, 4>>);
    static_assert(conv_default::spatial == 20 && dense_default::spatial == 1);
    static_assert(conv_default::alpha_forward == 1023.0 / 1024 && conv_default::alpha_backward == 127.0 / 128);
    static_assert(conv_default::one_minus_alpha_forward == 1.0 / 1024 && conv_default::clamp_value == 5.0);
    static_assert(conv_default::epsilon == 1e-5);
    // A stateful layer offers no stateless forward: the runner cannot call it without the state block.
    static_assert(!pp::layer_has_forward<conv_default>);

    const conv_default l{};
    std::vector<double> s(conv_default::state_count, -3.0), w(conv_default::parameter_count, -3.0);
    l.init_state(s);
    l.init_parameters(w, 7);
    CHECK(s == std::vector<double>{0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0});
    CHECK(w == std::vector<double>{1, 1, 1, 0, 0, 0});
}

TEST_CASE("online_norm: bad micro-batch sizes and state blocks throw std::invalid_argument", "[layers][online_norm]") {
    const conv_default l{};
    auto st = l.make_stash(2);
    pp::no_workspace ws;
    std::vector<double> w(6, 1.0), s(12), short_s(11), x(3 * 60, 0.5), y(3 * 60), dx(3 * 60);
    l.init_state(s);
    CHECK_THROWS_AS(l.forward(w, x.data(), y.data(), 3, st, ws, s), std::invalid_argument);
    CHECK_THROWS_AS(l.forward(w, x.data(), y.data(), 0, st, ws, s), std::invalid_argument);
    CHECK_THROWS_WITH(l.forward(w, x.data(), y.data(), 1, st, ws, short_s),
                      Catch::Contains("state block holds 11 values") && Catch::Contains("state_count is 12"));
    CHECK_THROWS_AS(l.backward_input(w, x.data(), y.data(), y.data(), dx.data(), 3, st, ws, s), std::invalid_argument);
    CHECK_THROWS_AS(l.infer(w, x.data(), y.data(), 1, ws, std::span<const double>(short_s)), std::invalid_argument);
}

TEST_CASE("online_norm: forward, p1, p2, infer and state equal the numpy reference", "[layers][online_norm][golden]") {
    check_golden<conv_default>("conv_b1");
    check_golden<conv_default>("conv_b3");
    check_golden<dense_default>("dense_b1");
    check_golden<dense_default>("dense_b3");
    check_golden<conv_fast>("conv_b3_fast_clamped");
    check_golden<dense_fast>("dense_b3_fast_clamped");
}

TEST_CASE("online_norm: clamping is active in the clamped golden streams", "[layers][online_norm][golden]") {
    // The golden check above compares the clipped count; this makes sure the clamp cases do clip.
    CHECK(load_golden<std::int64_t>("conv_b3_fast_clamped", "clipped")() > 50);
    CHECK(load_golden<std::int64_t>("dense_b3_fast_clamped", "clipped")() > 10);
}

TEST_CASE("online_norm: the corrected input gradient is orthogonal to 1 and to yhat over a stream (paper, eq. 11-12)",
          "[layers][online_norm]") {
    check_orthogonality<pp::online_norm<>::bind<double, shape<2, 4, 4>>>("[2, 4, 4], per channel");
    check_orthogonality<pp::online_norm<>::bind<double, shape<5>>>("[5], per feature");
}

TEST_CASE("online_norm: results do not depend on the micro-batch split or the forward / backward interleaving",
          "[layers][online_norm]") {
    // Forward state (m, v) and backward state (u, g_acc) are disjoint and each advances per sample in order, so a
    // stream of 6 samples gives the same y, dx, dw and state, bit for bit, at b = 6, 3 + 3, 2 + 4 and 6 x 1, and when
    // all forwards run before all backwards (as in a pipeline where the backward of a micro-batch comes later).
    auto run = []<class L>(const L& l, const std::vector<std::size_t>& split, bool forwards_first) {
        constexpr std::size_t N = L::input_shape::size;
        const std::size_t total = 6;
        const auto x = random_vector(total * N, 31, -3, 4), dy = random_vector(total * N, 32);
        auto w = random_vector(L::parameter_count, 33, 0.5, 2.5);
        std::vector<double> s(L::state_count), y(total * N), dx(total * N), dw(L::parameter_count, 0.0);
        l.init_state(s);
        std::vector<pp::stash_t<L>> stashes;
        for (std::size_t i = 0; i < split.size(); ++i) stashes.push_back(l.make_stash(6));
        pp::no_workspace ws;
        auto fwd = [&](std::size_t j, std::size_t first) {
            l.forward(w, x.data() + first * N, y.data() + first * N, split[j], stashes[j], ws, s);
        };
        auto bwd = [&](std::size_t j, std::size_t first) {
            const std::size_t o = first * N;
            l.backward_input(w, x.data() + o, y.data() + o, dy.data() + o, dx.data() + o, split[j], stashes[j], ws, s);
            l.backward_weight(dw, x.data() + o, y.data() + o, dy.data() + o, split[j], stashes[j], ws);
        };
        std::size_t first = 0;
        for (std::size_t j = 0; j < split.size(); first += split[j], ++j) {
            fwd(j, first);
            if (!forwards_first) bwd(j, first);
        }
        first = 0;
        if (forwards_first)
            for (std::size_t j = 0; j < split.size(); first += split[j], ++j) bwd(j, first);
        std::vector<double> all = y;
        all.insert(all.end(), dx.begin(), dx.end());
        all.insert(all.end(), dw.begin(), dw.end());
        all.insert(all.end(), s.begin(), s.end());
        return all;
    };
    auto check = [&]<class L>(const L& l, const char* what) {
        INFO(what);
        const auto reference = run(l, {6}, false);
        CHECK(run(l, {3, 3}, false) == reference);
        CHECK(run(l, {2, 4}, false) == reference);
        CHECK(run(l, {1, 1, 1, 1, 1, 1}, false) == reference);
        CHECK(run(l, {3, 3}, true) == reference);
        CHECK(run(l, {1, 1, 1, 1, 1, 1}, true) == reference);
        CHECK(run(l, {1, 5}, true) == reference);
    };
    check(conv_fast{}, "[3, 5, 4], fast decays");
    check(dense_fast{}, "[7], fast decays");
    check(pp::online_norm<>::bind<double, shape<9>>{}, "[9] (SIMD body and tail), default decays");
}

TEST_CASE("online_norm: infer changes no state and equals the training forward with frozen statistics",
          "[layers][online_norm]") {
    auto check = []<class L>(const L& l, const char* what) {
        INFO(what);
        constexpr std::size_t N = L::input_shape::size, b = 3;
        std::vector<double> s(L::state_count), y(b * N), dx(b * N);
        l.init_state(s);
        const auto w = random_vector(L::parameter_count, 41, 0.5, 2.0);
        auto st = l.make_stash(b);
        for (std::uint64_t k = 0; k < 4; ++k) {  // move the state away from its initial value
            const auto x = random_vector(b * N, 50 + k, -2, 3), dy = random_vector(b * N, 60 + k);
            train_step(l, w, x.data(), dy.data(), y.data(), dx.data(), b, st, s);
        }
        const auto frozen = s;
        const auto x = random_vector(b * N, 70, -4, 5);
        std::vector<double> yi(b * N, 1e30);
        pp::no_workspace ws;
        l.infer(w, x.data(), yi.data(), b, ws, std::span<const double>(s));
        CHECK(s == frozen);  // bit for bit
        // Each sample through the training forward from the frozen statistics: the same output, bit for bit.
        auto st1 = l.make_stash(1);
        for (std::size_t n = 0; n < b; ++n) {
            auto s1 = frozen;
            std::vector<double> y1(N);
            l.forward(w, x.data() + n * N, y1.data(), 1, st1, ws, s1);
            CHECK(std::equal(y1.begin(), y1.end(), yi.begin() + static_cast<std::ptrdiff_t>(n * N)));
        }
        // The training forward of the whole micro-batch differs after its first sample: the statistics advance.
        auto s3 = frozen;
        l.forward(w, x.data(), y.data(), b, st, ws, s3);
        CHECK(std::equal(y.begin(), y.begin() + N, yi.begin()));
        CHECK_FALSE(std::equal(y.begin() + N, y.end(), yi.begin() + N));
    };
    check(conv_fast{}, "[3, 5, 4]");
    check(dense_fast{}, "[7]");
    check(pp::online_norm<>::bind<double, shape<2, 3, 3>>{}, "[2, 3, 3] (odd spatial size: SIMD tail)");
}

TEST_CASE("online_norm: finite differences: p2 given the stash; p1 exact only at b = 1 from u = g_acc = 0",
          "[layers][online_norm]") {
    auto check = []<class L>(const L& l, const char* what, std::size_t b) {
        INFO(what << ", b = " << b);
        constexpr std::size_t N = L::input_shape::size, P = L::parameter_count;
        const double h = 1e-6;
        std::vector<double> s0(L::state_count), y(b * N), dx(b * N);
        l.init_state(s0);
        auto w = random_vector(P, 81, -0.5, 0.5);
        for (std::size_t c = 0; c < L::channels; ++c) w[c] += 2.5;  // gamma around 2.5: clamping is active
        auto st = l.make_stash(b);
        pp::no_workspace ws;
        for (std::uint64_t k = 0; k < 3; ++k) {  // a non-trivial state
            const auto x = random_vector(b * N, 90 + k, -2, 3), dy = random_vector(b * N, 95 + k);
            train_step(l, w, x.data(), dy.data(), y.data(), dx.data(), b, st, s0);
        }
        const auto x = random_vector(b * N, 100, -3, 4), r = random_vector(b * N, 101);
        auto objective = [&](const std::vector<double>& xx, const std::vector<double>& ww,
                             const std::vector<double>& state) {
            auto s = state;
            auto st2 = l.make_stash(b);
            std::vector<double> yy(b * N);
            l.forward(ww, xx.data(), yy.data(), b, st2, ws, s);
            double f = 0;
            for (std::size_t i = 0; i < b * N; ++i) f += r[i] * yy[i];
            return f;
        };
        auto s = s0;
        l.forward(w, x.data(), y.data(), b, st, ws, s);
        std::size_t clipped = 0;
        double closest = 1e300;  // no output within reach of the kink at +-K
        for (std::size_t i = 0; i < b * N; ++i) {
            const std::size_t c = (i % N) / L::spatial;
            const double z = w[c] * st.yhat[i] + w[L::channels + c];
            clipped += std::abs(z) >= L::clamp_value ? 1 : 0;
            closest = std::min(closest, std::abs(std::abs(z) - L::clamp_value));
        }
        REQUIRE(clipped > 0);
        REQUIRE(closest > 1e-3);
        std::vector<double> dw(P, 0.0), numeric(P);
        l.backward_weight(dw, x.data(), y.data(), r.data(), b, st, ws);
        for (std::size_t i = 0; i < P; ++i) {
            auto wp = w, wm = w;
            wp[i] += h;
            wm[i] -= h;
            numeric[i] = (objective(x, wp, s0) - objective(x, wm, s0)) / (2 * h);
        }
        const double e = golden_error(dw.data(), numeric.data(), P);
        INFO("backward-p2 error " << e << " (" << clipped << " outputs clipped)");
        CHECK(e < 1e-7);
        // p2 adds; p1 in between changes neither the stash nor p2's result.
        auto twice = dw;
        auto s_p1 = s;
        l.backward_input(w, x.data(), y.data(), r.data(), dx.data(), b, st, ws, s_p1);
        l.backward_weight(twice, x.data(), y.data(), r.data(), b, st, ws);
        std::vector<double> doubled(P);
        for (std::size_t i = 0; i < P; ++i) doubled[i] = 2 * dw[i];
        CHECK(golden_error(twice.data(), doubled.data(), P) < 1e-14);  // the same sums, added in another order
    };
    check(conv_fast{}, "[3, 5, 4]", 1);
    check(conv_fast{}, "[3, 5, 4]", 3);
    check(dense_fast{}, "[7]", 3);

    // p1: from the initial state (u = g_acc = 0) at b = 1, the statistics a sample is normalized with do not depend
    // on it and the corrections are 0, so p1 is the exact gradient of the forward; at b = 3 it is not.
    auto check_p1 = []<class L>(const L& l, const char* what, std::size_t b, bool exact) {
        INFO(what << ", b = " << b);
        constexpr std::size_t N = L::input_shape::size;
        const double h = 1e-6;
        std::vector<double> s0(L::state_count), y(b * N), dx(b * N);
        l.init_state(s0);
        auto w = random_vector(L::parameter_count, 111, -0.5, 0.5);
        for (std::size_t c = 0; c < L::channels; ++c) w[c] += 2.0;
        const auto x = random_vector(b * N, 112, -2.5, 2.5), r = random_vector(b * N, 113);
        pp::no_workspace ws;
        auto objective = [&](const std::vector<double>& xx) {
            auto s = s0;
            auto st2 = l.make_stash(b);
            std::vector<double> yy(b * N);
            l.forward(w, xx.data(), yy.data(), b, st2, ws, s);
            double f = 0;
            for (std::size_t i = 0; i < b * N; ++i) f += r[i] * yy[i];
            return f;
        };
        auto s = s0;
        auto st = l.make_stash(b);
        l.forward(w, x.data(), y.data(), b, st, ws, s);
        l.backward_input(w, x.data(), y.data(), r.data(), dx.data(), b, st, ws, s);
        std::vector<double> numeric(b * N);
        for (std::size_t i = 0; i < b * N; ++i) {
            auto xp = x, xm = x;
            xp[i] += h;
            xm[i] -= h;
            numeric[i] = (objective(xp) - objective(xm)) / (2 * h);
        }
        const double e = golden_error(dx.data(), numeric.data(), b * N);
        INFO("backward-p1 vs finite differences: " << e);
        if (exact)
            CHECK(e < 1e-7);
        else
            CHECK(e > 1e-3);
    };
    check_p1(conv_fast{}, "[3, 5, 4]", 1, true);
    check_p1(dense_fast{}, "[7]", 1, true);
    check_p1(conv_fast{}, "[3, 5, 4]", 3, false);
    check_p1(dense_fast{}, "[7]", 3, false);
}

TEST_CASE("online_norm: no heap allocation after make_stash", "[layers][online_norm][allocation]") {
    auto check = []<class L>(const L& l, const char* what) {
        INFO(what);
        using T = typename L::value_type;
        constexpr std::size_t b = 3, N = L::input_shape::size;
        std::vector<T> s(L::state_count), w(L::parameter_count), dw(L::parameter_count), x(b * N, T(0.5)), y(b * N),
            dy(b * N, T(0.25)), dx(b * N);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(i % 7) - T(2);
        l.init_state(s);
        l.init_parameters(w, 1);
        auto st = l.make_stash(b);
        auto ws = pp::make_workspace(l, b);
        const auto before = allocation_counter::snapshot();
        for (int k = 0; k < 3; ++k) {
            l.forward(w, x.data(), y.data(), b, st, ws, s);
            l.backward_weight(dw, x.data(), y.data(), dy.data(), b, st, ws);
            l.backward_input(w, x.data(), y.data(), dy.data(), dx.data(), b, st, ws, s);
            l.infer(w, x.data(), y.data(), b, ws, std::span<const T>(s));
        }
        const auto after = allocation_counter::snapshot();
        CHECK(after.total() == before.total());
    };
    check(pp::online_norm<>::bind<float, shape<16, 7, 7>>{}, "float [16, 7, 7]");
    check(pp::online_norm<>::bind<float, shape<37>>{}, "float [37]");
    check(conv_default{}, "double [3, 5, 4]");
    check(dense_default{}, "double [7]");
}

TEST_CASE("online_norm: float agrees with double over a stream", "[layers][online_norm]") {
    // The float kernels run a different SIMD width (body and tail) than double; same stream, float tolerance.
    auto check = []<class Spec, class Shape>(Spec, Shape, const char* what) {
        INFO(what);
        using Lf = typename Spec::template bind<float, Shape>;
        using Ld = typename Spec::template bind<double, Shape>;
        const Lf lf{};
        const Ld ld{};
        constexpr std::size_t b = 2, N = Shape::size, P = Lf::parameter_count;
        std::vector<float> sf(Lf::state_count), wf(P), yf(b * N), dxf(b * N), dwf(P, 0.f);
        std::vector<double> sd(Ld::state_count), wd(P), yd(b * N), dxd(b * N), dwd(P, 0.0);
        lf.init_state(sf);
        ld.init_state(sd);
        const auto w = random_vector(P, 121, 0.5, 1.5);
        for (std::size_t i = 0; i < P; ++i) {
            wf[i] = static_cast<float>(w[i]);
            wd[i] = wf[i];
        }
        auto stf = lf.make_stash(b);
        auto std_ = ld.make_stash(b);
        pp::no_workspace ws;
        double worst = 0;
        for (std::uint64_t k = 0; k < 8; ++k) {
            const auto x = random_vector(b * N, 130 + k, -2, 3), dy = random_vector(b * N, 140 + k);
            std::vector<float> xf(x.begin(), x.end()), dyf(dy.begin(), dy.end());
            std::vector<double> xd(xf.begin(), xf.end()), dyd(dyf.begin(), dyf.end());  // the same rounded inputs
            lf.forward(wf, xf.data(), yf.data(), b, stf, ws, sf);
            ld.forward(wd, xd.data(), yd.data(), b, std_, ws, sd);
            lf.backward_input(wf, xf.data(), yf.data(), dyf.data(), dxf.data(), b, stf, ws, sf);
            ld.backward_input(wd, xd.data(), yd.data(), dyd.data(), dxd.data(), b, std_, ws, sd);
            lf.backward_weight(dwf, xf.data(), yf.data(), dyf.data(), b, stf, ws);
            ld.backward_weight(dwd, xd.data(), yd.data(), dyd.data(), b, std_, ws);
            const std::vector<double> yff(yf.begin(), yf.end()), dxff(dxf.begin(), dxf.end());
            worst = std::max(
                {worst, golden_error(yff.data(), yd.data(), b * N), golden_error(dxff.data(), dxd.data(), b * N)});
        }
        const std::vector<double> sff(sf.begin(), sf.end()), dwff(dwf.begin(), dwf.end());
        worst =
            std::max({worst, golden_error(sff.data(), sd.data(), sd.size()), golden_error(dwff.data(), dwd.data(), P)});
        INFO("largest float - double difference " << worst);
        CHECK(worst < 1e-4);
    };
    check(fast{}, shape<3, 5, 4>{}, "[3, 5, 4], fast decays");
    check(fast{}, shape<19>{}, "[19], fast decays");
    check(pp::online_norm<>{}, shape<4, 6, 5>{}, "[4, 6, 5], default decays");
}
