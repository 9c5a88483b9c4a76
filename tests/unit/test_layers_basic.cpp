// Gradient checks (central finite differences, double) and contract checks for dense, relu, flatten and the loss;
// layer_stack: fused backward equals p1 followed by p2; seeded initialization is reproducible.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace pp = pipeprop;
using pp::shape;

TEST_CASE("dense: backward-p1 and backward-p2 match finite differences", "[layers][dense]") {
    for (std::size_t b : {1u, 3u}) {
        auto r = pp::testing::check_gradients(pp::dense_layer<double, shape<7>, 5>{}, {.batch = b});
        INFO(r.report);
        CHECK(r.passed);
    }
}

TEST_CASE("relu and flatten: backward-p1 matches finite differences", "[layers][relu][flatten]") {
    for (std::size_t b : {1u, 3u}) {
        auto r1 = pp::testing::check_gradients(pp::relu_layer<double, shape<2, 3, 5>>{}, {.batch = b});
        INFO(r1.report);
        CHECK(r1.passed);
        auto r2 = pp::testing::check_gradients(pp::flatten_layer<double, shape<2, 3, 5>>{}, {.batch = b});
        INFO(r2.report);
        CHECK(r2.passed);
    }
}

// A layer whose p1 is off by a factor of 2: the checker must fail it.
struct bad_scale {
    using value_type = double;
    using input_shape = shape<4>;
    using output_shape = shape<4>;
    static constexpr std::size_t parameter_count = 0;
    void forward(std::span<const double>, const double* x, double* y, std::size_t b, pp::no_stash&,
                 pp::no_workspace&) const {
        for (std::size_t i = 0; i < 4 * b; ++i) y[i] = 3 * x[i];
    }
    void backward_input(std::span<const double>, const double*, const double*, const double* dy, double* dx,
                        std::size_t b, const pp::no_stash&, pp::no_workspace&) const {
        for (std::size_t i = 0; i < 4 * b; ++i) dx[i] = 6 * dy[i];
    }
};

TEST_CASE("check_gradients catches a wrong backward", "[testing]") {
    static_assert(pp::layer<bad_scale>);
    CHECK_FALSE(pp::testing::check_gradients(bad_scale{}).passed);
}

TEST_CASE("softmax_cross_entropy: gradient matches finite differences and scales", "[loss]") {
    using loss = pp::softmax_cross_entropy<double, 4>;
    std::mt19937_64 rng(3);
    const std::size_t b = 3;
    std::vector<double> z(b * 4), d(b * 4);
    for (auto& v : z) v = pp::uniform<double>(rng, -2, 2);
    std::vector<std::int32_t> labels{0, 3, 2};
    const double l = loss::loss_and_gradient(z.data(), labels.data(), b, d.data());
    CHECK(l == Approx(loss::loss(z.data(), labels.data(), b)));
    for (std::size_t i = 0; i < z.size(); ++i) {
        auto zp = z, zm = z;
        zp[i] += 1e-6;
        zm[i] -= 1e-6;
        const double num = (loss::loss(zp.data(), labels.data(), b) - loss::loss(zm.data(), labels.data(), b)) / 2e-6;
        CHECK(d[i] == Approx(num).margin(1e-8));
    }
    // gradient_scale = 1 / 6: the same micro-batch as part of a batch of 6 gets half the gradient.
    std::vector<double> d2(b * 4);
    loss::loss_and_gradient(z.data(), labels.data(), b, d2.data(), 1.0 / 6);
    for (std::size_t i = 0; i < z.size(); ++i) CHECK(d2[i] == Approx(d[i] / 2));
    std::vector<std::int32_t> bad{0, 4, 1};
    CHECK_THROWS_AS(loss::loss(z.data(), bad.data(), b), std::out_of_range);
}

using mlp = pp::network<shape<2, 3, 2>, pp::flatten, pp::dense<8>, pp::relu, pp::dense<5>, pp::relu, pp::dense<3>>;

TEST_CASE("network: shapes are computed at compile time", "[network]") {
    using stack = pp::layer_stack<mlp, float>;
    static_assert(stack::layer_count == 6);
    static_assert(std::is_same_v<stack::output_shape, shape<3>>);
    static_assert(stack::activation_size[0] == 12 && stack::activation_size[1] == 12);
    static_assert(stack::parameter_count == 12 * 8 + 8 + 8 * 5 + 5 + 5 * 3 + 3);
    static_assert(stack::parameter_offset[1] == 0 && stack::parameter_offset[2] == 104);
    SUCCEED();
}

TEST_CASE("layer_stack: fused backward equals p1 then p2; ranges compose", "[network][layer_stack]") {
    using stack_t = pp::layer_stack<mlp, double>;
    stack_t stack;
    std::vector<double> w(stack_t::parameter_count);
    stack.init_parameters(w, 42);
    const std::size_t b = 3;
    auto act = stack.make_activations(stack_t::all(), b);
    auto ws = stack.make_workspaces(stack_t::all(), b);
    std::mt19937_64 rng(1);
    for (std::size_t i = 0; i < b * 12; ++i) act.input()[i] = pp::uniform<double>(rng, -1, 1);
    stack.forward(w, act, b, ws);
    for (std::size_t i = 0; i < b * 3; ++i) act.output_gradient()[i] = pp::uniform<double>(rng, -1, 1);
    std::vector<double> dw_fused(w.size(), 0.0), dw_split(w.size(), 0.0);
    stack.backward(w, dw_fused, act, b, ws);
    std::vector<double> dx_fused(act.input_gradient(), act.input_gradient() + b * 12);
    stack.backward_input(w, act, b, ws);
    stack.backward_weight(dw_split, act, b, ws);
    CHECK(dw_fused == dw_split);
    CHECK(std::vector<double>(act.input_gradient(), act.input_gradient() + b * 12) == dx_fused);

    // Two ranges [0,3) and [3,6) chained by copying the boundary tensors give the same result.
    auto a0 = stack.make_activations({0, 3}, b);
    auto a1 = stack.make_activations({3, 6}, b);
    auto w0 = std::span<const double>(w).subspan(0, stack_t::parameter_count_of({0, 3}));
    auto w1 = std::span<const double>(w).subspan(stack_t::parameter_offset[3]);
    auto ws0 = stack.make_workspaces({0, 3}, b);
    auto ws1 = stack.make_workspaces({3, 6}, b);
    std::copy_n(act.input(), b * 12, a0.input());
    stack.forward(w0, a0, b, ws0);
    std::copy_n(a0.output(), b * a0.output_size(), a1.input());
    stack.forward(w1, a1, b, ws1);
    CHECK(std::vector<double>(a1.output(), a1.output() + b * 3) ==
          std::vector<double>(act.output(), act.output() + b * 3));
    std::copy_n(act.output_gradient(), b * 3, a1.output_gradient());
    std::vector<double> dw2(w.size(), 0.0);
    stack.backward(w1, std::span<double>(dw2).subspan(stack_t::parameter_offset[3]), a1, b, ws1);
    std::copy_n(a1.input_gradient(), b * a1.input_size(), a0.output_gradient());
    stack.backward(w0, std::span<double>(dw2).subspan(0, stack_t::parameter_count_of({0, 3})), a0, b, ws0);
    CHECK(dw2 == dw_fused);
}

TEST_CASE("initialization is seeded and reproducible", "[network][init]") {
    using stack_t = pp::layer_stack<mlp, float>;
    stack_t stack;
    std::vector<float> a(stack_t::parameter_count), b(stack_t::parameter_count), c(stack_t::parameter_count);
    stack.init_parameters(a, 7);
    stack.init_parameters(b, 7);
    stack.init_parameters(c, 8);
    CHECK(a == b);
    CHECK(a != c);
}

TEST_CASE("pipeline_layout: boundaries and delays are compile-time", "[pipeline_layout]") {
    using fine = pp::pipeline_layout<mlp, pp::fine_grained<>>;
    static_assert(fine::stage_count == 3);
    static_assert(fine::boundaries == std::array<std::size_t, 4>{0, 3, 5, 6});
    static_assert(fine::delays == std::array<std::size_t, 3>{4, 2, 0});
    using own = pp::pipeline_layout<mlp, pp::fine_grained<pp::parameter_free::own_stage>>;
    static_assert(own::stage_count == 6 && own::delays[0] == 10);
    using split = pp::pipeline_layout<mlp, pp::split_at<2, 5>>;
    static_assert(split::stage_count == 3 && split::stage(1) == pp::layer_range{2, 5});
    CHECK(pp::partition_at(6, {2, 5}).size() == 3);
    CHECK_THROWS_AS(pp::partition_at(6, {5, 2}), std::invalid_argument);
    CHECK_THROWS_AS(pp::partition_at(6, {6}), std::invalid_argument);
}

TEST_CASE("relu passes NaN through instead of hiding it", "[layers][relu]") {
    pp::relu_layer<float, shape<20>> r;
    std::vector<float> x(20, -1.0f), y(20);
    x[3] = std::numeric_limits<float>::quiet_NaN();
    x[19] = std::numeric_limits<float>::quiet_NaN();  // scalar tail for any vector width that does not divide 20
    x[5] = 2.0f;
    pp::no_stash st;
    pp::no_workspace ws;
    r.forward({}, x.data(), y.data(), 1, st, ws);
    CHECK(std::isnan(y[3]));
    CHECK(std::isnan(y[19]));
    CHECK(y[5] == 2.0f);
    CHECK(y[0] == 0.0f);
}
