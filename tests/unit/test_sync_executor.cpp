// The synchronous pipeline executor (sync/executor.hpp) against the sequential trainer on the whole batch
// (docs/schedules.md §3; docs/pitfalls.md items 1-4, 11):
// - for every schedule, with and without 2BP, several (p, m) including m < p and B not divisible by m: one step's
//   gradient and the updated weights equal the sequential trainer's on the whole batch B. Tolerances: the only
//   difference is the float summation order of the per-micro-batch sums (dW = sum over micro-batches of
//   dy_j^T x_j instead of one GEMM over B), so float agrees to 3e-6 relative to the largest |value| of the tensor
//   (a few ulps of the sums of B <= 13 terms), double to 1e-13; with m = 1 the arithmetic is the same and the
//   results are bit-identical;
// - results are bit-identical run to run, between the sequential and the concurrent executor, and across all
//   schedules with the same m (every schedule runs each stage's W's in micro-batch order);
// - a weight used twice in a stage accumulates both contributions (custom layer y = W (W x));
// - activation slots = the simulator's peak in-flight count, not m; spans follow the op lists and the dependency
//   model; all p2 ends before the optimizer step; errors are reported, never hung on.
#include <catch2/catch.hpp>

#include "unit/small_resnet.hpp"
#include "unit/vector_compare.hpp"

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>
#include <pipeprop/pipeprop.hpp>
#include <pipeprop/layers/conv2d.hpp>
#include <pipeprop/layers/group_norm.hpp>
#include <pipeprop/layers/max_pool2d.hpp>
#include <pipeprop/sequential_trainer.hpp>
#include <pipeprop/sync/any_executor.hpp>
#include <pipeprop/sync/executor.hpp>
#include <pipeprop/sync/simulator.hpp>

#include <atomic>
#include <cblas.h>
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

namespace pp = pipeprop;
namespace ps = pipeprop::sync;
using pp::shape;

namespace {

using mlp = pp::network<shape<6>, pp::dense<8>, pp::relu, pp::dense<7>, pp::relu, pp::dense<4>>;
using cnn = pp::network<shape<2, 6, 6>, pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>, pp::relu, pp::max_pool2d<2>,
                        pp::flatten, pp::dense<3>>;

// A layer that uses its weight twice: input x = [x_a, x_b] (2N), output y = W x_a + W x_b (N), W [N, N] (tied
// weights, as in a siamese branch or a convolution). p1: dx_a = dx_b = W^T dy. p2: dW += dy x_a^T + dy x_b^T:
// both contributions, ADDED.
template <class T, class In>
struct tied_layer {
    static_assert(In::rank == 1 && In::size % 2 == 0);
    static constexpr std::size_t n = In::size / 2;
    using value_type = T;
    using input_shape = In;
    using output_shape = shape<n>;
    static constexpr std::size_t parameter_count = n * n;
    void init_parameters(std::span<T> w, std::uint64_t seed) const {
        std::mt19937_64 rng(seed);
        for (auto& v : w) v = pp::uniform<T>(rng, T(-0.6), T(0.6));
    }
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, pp::no_stash&, pp::no_workspace&) const {
        for (std::size_t s = 0; s < b; ++s)
            for (std::size_t i = 0; i < n; ++i) {
                T acc = 0;
                for (std::size_t k = 0; k < n; ++k) acc += w[i * n + k] * (x[s * 2 * n + k] + x[s * 2 * n + n + k]);
                y[s * n + i] = acc;
            }
    }
    void backward_input(std::span<const T> w, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const pp::no_stash&, pp::no_workspace&) const {
        for (std::size_t s = 0; s < b; ++s)
            for (std::size_t k = 0; k < n; ++k) {
                T acc = 0;
                for (std::size_t i = 0; i < n; ++i) acc += w[i * n + k] * dy[s * n + i];
                dx[s * 2 * n + k] = acc;
                dx[s * 2 * n + n + k] = acc;
            }
    }
    void backward_weight(std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b, const pp::no_stash&,
                         pp::no_workspace&) const {
        for (std::size_t s = 0; s < b; ++s)
            for (std::size_t i = 0; i < n; ++i)
                for (std::size_t k = 0; k < n; ++k) {
                    dw[i * n + k] += dy[s * n + i] * x[s * 2 * n + k];      // first use
                    dw[i * n + k] += dy[s * n + i] * x[s * 2 * n + n + k];  // second use
                }
    }
};
struct tied {
    template <class T, class In>
    using bind = tied_layer<T, In>;
};

}  // namespace

namespace {

using tied_net = pp::network<shape<8>, pp::dense<8>, pp::relu, tied, pp::relu, pp::dense<3>>;

template <class T>
struct batch_data {
    std::vector<T> x;
    std::vector<std::int32_t> y;
};

template <class Net, class T>
batch_data<T> make_batch(std::size_t batch, std::uint64_t seed) {
    using stack = pp::layer_stack<Net, T>;
    std::mt19937_64 rng(seed);
    batch_data<T> d;
    d.x.resize(batch * stack::input_shape::size);
    for (auto& v : d.x) v = pp::uniform<T>(rng, T(-1), T(1));
    for (std::size_t i = 0; i < batch; ++i) d.y.push_back(static_cast<std::int32_t>(rng() % stack::output_shape::size));
    return d;
}

constexpr double learning_rate = 0.05;
const pp::optim::sgd_config sgd_cfg{.nesterov = false};
// The hyperparameters of every update of the tests with sgd_cfg.
constexpr pp::optim::hyperparameters<double> hyper{.learning_rate = learning_rate, .momentum = 0.9, .weight_decay = 1e-3};
// Learning rate lr with momentum SGD's default momentum, no weight decay (executors built with default options).
constexpr pp::optim::hyperparameters<double> with_lr(double lr) {
    return {.learning_rate = lr, .momentum = pp::optim::sgd_config::default_momentum, .weight_decay = 0.0};
}
constexpr std::uint64_t init_seed = 42;

template <class T>
struct step_outputs {
    std::vector<T> gradient;  // of step 1
    std::vector<T> w1, w2;    // after steps 1 and 2
    double loss1 = 0;
};

// The reference: the sequential trainer on the whole batch, plus the whole-batch gradient of the initial weights.
template <class Net, class T>
step_outputs<T> run_reference(std::size_t batch, const batch_data<T>& b1, const batch_data<T>& b2) {
    pp::sequential_trainer<Net, T> tr({.max_batch = batch, .optimizer = sgd_cfg, .seed = init_seed});
    using stack_t = pp::layer_stack<Net, T>;
    stack_t stack;
    auto act = stack.make_activations(stack_t::all(), batch);
    auto ws = stack.make_workspaces(stack_t::all(), batch);
    step_outputs<T> out;
    out.gradient.assign(stack_t::parameter_count, T(0));
    std::copy(b1.x.begin(), b1.x.end(), act.input());
    const std::vector<T> w0(tr.parameters().begin(), tr.parameters().end());
    stack.forward(w0, act, batch, ws);
    pp::softmax_cross_entropy<T, stack_t::output_shape::size>::loss_and_gradient(act.output(), b1.y.data(), batch,
                                                                                 act.output_gradient());
    stack.backward(w0, out.gradient, act, batch, ws, false);
    out.loss1 = static_cast<double>(tr.train_batch(b1.x.data(), b1.y.data(), batch, hyper));
    out.w1.assign(tr.parameters().begin(), tr.parameters().end());
    tr.train_batch(b2.x.data(), b2.y.data(), batch, hyper);
    out.w2.assign(tr.parameters().begin(), tr.parameters().end());
    return out;
}

template <class Net, class T, ps::schedule_kind K, bool Two>
step_outputs<T> run_pipeline(const std::vector<std::size_t>& split, std::size_t m, std::size_t batch,
                             ps::executor_kind ek, const batch_data<T>& b1, const batch_data<T>& b2) {
    ps::pipeline_executor<Net, T, K, Two> ex(
        pp::partition_at(Net::layer_count, split),
        {.micro_batches = m, .max_batch = batch, .optimizer = sgd_cfg, .seed = init_seed, .executor = ek});
    step_outputs<T> out;
    const auto r = ex.step(b1.x, b1.y, hyper);
    CHECK(r.micro_batches == std::min(m, batch));
    out.loss1 = r.loss;
    out.gradient = ex.gradient();
    out.w1 = ex.parameters();
    ex.step(b2.x, b2.y, hyper);
    out.w2 = ex.parameters();
    return out;
}

using test_compare::bit_identical;
using test_compare::relative_difference;

using variants = boost::mp11::mp_list<
    boost::mp11::mp_list<std::integral_constant<ps::schedule_kind, ps::schedule_kind::gpipe>, std::false_type>,
    boost::mp11::mp_list<std::integral_constant<ps::schedule_kind, ps::schedule_kind::gpipe>, std::true_type>,
    boost::mp11::mp_list<std::integral_constant<ps::schedule_kind, ps::schedule_kind::one_f_one_b>, std::false_type>,
    boost::mp11::mp_list<std::integral_constant<ps::schedule_kind, ps::schedule_kind::one_f_one_b>, std::true_type>,
    boost::mp11::mp_list<std::integral_constant<ps::schedule_kind, ps::schedule_kind::zb_h1>, std::false_type>,
    boost::mp11::mp_list<std::integral_constant<ps::schedule_kind, ps::schedule_kind::zb_h1>, std::true_type>,
    boost::mp11::mp_list<std::integral_constant<ps::schedule_kind, ps::schedule_kind::zb_h2>, std::false_type>,
    boost::mp11::mp_list<std::integral_constant<ps::schedule_kind, ps::schedule_kind::zb_h2>, std::true_type>>;

struct config {
    std::vector<std::size_t> split;  // stage split points
    std::size_t m, batch;
};

// For every variant and config: matches the reference within tol (bit-identical when m == 1), the two executors
// agree bitwise, and every variant gives the bits of the first one.
template <class Net, class T>
void check_against_reference(const std::vector<config>& configs, double tol, bool both_executors) {
    for (const auto& c : configs) {
        const auto b1 = make_batch<Net, T>(c.batch, 100 + c.batch);
        const auto b2 = make_batch<Net, T>(c.batch, 200 + c.batch);
        const auto ref = run_reference<Net, T>(c.batch, b1, b2);
        std::vector<T> first_w2;
        boost::mp11::mp_for_each<variants>([&](auto v) {
            using V = decltype(v);
            constexpr ps::schedule_kind k = boost::mp11::mp_first<V>::value;
            constexpr bool two = boost::mp11::mp_second<V>::value;
            INFO(ps::name(k) << (two ? "+2bp" : "") << " p=" << c.split.size() + 1 << " m=" << c.m << " B=" << c.batch
                             << " T=" << (sizeof(T) == 4 ? "float" : "double"));
            const auto con = run_pipeline<Net, T, k, two>(c.split, c.m, c.batch, ps::executor_kind::concurrent, b1, b2);
            CHECK(relative_difference(con.gradient, ref.gradient) <= tol);
            CHECK(relative_difference(con.w1, ref.w1) <= tol);
            CHECK(relative_difference(con.w2, ref.w2) <= tol);
            CHECK(std::abs(con.loss1 - ref.loss1) <= tol * std::abs(ref.loss1) + 1e-12);
            if (c.m == 1) {
                CHECK(bit_identical(con.gradient, ref.gradient));
                CHECK(bit_identical(con.w2, ref.w2));
            }
            if (both_executors) {
                const auto seq =
                    run_pipeline<Net, T, k, two>(c.split, c.m, c.batch, ps::executor_kind::sequential, b1, b2);
                CHECK(bit_identical(seq.gradient, con.gradient));
                CHECK(bit_identical(seq.w2, con.w2));
            }
            if (first_w2.empty())
                first_w2 = con.w2;
            else
                CHECK(bit_identical(con.w2, first_w2));
        });
    }
}

}  // namespace

TEST_CASE("every schedule, with and without 2BP, equals the sequential trainer on the whole batch (MLP)",
          "[sync][executor][reference]") {
    openblas_set_num_threads(1);
    // p = 1..5; m < p; B not divisible by m; m = 1 (bit-identical to the reference).
    const std::vector<config> configs{
        {{}, 1, 8},     {{}, 3, 8},   {{2}, 4, 10},        {{1, 3}, 2, 7}, {{1, 2, 3, 4}, 3, 11},
        {{1, 3}, 1, 5}, {{2}, 3, 13}, {{1, 2, 3, 4}, 6, 6}};
    check_against_reference<mlp, float>(configs, 3e-6, true);
    check_against_reference<mlp, double>(configs, 1e-13, true);
}

TEST_CASE("every schedule equals the sequential trainer on a small CNN (conv, group_norm, pool)",
          "[sync][executor][reference][cnn]") {
    openblas_set_num_threads(1);
    const std::vector<config> configs{{{2}, 4, 10}, {{1, 4}, 2, 7}, {{3}, 3, 5}, {{1, 2, 3, 5}, 2, 4}};
    check_against_reference<cnn, float>(configs, 3e-6, false);
}

// The residual and transformer networks are left out of the sanitizer / baseline variants (tests/hardening.cmake):
// they are the heaviest instantiations of this file and add nothing those builds check that the MLP and CNN do not.
#ifndef PIPEPROP_HARDENING_VARIANT
TEST_CASE("every schedule, with and without 2BP, equals whole-batch SGD on a small ResNet cut inside its blocks",
          "[sync][executor][reference][graph]") {
    openblas_set_num_threads(1);
    // Boundaries before node 5 (inside the identity block's body), 13 and 16 (inside the projection block's body,
    // the skip tensor crossing two boundaries to reach the shortcut and add of the last stage).
    const std::vector<config> configs{{{5, 13, 16}, 3, 7}, {{13}, 4, 8}, {{4, 12}, 1, 3}};
    check_against_reference<test_nets::small_resnet, float>(configs, 3e-6, true);
    check_against_reference<test_nets::small_resnet, double>({{{5, 13, 16}, 3, 7}}, 1e-12, true);
}

TEST_CASE("every schedule equals whole-batch SGD on a pre-norm transformer cut inside its blocks",
          "[sync][executor][reference][transformer]") {
    openblas_set_num_threads(1);
    using net = pp::network<shape<4, 8>, pp::prenorm_transformer_block<2, 8>, pp::rms_norm<>, pp::flatten,
                            pp::dense<3>>;
    // Boundaries before node 2 (the attention, inside the first residual block) and 6 (the SwiGLU).
    check_against_reference<net, float>({{{2, 6}, 3, 7}, {{5}, 4, 8}}, 3e-6, true);
    check_against_reference<net, double>({{{2, 6}, 3, 7}}, 1e-12, true);
}

#endif

TEST_CASE("a weight used twice in a stage accumulates both contributions, with every schedule",
          "[sync][executor][p2]") {
    openblas_set_num_threads(1);
    // The layer itself against finite differences (p2 ADDS both uses).
    const auto chk = pp::testing::check_gradients(tied_layer<double, shape<8>>{}, {.batch = 3});
    INFO(chk.report);
    REQUIRE(chk.passed);
    // Through the pipeline: the executor's gradient of the tied weights equals central finite differences of the
    // whole-batch mean loss (independent of any backward code), for every schedule; m = 3 micro-batches of a batch
    // of 7 all hit the same weights.
    using stack_t = pp::layer_stack<tied_net, double>;
    const std::size_t batch = 7, m = 3;
    const auto b1 = make_batch<tied_net, double>(batch, 5);
    stack_t stack;
    auto act = stack.make_activations(stack_t::all(), batch);
    auto ws = stack.make_workspaces(stack_t::all(), batch);
    std::vector<double> w0(stack_t::parameter_count);
    stack.init_parameters(w0, init_seed);
    auto loss_at = [&](const std::vector<double>& w) {
        std::copy(b1.x.begin(), b1.x.end(), act.input());
        stack.forward(w, act, batch, ws);
        return pp::softmax_cross_entropy<double, 3>::loss(act.output(), b1.y.data(), batch);
    };
    const std::size_t first = stack_t::parameter_offset[2], count = stack_t::parameter_offset[3] - first;
    std::vector<double> numeric(count);
    for (std::size_t i = 0; i < count; ++i) {
        auto wp = w0, wm = w0;
        wp[first + i] += 1e-6;
        wm[first + i] -= 1e-6;
        numeric[i] = (loss_at(wp) - loss_at(wm)) / 2e-6;
    }
    boost::mp11::mp_for_each<variants>([&](auto v) {
        using V = decltype(v);
        constexpr ps::schedule_kind k = boost::mp11::mp_first<V>::value;
        constexpr bool two = boost::mp11::mp_second<V>::value;
        INFO(ps::name(k) << (two ? "+2bp" : ""));
        ps::pipeline_executor<tied_net, double, k, two> ex(pp::partition_at(5, {2, 3}),
                                                           {.micro_batches = m, .max_batch = batch, .seed = init_seed});
        ex.step(b1.x, b1.y, with_lr(0.0));
        const auto g = ex.gradient();
        const std::vector<double> tied_grad(g.begin() + static_cast<std::ptrdiff_t>(first),
                                            g.begin() + static_cast<std::ptrdiff_t>(first + count));
        CHECK(relative_difference(tied_grad, numeric) <= 1e-7);
    });
}

TEST_CASE("activation slots = the simulator's peak in-flight count, not m", "[sync][executor][memory]") {
    const std::size_t m = 8;
    auto slots_of = [&](auto tag, auto two) {
        constexpr ps::schedule_kind k = decltype(tag)::value;
        ps::pipeline_executor<mlp, float, k, decltype(two)::value> ex(pp::partition_at(5, {1, 3}),
                                                                      {.micro_batches = m, .max_batch = 16});
        const auto sim = ps::simulate(ex.current_schedule(), {ps::stage_costs{}});
        CHECK(ex.activation_slots() == sim.peak_in_flight);
        for (std::size_t s = 0; s < 3; ++s) {
            const auto one = pp::layer_stack<mlp, float>{}.make_activations(ex.ranges()[s], 2).bytes();
            CHECK(ex.stage_at(s).activation_bytes() == ex.activation_slots()[s] * one);
            CHECK(ex.stage_at(s).max_batch() == 2);
        }
        return ex.activation_slots();
    };
    using ps::schedule_kind;
    CHECK(slots_of(std::integral_constant<schedule_kind, schedule_kind::one_f_one_b>{}, std::false_type{}) ==
          std::vector<std::size_t>{3, 2, 1});
    CHECK(slots_of(std::integral_constant<schedule_kind, schedule_kind::gpipe>{}, std::true_type{}) ==
          std::vector<std::size_t>{8, 8, 8});
    CHECK(slots_of(std::integral_constant<schedule_kind, schedule_kind::zb_h1>{}, std::true_type{}) ==
          std::vector<std::size_t>{3, 3, 3});
    CHECK(slots_of(std::integral_constant<schedule_kind, schedule_kind::zb_h2>{}, std::true_type{}) ==
          std::vector<std::size_t>{5, 5, 5});
}

TEST_CASE("spans: each stage runs exactly its op list, respects the dependencies, p2 ends before the update",
          "[sync][executor][spans]") {
    openblas_set_num_threads(1);
    const std::size_t m = 5, batch = 9;
    const auto b1 = make_batch<mlp, float>(batch, 3);
    boost::mp11::mp_for_each<variants>([&](auto v) {
        using V = decltype(v);
        constexpr ps::schedule_kind k = boost::mp11::mp_first<V>::value;
        constexpr bool two = boost::mp11::mp_second<V>::value;
        INFO(ps::name(k) << (two ? "+2bp" : ""));
        ps::pipeline_executor<mlp, float, k, two> ex(pp::partition_at(5, {1, 3}),
                                                     {.micro_batches = m, .max_batch = batch});
        ex.step(b1.x, b1.y, with_lr(0.01));
        const auto spans = ex.spans();
        const auto& sc = ex.current_schedule();
        auto end_of = [&](std::size_t s, ps::span_kind kind, std::size_t j) {
            for (const auto& sp : spans)
                if (sp.stage == s && sp.kind == kind && sp.micro_batch == j) return sp.end;
            FAIL("span not found");
            return 0.0;
        };
        for (std::size_t s = 0; s < 3; ++s) {
            std::vector<ps::op_span> mine;
            for (const auto& sp : spans)
                if (sp.stage == s) mine.push_back(sp);
            REQUIRE(mine.size() == sc.ops[s].size() + 1);
            double prev_end = 0, last_p2 = 0;
            for (std::size_t i = 0; i < mine.size(); ++i) {
                const auto& sp = mine[i];
                CHECK(sp.start >= prev_end);
                CHECK(sp.end >= sp.start);
                prev_end = sp.end;
                if (i + 1 == mine.size()) {
                    CHECK(sp.kind == ps::span_kind::optimizer);
                    CHECK(sp.start >= last_p2);
                    continue;
                }
                const auto o = sc.ops[s][i];
                CHECK(sp.kind == ps::span_kind_of(o.kind));
                CHECK(sp.micro_batch == o.micro_batch);
                if (ps::releases_micro_batch(o)) last_p2 = sp.end;
                if (o.kind == ps::op_kind::forward && s > 0)
                    CHECK(sp.start >= end_of(s - 1, ps::span_kind::forward, o.micro_batch));
                if (ps::is_backward_p1(o) && s < 2)
                    CHECK(sp.start >= end_of(s + 1, two ? ps::span_kind::backward_input : ps::span_kind::backward_fused,
                                             o.micro_batch));
            }
        }
    });
}

TEST_CASE("run to run bit-identical; static layout; a batch smaller than m is handled", "[sync][executor]") {
    openblas_set_num_threads(1);
    using layout = pp::pipeline_layout<mlp, pp::split_at<2, 4>, float>;
    const ps::executor_options opt{.micro_batches = 4, .max_batch = 12, .optimizer = sgd_cfg, .seed = 7};
    auto a = ps::pipeline_executor<mlp, float, ps::schedule_kind::one_f_one_b, true>::for_layout<layout>(opt);
    ps::pipeline_executor<mlp, float, ps::schedule_kind::one_f_one_b, true> b(pp::partition_at(5, {2, 4}), opt);
    for (std::size_t step = 0; step < 3; ++step) {
        const auto d = make_batch<mlp, float>(12, 50 + step);
        const auto ra = a->step(d.x, d.y, hyper), rb = b.step(d.x, d.y, hyper);
        CHECK(ra.loss == rb.loss);
    }
    CHECK(bit_identical(a->parameters(), b.parameters()));
    CHECK(bit_identical(a->velocity(), b.velocity()));
    CHECK(a->steps() == 3);
    // B = 3 < m = 4 (e.g. the last batch of an epoch): runs with 3 micro-batches of one sample, equal to the reference.
    const auto small1 = make_batch<mlp, float>(3, 1), small2 = make_batch<mlp, float>(3, 2);
    const auto got = run_pipeline<mlp, float, ps::schedule_kind::zb_h1, true>(
        {1, 3}, 4, 3, ps::executor_kind::concurrent, small1, small2);
    const auto ref = run_reference<mlp, float>(3, small1, small2);
    CHECK(relative_difference(got.w2, ref.w2) <= 3e-6);
}

namespace {
std::atomic<bool> fail_forward{false};
template <class T, class In>
struct failing_layer {
    using value_type = T;
    using input_shape = In;
    using output_shape = In;
    static constexpr std::size_t parameter_count = 0;
    void forward(std::span<const T>, const T* x, T* y, std::size_t b, pp::no_stash&, pp::no_workspace&) const {
        if (fail_forward) throw std::runtime_error("failing_layer: injected failure");
        std::copy(x, x + b * In::size, y);
    }
    void backward_input(std::span<const T>, const T*, const T*, const T* dy, T* dx, std::size_t b, const pp::no_stash&,
                        pp::no_workspace&) const {
        std::copy(dy, dy + b * In::size, dx);
    }
};
struct failing {
    template <class T, class In>
    using bind = failing_layer<T, In>;
};
}  // namespace

TEST_CASE("bad input is rejected with a precise message; a failing layer is reported, not hung on",
          "[sync][executor][errors]") {
    openblas_set_num_threads(1);
    using ex_t = ps::pipeline_executor<mlp, float, ps::schedule_kind::gpipe, true>;
    ex_t ex(pp::partition_at(5, {2}), {.micro_batches = 4, .max_batch = 8});
    const auto d = make_batch<mlp, float>(8, 1);
    CHECK_THROWS_WITH(ex.step(std::span<const float>(), std::span<const std::int32_t>(), with_lr(0.1)),
                      Catch::Contains("empty batch"));
    const auto big = make_batch<mlp, float>(9, 1);
    CHECK_THROWS_WITH(ex.step(big.x, big.y, with_lr(0.1)), Catch::Contains("9 samples exceeds max_batch = 8"));
    CHECK_THROWS_WITH(ex.step(std::span<const float>(d.x).first(40), d.y, with_lr(0.1)), Catch::Contains("expected B x 6 = 48"));
    auto bad = d;
    bad.y[5] = 4;
    CHECK_THROWS_AS(ex.step(bad.x, bad.y, with_lr(0.1)), std::out_of_range);
    CHECK_THROWS_WITH(ex.step(bad.x, bad.y, with_lr(0.1)), Catch::Contains("label 4 of sample 5"));
    // the step's hyperparameters, checked by the optimizer before any work (the field named)
    CHECK_THROWS_WITH(ex.step(d.x, d.y, with_lr(std::nan(""))), Catch::Contains("pipeprop::optim::sgd: learning_rate"));
    CHECK_THROWS_WITH(ex.step(d.x, d.y, {.learning_rate = 0.1, .momentum = 1.0}),
                      Catch::Contains("momentum = 1.000000 must be in [0, 1)"));
    CHECK_THROWS_WITH(ex.step(d.x, d.y, {.learning_rate = 0.1, .momentum = 0.9, .weight_decay = -1.0}),
                      Catch::Contains("weight_decay = -1.000000"));
    CHECK(ex.steps() == 0);
    CHECK_NOTHROW(ex.step(d.x, d.y, with_lr(0.1)));
    CHECK_THROWS_WITH(ex_t(pp::partition_at(5, {2}), {.micro_batches = 0, .max_batch = 8}),
                      Catch::Contains("micro_batches must be >= 1"));
    // the one partition check of every engine (pipeprop::check_partition)
    CHECK_THROWS_WITH(ex_t({{0, 2}, {3, 5}}, {.micro_batches = 2, .max_batch = 8}),
                      Catch::Contains("pipeprop::sync::pipeline_executor: stage 1 covers layers [3, 5)"));
    CHECK_THROWS_WITH(ex_t({{0, 2}}, {.micro_batches = 2, .max_batch = 8}),
                      Catch::Contains("the stages end at layer 2 but the network has 5 layers"));

    using fail_net = pp::network<shape<6>, pp::dense<5>, failing, pp::dense<3>>;
    for (auto ek : {ps::executor_kind::concurrent, ps::executor_kind::sequential}) {
        ps::pipeline_executor<fail_net, float, ps::schedule_kind::one_f_one_b, true> fx(
            pp::partition_at(3, {1, 2}), {.micro_batches = 3, .max_batch = 6, .executor = ek});
        const auto fd = make_batch<fail_net, float>(6, 2);
        fail_forward = true;
        CHECK_THROWS_WITH(fx.step(fd.x, fd.y, with_lr(0.1)), Catch::Contains("injected failure"));
        fail_forward = false;
        const auto r = fx.step(fd.x, fd.y, with_lr(0.1));  // the executor recovers: channels and graph are reset
        CHECK(std::isfinite(r.loss));
    }
}

TEST_CASE("global reductions: the gradient norm and clipping are over all stages; results do not depend on the cut",
          "[sync][executor][global]") {
    openblas_set_num_threads(1);
    const std::size_t batch = 11, m = 3;
    const auto b1 = make_batch<mlp, double>(batch, 21), b2 = make_batch<mlp, double>(batch, 22);
    const auto ref = run_reference<mlp, double>(batch, b1, b2);
    double ref_norm = 0;
    for (double g : ref.gradient) ref_norm += g * g;
    ref_norm = std::sqrt(ref_norm);
    // Cuts into 1, 2, 3 and 5 stages give the same bits (docs/pitfalls.md item 5) and report the same global norm.
    std::vector<double> first;
    for (const std::vector<std::size_t>& split :
         {std::vector<std::size_t>{}, std::vector<std::size_t>{2}, std::vector<std::size_t>{1, 3},
          std::vector<std::size_t>{1, 2, 3, 4}}) {
        ps::pipeline_executor<mlp, double, ps::schedule_kind::zb_h1, true> ex(
            pp::partition_at(5, split), {.micro_batches = m, .max_batch = batch, .optimizer = sgd_cfg, .seed = init_seed});
        const auto r = ex.step(b1.x, b1.y, hyper);
        CHECK(r.gradient_norm == Approx(ref_norm).epsilon(1e-12));
        if (first.empty())
            first = ex.parameters();
        else
            CHECK(bit_identical(ex.parameters(), first));
    }
    // Clipping to half the global norm: every stage's gradient is scaled by the same factor (a per-stage clip
    // would scale each stage by its own norm). Plain SGD (momentum 0) so that w1 = w0 - lr * c * g.
    const double max_norm = ref_norm / 2;
    ps::pipeline_executor<mlp, double, ps::schedule_kind::one_f_one_b, true> ex(pp::partition_at(5, {1, 3}),
                                                                                {.micro_batches = m,
                                                                                 .max_batch = batch,
                                                                                 .optimizer = {.nesterov = false},
                                                                                 .seed = init_seed,
                                                                                 .max_gradient_norm = max_norm});
    const auto w0 = ex.parameters();
    const auto r = ex.step(b1.x, b1.y, {.learning_rate = learning_rate, .momentum = 0.0, .weight_decay = 0.0});
    CHECK(r.gradient_norm == Approx(ref_norm).epsilon(1e-12));
    const auto w1 = ex.parameters();
    double max_err = 0;
    for (std::size_t i = 0; i < w0.size(); ++i)
        max_err = std::max(max_err, std::abs(w1[i] - (w0[i] - learning_rate * 0.5 * ref.gradient[i])));
    CHECK(max_err <= 1e-14);
    const auto spans = ex.spans();
    CHECK(std::count_if(spans.begin(), spans.end(),
                        [](const auto& sp) { return sp.kind == ps::span_kind::optimizer; }) == 3);
    CHECK_THROWS_WITH((ps::pipeline_executor<mlp, double, ps::schedule_kind::gpipe, true>(
                          pp::partition_at(5, {2}), {.micro_batches = 2, .max_batch = 4, .max_gradient_norm = -1})),
                      Catch::Contains("max_gradient_norm"));
}

TEST_CASE("any_executor: the run-time choice of schedule runs the same executor", "[sync][executor]") {
    openblas_set_num_threads(1);
    const auto b1 = make_batch<mlp, float>(10, 31), b2 = make_batch<mlp, float>(10, 32);
    const ps::executor_options opt{.micro_batches = 4, .max_batch = 10, .optimizer = sgd_cfg, .seed = init_seed};
    auto any = ps::make_any_executor<mlp, float>(ps::schedule_kind::zb_h2, true, pp::partition_at(5, {2}), opt);
    ps::pipeline_executor<mlp, float, ps::schedule_kind::zb_h2, true> fixed(pp::partition_at(5, {2}), opt);
    for (const auto* d : {&b1, &b2}) {
        any->step(d->x, d->y, hyper);
        fixed.step(d->x, d->y, hyper);
    }
    CHECK(bit_identical(any->parameters(), fixed.parameters()));
    CHECK(any->current_schedule().label() == "zb_h2+2bp");
    CHECK(any->activation_slots() == fixed.activation_slots());
}
