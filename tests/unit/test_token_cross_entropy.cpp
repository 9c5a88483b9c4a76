// token_cross_entropy (loss/token_cross_entropy.hpp): gradient against central finite differences in double
// (L = 1 and odd L, V not a power of two, ignored tokens); golden comparison with torch.nn.functional.cross_entropy
// (tests/golden/make_token_cross_entropy.py); the gradient scale of a batch split into micro-batches; the
// all-ignored micro-batch; accuracy counts; numerical stability; target errors.
#include <catch2/catch.hpp>

#include <pipeprop/loss/token_cross_entropy.hpp>

#include <xtensor/xarray.hpp>
#include <xtensor/xnpy.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

template <class T>
std::vector<T> random_logits(std::size_t n, std::uint64_t seed, double scale = 2.0) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> nd(0.0, scale);
    std::vector<T> z(n);
    for (auto& x : z) x = static_cast<T>(nd(rng));
    return z;
}

/// max |a - b| / max(max |b|, 1e-300).
template <class A, class B>
double max_rel(const A& a, const B& b) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        num = std::max(num, std::abs(double(a[i]) - double(b[i])));
        den = std::max(den, std::abs(double(b[i])));
    }
    return num / std::max(den, 1e-300);
}

/// Central finite differences of scale * loss_sum against loss_and_gradient's dlogits.
template <class Loss>
void check_finite_differences(std::size_t b, std::vector<std::int32_t> targets, double gradient_scale) {
    const std::size_t n = b * Loss::logits_per_sample;
    auto z = random_logits<double>(n, 11 + b);
    std::vector<double> d(n, 123.0);  // pre-filled: every entry must be assigned
    const auto r = Loss::loss_and_gradient(z.data(), targets.data(), b, d.data(), gradient_scale);
    const double scale = gradient_scale > 0 ? gradient_scale : 1.0 / static_cast<double>(r.tokens);
    std::vector<double> numeric(n);
    const double h = 1e-5;
    for (std::size_t i = 0; i < n; ++i) {
        const double keep = z[i];
        z[i] = keep + h;
        const double up = Loss::loss(z.data(), targets.data(), b).loss_sum;
        z[i] = keep - h;
        const double down = Loss::loss(z.data(), targets.data(), b).loss_sum;
        z[i] = keep;
        numeric[i] = scale * (up - down) / (2 * h);
    }
    INFO("b " << b << " L " << Loss::length << " V " << Loss::vocabulary << " scale " << gradient_scale);
    CHECK(max_rel(d, numeric) < 1e-7);
    // Ignored tokens: exactly zero rows.
    for (std::size_t t = 0; t < b * Loss::length; ++t)
        if (targets[t] == Loss::ignore_index)
            for (std::size_t c = 0; c < Loss::vocabulary; ++c) CHECK(d[t * Loss::vocabulary + c] == 0.0);
}

}  // namespace

TEST_CASE("token_cross_entropy: gradient equals central finite differences (double)", "[loss][token]") {
    SECTION("odd L = 5, V = 37 (SIMD body and tail), 3 ignored tokens, micro-batch mean") {
        check_finite_differences<pipeprop::token_cross_entropy<double, 5, 37>>(
            2, {3, -100, 36, 0, 17, -100, 5, 5, -100, 20}, 0.0);
    }
    SECTION("explicit gradient scale 1/12") {
        check_finite_differences<pipeprop::token_cross_entropy<double, 5, 37>>(
            2, {3, -100, 36, 0, 17, -100, 5, 5, -100, 20}, 1.0 / 12);
    }
    SECTION("L = 1, V = 11, one ignored sample") {
        check_finite_differences<pipeprop::token_cross_entropy<double, 1, 11>>(3, {10, -100, 4}, 0.0);
    }
    SECTION("L = 3, V = 6 (shorter than one batch), padding id 0 ignored") {
        check_finite_differences<pipeprop::token_cross_entropy<double, 3, 6, 0>>(2, {1, 5, 0, 0, 2, 3}, 0.0);
    }
}

namespace {
template <class T, std::size_t L, std::size_t V, std::int32_t Ignore>
void check_golden(const std::string& name, const char* suffix, std::size_t b, double tol) {
    using loss_t = pipeprop::token_cross_entropy<T, L, V, Ignore>;
    const std::string dir = std::string(PIPEPROP_GOLDEN_DIR) + "/token_cross_entropy/" + name + "_";
    const auto logits = xt::load_npy<T>(dir + "logits_" + suffix + ".npy");
    const auto targets = xt::load_npy<std::int32_t>(dir + "targets.npy");
    const auto want_loss = xt::load_npy<T>(dir + "loss_" + suffix + ".npy");
    const auto want_grad = xt::load_npy<T>(dir + "grad_" + suffix + ".npy");
    const auto want_correct = xt::load_npy<std::int32_t>(dir + "correct.npy");
    REQUIRE(logits.shape() == std::vector<std::size_t>{b, L, V});
    REQUIRE(targets.shape() == std::vector<std::size_t>{b, L});
    REQUIRE(want_grad.shape() == logits.shape());
    std::vector<T> z(logits.begin(), logits.end()), d(z.size(), T(7));
    std::vector<std::int32_t> y(targets.begin(), targets.end());
    const auto r = loss_t::loss_and_gradient(z.data(), y.data(), b, d.data());
    INFO(name << " " << suffix << ": loss " << r.mean() << " vs torch " << double(want_loss(0)));
    CHECK(std::abs(r.mean() - double(want_loss(0))) <= tol * std::abs(double(want_loss(0))));
    CHECK(max_rel(d, want_grad) <= tol);
    CHECK(r.correct == static_cast<std::size_t>(want_correct(0)));
    CHECK(loss_t::correct(z.data(), y.data(), b) == r.correct);
    CHECK(r.tokens == static_cast<std::size_t>(std::count_if(y.begin(), y.end(), [](auto t) { return t != Ignore; })));
    CHECK(r.correct > 0);  // the script makes every other target the arg-max: the count is exercised
}
}  // namespace

TEST_CASE("token_cross_entropy: equals torch.nn.functional.cross_entropy(ignore_index)", "[loss][token][golden]") {
    SECTION("float64, 1e-12") {
        check_golden<double, 5, 37, -100>("odd", "f64", 2, 1e-12);
        check_golden<double, 1, 11, -100>("single", "f64", 3, 1e-12);
        check_golden<double, 3, 13, 0>("pad0", "f64", 2, 1e-12);
    }
    SECTION("float32, 1e-5") {
        check_golden<float, 5, 37, -100>("odd", "f32", 2, 1e-5);
        check_golden<float, 1, 11, -100>("single", "f32", 3, 1e-5);
        check_golden<float, 3, 13, 0>("pad0", "f32", 2, 1e-5);
    }
}

// docs/pitfalls.md item 1: a batch of 4 sequences split into micro-batches {1, 3} (the first with padding only) and
// {2, 2} with gradient_scale = 1 / N (N = count_tokens over the whole batch) gives the dlogits and the mean of the
// whole batch computed at once.
TEST_CASE("token_cross_entropy: gradient scale 1/N makes micro-batches sum to the whole-batch mean", "[loss][token]") {
    using loss_t = pipeprop::token_cross_entropy<double, 4, 19>;
    const std::size_t B = 4, row = loss_t::logits_per_sample;
    const auto z = random_logits<double>(B * row, 5);
    const std::vector<std::int32_t> y{-100, -100, -100, -100, 1, 2, 3, -100, 18, 0, 7, 7, 9, -100, -100, 4};
    std::vector<double> whole(B * row);
    const auto all = loss_t::loss_and_gradient(z.data(), y.data(), B, whole.data());
    const std::size_t N = loss_t::count_tokens(y.data(), B);
    REQUIRE(N == 9);
    REQUIRE(all.tokens == N);
    for (const std::vector<std::size_t>& split : {std::vector<std::size_t>{1, 3}, std::vector<std::size_t>{2, 2},
                                                 std::vector<std::size_t>{1, 1, 1, 1}}) {
        std::vector<double> parts(B * row, -1.0);
        double loss_sum = 0;
        std::size_t first = 0, tokens = 0;
        for (const std::size_t b : split) {
            const auto r = loss_t::loss_and_gradient(z.data() + first * row, y.data() + first * loss_t::length, b,
                                                     parts.data() + first * row, 1.0 / static_cast<double>(N));
            loss_sum += r.loss_sum;
            tokens += r.tokens;
            first += b;
        }
        INFO("split into " << split.size() << " micro-batches");
        CHECK(tokens == N);
        CHECK(loss_sum / static_cast<double>(N) == Approx(all.mean()).epsilon(1e-14));
        CHECK(max_rel(parts, whole) <= 1e-15);
    }
    // Averaging micro-batch means instead would differ (a check that the test can fail).
    std::vector<double> d(B * row);
    const double m1 = loss_t::loss_and_gradient(z.data() + row, y.data() + 4, 1, d.data()).mean();
    const double m2 = loss_t::loss_and_gradient(z.data() + 2 * row, y.data() + 8, 2, d.data()).mean();
    CHECK(std::abs((m1 + m2) / 2 - all.mean()) > 1e-3);
}

TEST_CASE("token_cross_entropy: an all-ignored micro-batch has loss 0 and a zero gradient", "[loss][token]") {
    using loss_t = pipeprop::token_cross_entropy<float, 3, 21>;
    const auto z = random_logits<float>(2 * loss_t::logits_per_sample, 9);
    const std::vector<std::int32_t> y(6, -100);
    for (const float scale : {0.0f, 0.125f}) {
        std::vector<float> d(z.size(), 3.0f);
        const auto r = loss_t::loss_and_gradient(z.data(), y.data(), 2, d.data(), scale);
        CHECK(r.tokens == 0);
        CHECK(r.correct == 0);
        CHECK(r.loss_sum == 0.0);
        CHECK(r.mean() == 0.0);
        CHECK(std::all_of(d.begin(), d.end(), [](float v) { return v == 0.0f; }));
    }
    CHECK(loss_t::loss(z.data(), y.data(), 2).mean() == 0.0);
    CHECK(loss_t::count_tokens(y.data(), 2) == 0);
}

TEST_CASE("token_cross_entropy: accuracy counts arg-max hits of non-ignored tokens, ties to the lowest id",
          "[loss][token]") {
    using loss_t = pipeprop::token_cross_entropy<float, 3, 5>;
    // Token 0: max at 2 (target 2: hit). Token 1: tie between 1 and 3 (target 3: miss, target 1 would hit).
    // Token 2: max at 4 but ignored.
    const std::vector<float> z{0, 1, 5, 2, 0, /**/ 0, 4, 1, 4, 0, /**/ 0, 0, 0, 0, 9};
    std::vector<float> d(z.size());
    CHECK(loss_t::correct(z.data(), std::vector<std::int32_t>{2, 3, -100}.data(), 1) == 1);
    CHECK(loss_t::correct(z.data(), std::vector<std::int32_t>{2, 1, -100}.data(), 1) == 2);
    CHECK(loss_t::correct(z.data(), std::vector<std::int32_t>{0, 0, 4}.data(), 1) == 1);
    const std::vector<std::int32_t> y{2, 1, -100};
    CHECK(loss_t::loss_and_gradient(z.data(), y.data(), 1, d.data()).correct == 2);
    CHECK(loss_t::loss(z.data(), y.data(), 1).correct == 2);
}

TEST_CASE("token_cross_entropy: stable for large logits; loss equals loss_and_gradient's", "[loss][token]") {
    using loss_t = pipeprop::token_cross_entropy<float, 2, 33>;
    auto z = random_logits<float>(2 * loss_t::logits_per_sample, 4);
    const std::vector<std::int32_t> y{1, 32};
    std::vector<float> d(z.size()), d_big(z.size());
    const auto r = loss_t::loss_and_gradient(z.data(), y.data(), 1, d.data());
    CHECK(loss_t::loss(z.data(), y.data(), 1).loss_sum == r.loss_sum);
    // Shifting every logit by 1e4 (exp would overflow without the max subtracted) leaves loss and gradient.
    for (auto& x : z) x += 1e4f;
    const auto big = loss_t::loss_and_gradient(z.data(), y.data(), 1, d_big.data());
    REQUIRE(std::isfinite(big.loss_sum));
    CHECK(big.mean() == Approx(r.mean()).epsilon(1e-2));  // float32 logits near 1e4 keep ~1e-3 absolute precision
    CHECK(max_rel(d_big, d) < 1e-2);
}

TEST_CASE("token_cross_entropy: a target outside the vocabulary throws, naming sample and position",
          "[loss][token]") {
    using loss_t = pipeprop::token_cross_entropy<double, 2, 7>;
    const std::vector<double> z(2 * loss_t::logits_per_sample, 0.5);
    std::vector<double> d(z.size(), 4.0);
    const std::vector<std::int32_t> y{1, 2, 3, 7};
    CHECK_THROWS_WITH(loss_t::loss_and_gradient(z.data(), y.data(), 2, d.data()),
                      "pipeprop::token_cross_entropy: target 7 of sample 1, position 1 is outside [0, 7) and is not "
                      "the ignore index -100");
    CHECK(std::all_of(d.begin(), d.end(), [](double v) { return v == 4.0; }));  // nothing written
    CHECK_THROWS_AS(loss_t::loss(z.data(), std::vector<std::int32_t>{-1, 0, 0, 0}.data(), 2), std::out_of_range);
    CHECK_THROWS_AS(loss_t::correct(z.data(), y.data(), 2), std::out_of_range);
    CHECK_THROWS_AS(loss_t::count_tokens(y.data(), 2), std::out_of_range);
    // -100 is a target like any other when the ignore index is 0.
    CHECK_THROWS_AS((pipeprop::token_cross_entropy<double, 2, 7, 0>::count_tokens(
                        std::vector<std::int32_t>{-100, 0, 0, 0}.data(), 2)),
                    std::out_of_range);
}
