// Momentum SGD (heavy-ball, Nesterov, L2 weight decay) against hand-computed steps; learning-rate schedules;
// the B -> b scaling rules of docs/pb-semantics.md §4 including the doc's worked example.
#include <catch2/catch.hpp>

#include <pipeprop/optim/hyperparameters.hpp>
#include <pipeprop/optim/lr_schedule.hpp>
#include <pipeprop/optim/scaling_rules.hpp>
#include <pipeprop/optim/sgd.hpp>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace po = pipeprop::optim;

namespace {
/// 19 parameters (exercises the SIMD body and the scalar tail): even positions follow the pair's first element,
/// odd positions its second.
std::vector<float> pattern(float even, float odd) {
    std::vector<float> v(19);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = i % 2 ? odd : even;
    return v;
}
void check_pattern(const std::vector<float>& v, double even, double odd) {
    for (std::size_t i = 0; i < v.size(); ++i) {
        INFO("element " << i);
        CHECK(v[i] == Approx(i % 2 ? odd : even).epsilon(1e-6));
    }
}
}  // namespace

// Hand computation (w0 = (1, -2), g1 = (0.5, 0.25), g2 = (-1, 0.5), eta = 0.1, m = 0.9):
//   heavy-ball  step 1: v = (0.5, 0.25);             w = (0.95, -2.025)
//               step 2: v = (-0.55, 0.725);          w = (1.005, -2.0975)
//   Nesterov    step 1: v = (0.5, 0.25), w -= 0.1 (g + 0.9 v) = (0.905, -2.0475)
//               step 2: v = (-0.55, 0.725), g + 0.9 v = (-1.495, 1.1525), w = (1.0545, -2.16275)
TEST_CASE("sgd: heavy-ball and Nesterov steps match hand-computed values", "[optim][sgd]") {
    const auto g1 = pattern(0.5f, 0.25f), g2 = pattern(-1.0f, 0.5f);
    {
        po::sgd<float> opt(19, {.nesterov = false});
        const po::hyperparameters<> h{.learning_rate = 0.1, .momentum = 0.9, .weight_decay = 0.0};
        auto w = pattern(1.0f, -2.0f);
        opt.step(w, g1, h);
        check_pattern(w, 0.95, -2.025);
        opt.step(w, g2, h);
        check_pattern(w, 1.005, -2.0975);
        check_pattern(std::vector<float>(opt.velocity().begin(), opt.velocity().end()), -0.55, 0.725);
        CHECK(opt.step_count() == 2);
    }
    {
        po::sgd<float> opt(19, {.nesterov = true});
        const po::hyperparameters<> h{.learning_rate = 0.1, .momentum = 0.9, .weight_decay = 0.0};
        auto w = pattern(1.0f, -2.0f);
        opt.step(w, g1, h);
        check_pattern(w, 0.905, -2.0475);
        opt.step(w, g2, h);
        check_pattern(w, 1.0545, -2.16275);
    }
}

// With L2 weight decay lambda = 0.01 the gradient is g + lambda w (w0 = (1, -2) -> g' = (0.51, 0.23)):
//   heavy-ball: w = w0 - 0.1 g'               = (0.949, -2.023)
//   Nesterov:   w = w0 - 0.1 (g' + 0.9 g')    = (0.9031, -2.0437)
//   momentum 0, eta = 0.5, g = 0: pure decay  w = w0 (1 - 0.5 * 0.01) = (0.995, -1.99)
TEST_CASE("sgd: L2 weight decay enters the gradient", "[optim][sgd]") {
    const auto g1 = pattern(0.5f, 0.25f);
    {
        po::sgd<float> opt(19, {});
        auto w = pattern(1.0f, -2.0f);
        opt.step(w, g1, {.learning_rate = 0.1, .momentum = 0.9, .weight_decay = 0.01});
        check_pattern(w, 0.949, -2.023);
        check_pattern(std::vector<float>(opt.velocity().begin(), opt.velocity().end()), 0.51, 0.23);
    }
    {
        po::sgd<float> opt(19, {.nesterov = true});
        auto w = pattern(1.0f, -2.0f);
        opt.step(w, g1, {.learning_rate = 0.1, .momentum = 0.9, .weight_decay = 0.01});
        check_pattern(w, 0.9031, -2.0437);
    }
    {
        po::sgd<float> opt(19, {});
        auto w = pattern(1.0f, -2.0f);
        opt.step(w, pattern(0.0f, 0.0f), {.learning_rate = 0.5, .momentum = 0.0, .weight_decay = 0.01});
        check_pattern(w, 0.995, -1.99);
    }
}

TEST_CASE("sgd: invalid hyperparameters and size mismatches throw, naming the field", "[optim][sgd]") {
    po::sgd<float> opt(3, {});
    po::sgd<float> nesterov(3, {.nesterov = true});
    std::vector<float> w(3, 1.0f), g(3, 0.5f), g4(4);
    auto message = [&](po::sgd<float>& o, const po::hyperparameters<>& h) {
        try {
            o.step(w, g, h);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no exception");
    };
    using Catch::Matchers::Contains;
    CHECK_THAT(message(opt, {.learning_rate = 0.1, .momentum = 1.0}),
               Contains("pipeprop::optim::sgd: momentum = 1.000000 must be in [0, 1)"));
    CHECK_THAT(message(opt, {.learning_rate = 0.1, .momentum = -0.1}), Contains("momentum = -0.100000 must be in [0, 1]"));
    CHECK_THAT(message(opt, {.learning_rate = 0.1, .momentum = 0.9, .weight_decay = -1e-4}),
               Contains("weight_decay = -0.000100 must be finite and >= 0"));
    CHECK_THAT(message(opt, {.learning_rate = std::nan(""), .momentum = 0.9}), Contains("learning_rate = nan"));
    CHECK_THAT(message(opt, {.learning_rate = -0.1, .momentum = 0.9}), Contains("learning_rate = -0.100000"));
    CHECK_THAT(message(nesterov, {.learning_rate = 0.1, .momentum = 0.0}), Contains("Nesterov momentum needs momentum > 0"));
    // Checked in the parameters' type (float here), where the update is applied: 1 - 1e-12 rounds to 1, 1e39 to inf.
    CHECK_THAT(message(opt, {.learning_rate = 0.1, .momentum = 1.0 - 1e-12}), Contains("rounds to 1"));
    CHECK_THAT(message(opt, {.learning_rate = 1e39, .momentum = 0.9}), Contains("overflows the parameters' type"));
    CHECK_THROWS_AS(opt.step(w, g4, {.learning_rate = 0.1, .momentum = 0.9}), std::invalid_argument);
    CHECK(opt.step_count() == 0);
    CHECK(w == std::vector<float>(3, 1.0f));
    CHECK_NOTHROW(opt.check({.learning_rate = 0.0, .momentum = 0.0, .weight_decay = 0.0}));
}

TEST_CASE("hyperparameters: one validation naming the field", "[optim][hyperparameters]") {
    auto message = [](const po::hyperparameters<float>& h) {
        try {
            po::validate(h, "who");
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no exception");
    };
    using Catch::Matchers::Equals;
    CHECK_NOTHROW(po::validate(po::hyperparameters<float>{.learning_rate = 0.0f, .momentum = 1.0f, .weight_decay = 0.0f}));
    CHECK_THAT(message({.learning_rate = INFINITY}), Equals("who: learning_rate = inf must be finite and >= 0"));
    CHECK_THAT(message({.momentum = 1.5f}), Equals("who: momentum = 1.500000 must be in [0, 1]"));
    CHECK_THAT(message({.weight_decay = -1.0f}), Equals("who: weight_decay = -1.000000 must be finite and >= 0"));
    CHECK_THROWS_WITH(po::validate(po::hyperparameters<>{.learning_rate = -1.0}),
                      Catch::Matchers::StartsWith("pipeprop::optim::hyperparameters: learning_rate"));
}

TEST_CASE("lr_schedule: constant, step, cosine and linear warm-up in samples", "[optim][schedule]") {
    const auto c = po::lr_schedule::constant(0.05);
    CHECK(c(0) == 0.05);
    CHECK(c(123456) == 0.05);

    const auto s = po::lr_schedule::step(0.1, 100, 0.1);
    CHECK(s(0) == Approx(0.1));
    CHECK(s(99) == Approx(0.1));
    CHECK(s(100) == Approx(0.01));
    CHECK(s(250) == Approx(0.001));

    const auto cos = po::lr_schedule::cosine(0.2, 1000, 0.02);
    CHECK(cos(0) == Approx(0.2));
    CHECK(cos(500) == Approx(0.11));
    CHECK(cos(250) == Approx(0.02 + 0.18 * (1 + std::cos(M_PI / 4)) / 2));
    CHECK(cos(1000) == Approx(0.02));
    CHECK(cos(5000) == Approx(0.02));

    const auto w = po::lr_schedule::constant(0.4).with_warmup(10);
    CHECK(w(0) == Approx(0.04));
    CHECK(w(4) == Approx(0.2));
    CHECK(w(9) == Approx(0.4));
    CHECK(w(10) == Approx(0.4));
    const auto sw = po::lr_schedule::step(0.1, 5, 0.5).with_warmup(10);  // warm-up multiplies the step schedule
    CHECK(sw(6) == Approx(0.05 * 0.7));

    CHECK(po::samples_from_epochs(1.5, 60000) == 90000);
    CHECK(po::samples_from_epochs(0.0, 60000) == 0);
    CHECK_THROWS_AS(po::samples_from_epochs(-1.0, 10), std::invalid_argument);
    CHECK_THROWS_AS(po::lr_schedule::step(0.1, 0, 0.1), std::invalid_argument);
    CHECK_THROWS_AS(po::lr_schedule::cosine(0.1, 0), std::invalid_argument);
    CHECK_THROWS_AS(po::lr_schedule::cosine(0.1, 10, 0.2), std::invalid_argument);
    CHECK_THROWS_AS(po::lr_schedule::constant(-0.1), std::invalid_argument);
    CHECK(po::lr_schedule_kind_from_string("cosine") == po::lr_schedule_kind::cosine);
    CHECK(po::to_string(po::lr_schedule_kind::step) == "step");
    CHECK_THROWS_AS(po::lr_schedule_kind_from_string("linear"), std::invalid_argument);
}

TEST_CASE("scaling rules: the example of pb-semantics.md §4 and the invariants", "[optim][scaling]") {
    // B = 32, eta = 0.05, m = 0.9  ->  b = 1: m = 0.99671, eta = 5.14e-5 (the doc rounds to these digits).
    const auto b1 = po::scale_hyperparameters({.learning_rate = 0.05, .momentum = 0.9}, 32, 1);
    CHECK(std::round(b1.momentum * 1e5) / 1e5 == Approx(0.99671).epsilon(1e-12));
    CHECK(std::round(b1.learning_rate * 1e7) / 1e7 == Approx(5.14e-5).epsilon(1e-9));

    for (std::size_t b : {1u, 4u, 8u, 64u}) {
        INFO("b = " << b);
        const auto h = po::scale_hyperparameters({.learning_rate = 0.05, .momentum = 0.9}, 32, b);
        // Same momentum half-life in samples: m_b^(B/b) = m_B.
        CHECK(std::pow(h.momentum, 32.0 / static_cast<double>(b)) == Approx(0.9).epsilon(1e-12));
        // Same effective step per sample: eta_b / (1 - m_b) / b = eta_B / (1 - m_B) / B.
        CHECK(h.learning_rate / (1 - h.momentum) / static_cast<double>(b) == Approx(0.05 / 0.1 / 32).epsilon(1e-12));
        // Back to B returns the original.
        const auto back = po::scale_hyperparameters(h, b, 32);
        CHECK(back.momentum == Approx(0.9).epsilon(1e-12));
        CHECK(back.learning_rate == Approx(0.05).epsilon(1e-12));
    }
    const auto same = po::scale_hyperparameters({.learning_rate = 0.05, .momentum = 0.9}, 32, 32);
    CHECK(same.learning_rate == 0.05);
    CHECK(same.momentum == 0.9);
    const auto plain = po::scale_hyperparameters({.learning_rate = 0.32, .momentum = 0.0}, 32, 1);
    CHECK(plain.momentum == 0.0);
    CHECK(plain.learning_rate == Approx(0.01));
    // The weight decay is not changed by the rule (L2 in the gradient, docs/pb-semantics.md §4).
    const auto decayed = po::scale_hyperparameters({.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 5e-4}, 32, 1);
    CHECK(decayed.weight_decay == 5e-4);
    CHECK(decayed.learning_rate == b1.learning_rate);
    CHECK(decayed.momentum == b1.momentum);
    CHECK_THROWS_WITH(po::scale_hyperparameters({0.1, 1.0}, 32, 1), Catch::Contains("momentum = 1.000000 must be in [0, 1)"));
    CHECK_THROWS_AS(po::scale_hyperparameters({0.1, 0.9}, 0, 1), std::invalid_argument);
    CHECK_THROWS_WITH(po::scale_hyperparameters({-0.1, 0.9}, 32, 1), Catch::Contains("learning_rate = -0.100000"));
    CHECK_THROWS_WITH(po::scale_hyperparameters({0.1, 0.9, -1.0}, 32, 1), Catch::Contains("weight_decay"));
}
