// Virtual stages (sync/schedule.hpp): interleaved 1F1B (Megatron-LM) and ZB-V, several stages per
// device, in the generator, the simulator and the executor.
// - generators: valid for every tested (devices, chunks, m) the generators accept (m a multiple of the devices or
//   below it for interleaved 1F1B; any m for ZB-V), with and without 2BP; the placement (stage c p + d on device d;
//   ZB-V: stages d and 2p - 1 - d on device d); the refusals (odd stage count for ZB-V, m that Megatron-LM refuses);
// - simulator: interleaved 1F1B's makespan is Megatron-LM's (m v + p - 1)(T_F + T_BW) of one chunk (bubble 1/v of
//   1F1B's on the same model); ZB-V with T_F = T_B = T_W has no bubble in the steady state (ZB-paper §6) and p - 1
//   chunk ops of start-up in one step with a barrier, and beats 1F1B and ZB-H1 on the same model;
// - executor: every virtual schedule, 2BP on and off, both executors: one step equals the sequential trainer on the
//   whole batch (float 3e-6 relative, double 1e-12) and is bitwise equal to GPipe with the same m (each stage runs
//   its backward-p2 ops in micro-batch order in every schedule);
// - a tiny LLaMA-like transformer (token loss): one step of EVERY schedule (all six), 2BP on and off, equals
//   whole-batch training: the gradient and loss with AdamW, the weights after two steps with momentum SGD.
#include <catch2/catch.hpp>

#include "unit/vector_compare.hpp"

#include <pipeprop/pipeprop.hpp>
#include <pipeprop/layers/conv2d.hpp>
#include <pipeprop/layers/group_norm.hpp>
#include <pipeprop/loss/token_cross_entropy.hpp>
#include <pipeprop/optim/adamw.hpp>
#include <pipeprop/sequential_trainer.hpp>
#include <pipeprop/sync/any_executor.hpp>
#include <pipeprop/sync/simulator.hpp>

#include <cblas.h>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace pp = pipeprop;
namespace ps = pipeprop::sync;
using pp::shape;

namespace {

using test_compare::bit_identical;
using test_compare::relative_difference;

using cnn = pp::network<shape<2, 6, 6>, pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>, pp::relu, pp::flatten,
                        pp::dense<5>, pp::relu, pp::dense<3>>;

template <class T>
struct batch {
    std::vector<T> x;
    std::vector<std::int32_t> y;
};
template <class T>
batch<T> images(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    batch<T> d;
    for (std::size_t i = 0; i < n * 72; ++i) d.x.push_back(pp::uniform<T>(rng, T(-1), T(1)));
    for (std::size_t i = 0; i < n; ++i) d.y.push_back(static_cast<std::int32_t>(rng() % 3));
    return d;
}

constexpr pp::optim::hyperparameters<double> sgd_step{.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 1e-3};

// One virtual-schedule configuration of the executor test.
struct config {
    ps::schedule_kind kind;
    std::vector<std::size_t> split;  // stage cut of cnn (7 layers)
    std::size_t chunks, m, batch;
};

template <class T>
void check_virtual_against_reference(const config& c, double tolerance) {
    const auto b1 = images<T>(c.batch, 100 + c.batch), b2 = images<T>(c.batch, 200 + c.batch);
    pp::sequential_trainer<cnn, T> tr({.max_batch = c.batch, .seed = 42});
    tr.train_batch(b1.x.data(), b1.y.data(), c.batch, sgd_step);
    const std::vector<T> w1_ref(tr.parameters().begin(), tr.parameters().end());
    tr.train_batch(b2.x.data(), b2.y.data(), c.batch, sgd_step);
    const std::vector<T> w2_ref(tr.parameters().begin(), tr.parameters().end());
    const auto cut = pp::partition_at(cnn::layer_count, c.split);
    for (const bool two : {false, true}) {
        typename ps::schedule_executor<cnn, T>::options_type o;
        o.micro_batches = c.m;
        o.max_batch = c.batch;
        o.seed = 42;
        o.chunks = c.chunks;
        o.executor = pp::executor_kind::sequential;
        ps::schedule_executor<cnn, T> gpipe(ps::schedule_kind::gpipe, two, cut, o);
        gpipe.step(b1.x, b1.y, sgd_step);
        const auto w1_gpipe = gpipe.parameters();
        gpipe.step(b2.x, b2.y, sgd_step);
        const auto w2_gpipe = gpipe.parameters();
        for (const auto ek : {pp::executor_kind::sequential, pp::executor_kind::concurrent}) {
            INFO(ps::name(c.kind) << (two ? "+2bp" : "") << " on " << cut.size() << " stages, v = " << c.chunks
                                  << ", m = " << c.m << ", B = " << c.batch << ", " << pp::to_string(ek));
            o.executor = ek;
            ps::schedule_executor<cnn, T> ex(c.kind, two, cut, o);
            const auto& sc = ex.current_schedule();
            CHECK(sc.devices() == (c.kind == ps::schedule_kind::zb_v ? cut.size() / 2 : cut.size() / c.chunks));
            ex.step(b1.x, b1.y, sgd_step);
            const auto w1 = ex.parameters();
            CHECK(relative_difference(w1, w1_ref) <= tolerance);
            CHECK(bit_identical(w1, w1_gpipe));
            ex.step(b2.x, b2.y, sgd_step);
            const auto w2 = ex.parameters();
            CHECK(relative_difference(w2, w2_ref) <= tolerance);
            CHECK(bit_identical(w2, w2_gpipe));
        }
    }
}

// A tiny LLaMA-like model: token ids [6] -> embedding [6, 8] -> pre-norm block -> RMSNorm -> LM head [6, 11]: 8
// layers, cut inside the block.
using lm = pp::network<shape<6>, pp::token_embedding<11, 8>, pp::prenorm_transformer_block<2, 12>, pp::rms_norm<>,
                       pp::token_linear<11, false>>;
template <class T>
using lm_loss = pp::token_cross_entropy<T, 6, 11, 0>;

template <class T>
batch<T> tokens(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    batch<T> d;
    for (std::size_t i = 0; i < n * 6; ++i) d.x.push_back(static_cast<T>(rng() % 11));
    for (std::size_t i = 0; i < n * 6; ++i) d.y.push_back(static_cast<std::int32_t>(rng() % 11));  // 0: ignored
    return d;
}

// The whole-batch mean-loss gradient of the initial weights (seed), computed on the layer stack directly.
template <class T>
std::vector<T> whole_batch_gradient(const batch<T>& b, std::size_t n, std::uint64_t seed, double& loss) {
    using stack_t = pp::layer_stack<lm, T>;
    stack_t stack;
    auto act = stack.make_activations(stack_t::all(), n);
    auto ws = stack.make_workspaces(stack_t::all(), n);
    std::vector<T> w(stack_t::parameter_count), g(stack_t::parameter_count, T(0));
    stack.init_parameters(w, seed);
    std::copy(b.x.begin(), b.x.end(), act.input());
    stack.forward(w, act, n, ws);
    const std::size_t counted = lm_loss<T>::count_targets(b.y.data(), n);
    const auto totals = lm_loss<T>::totals_and_gradient(act.output(), b.y.data(), n, act.output_gradient(),
                                                        T(1) / static_cast<T>(counted));
    loss = totals.loss_sum / static_cast<double>(counted);
    stack.backward(w, g, act, n, ws, false);
    return g;
}


template <class T>
void check_transformer_every_schedule(double tolerance) {
    constexpr std::size_t n = 8, m = 4;
    const auto b1 = tokens<T>(n, 5), b2 = tokens<T>(n, 6);
    double loss_ref = 0;
    const auto g_ref = whole_batch_gradient<T>(b1, n, 3, loss_ref);
    // momentum SGD on the whole batch: the weights after two steps
    pp::sequential_trainer<lm, T, lm_loss<T>> tr({.max_batch = n, .seed = 3});
    tr.train_batch(b1.x.data(), b1.y.data(), n, sgd_step);
    tr.train_batch(b2.x.data(), b2.y.data(), n, sgd_step);
    const std::vector<T> w2_ref(tr.parameters().begin(), tr.parameters().end());
    constexpr std::size_t layers = pp::layer_stack<lm, T>::layer_count;
    // 4 stages cut inside the block (before the attention, before the SwiGLU residual, before the final norm)
    for (const auto& split : {std::vector<std::size_t>{3, 5}, std::vector<std::size_t>{1, 3, 5}})
        for (const auto kind : ps::all_schedule_kinds)
            for (const bool two : {false, true}) {
                const auto cut = pp::partition_at(layers, split);
                if (!ps::schedule_accepts(kind, cut.size(), m)) continue;
                INFO(ps::name(kind) << (two ? "+2bp" : "") << " on " << cut.size() << " stages");
                typename ps::schedule_executor<lm, T, lm_loss<T>, pp::optim::adamw<T>>::options_type oa;
                oa.micro_batches = m;
                oa.max_batch = n;
                oa.seed = 3;
                oa.optimizer = {.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8};
                ps::schedule_executor<lm, T, lm_loss<T>, pp::optim::adamw<T>> adamw(kind, two, cut, oa);
                const auto r = adamw.step(b1.x, b1.y, {.learning_rate = 0.01, .momentum = 0, .weight_decay = 0.01});
                CHECK(relative_difference(adamw.gradient(), g_ref) <= tolerance);
                CHECK(r.loss == Approx(loss_ref).epsilon(tolerance));
                typename ps::schedule_executor<lm, T, lm_loss<T>>::options_type os;
                os.micro_batches = m;
                os.max_batch = n;
                os.seed = 3;
                ps::schedule_executor<lm, T, lm_loss<T>> sgd(kind, two, cut, os);
                sgd.step(b1.x, b1.y, sgd_step);
                sgd.step(b2.x, b2.y, sgd_step);
                CHECK(relative_difference(sgd.parameters(), w2_ref) <= tolerance);
            }
}

}  // namespace

TEST_CASE("virtual-stage generators: valid, placed as documented, refusing what they cannot run",
          "[sync][virtual][schedule]") {
    for (std::size_t p = 1; p <= 5; ++p)
        for (std::size_t v = 1; v <= 3; ++v)
            for (std::size_t m = 1; m <= 3 * p; ++m) {
                if (m > p && m % p != 0) {
                    CHECK_THROWS_WITH(ps::interleaved_1f1b(p * v, v, m, true), Catch::Contains("multiple"));
                    continue;
                }
                for (const bool two : {false, true}) {
                    INFO("interleaved p = " << p << ", v = " << v << ", m = " << m << ", 2bp " << two);
                    const auto sc = ps::interleaved_1f1b(p * v, v, m, two);
                    REQUIRE_NOTHROW(ps::validate(sc));
                    CHECK(sc.devices() == p);
                    for (std::size_t s = 0; s < p * v; ++s) CHECK(sc.device_of_stage(s) == s % p);
                }
            }
    CHECK_THROWS_AS(ps::interleaved_1f1b(5, 2, 4, true), std::invalid_argument);
    // schedule_accepts says exactly which (kind, stages, m) the generators take
    for (const auto kind : ps::all_schedule_kinds)
        for (std::size_t stages = 1; stages <= 8; ++stages)
            for (std::size_t m = 1; m <= 9; ++m) {
                bool generated = true;
                try {
                    (void)ps::make_schedule(kind, stages, m, true);
                } catch (const std::invalid_argument&) {
                    generated = false;
                }
                CHECK(ps::schedule_accepts(kind, stages, m) == generated);
            }
    for (std::size_t p = 1; p <= 6; ++p)
        for (std::size_t m = 1; m <= 4 * p; ++m)
            for (const bool two : {false, true}) {
                INFO("zb_v p = " << p << ", m = " << m << ", 2bp " << two);
                const auto sc = ps::zb_v(2 * p, m, two);
                REQUIRE_NOTHROW(ps::validate(sc));
                CHECK(sc.devices() == p);
                for (std::size_t d = 0; d < p; ++d) {
                    CHECK(sc.device_of_stage(d) == d);
                    CHECK(sc.device_of_stage(2 * p - 1 - d) == d);
                }
                // ZB-V keeps 1F1B's activation memory: at most 2p chunk micro-batches (p stages' worth) alive on a
                // device at once (from its F to its W, or BW without 2BP), counted along the device's order
                for (std::size_t d = 0; d < p; ++d) {
                    std::vector<std::size_t> next(2 * p, 0);
                    std::size_t alive = 0, peak = 0;
                    for (const std::size_t st : sc.device_order[d]) {
                        const ps::op o = sc.ops[st][next[st]++];
                        if (o.kind == ps::op_kind::forward) peak = std::max(peak, ++alive);
                        if (ps::releases_micro_batch(o)) --alive;
                    }
                    CHECK(peak <= 2 * p);
                }
            }
    CHECK_THROWS_WITH(ps::zb_v(5, 4, true), Catch::Contains("even number of stages"));
    CHECK(ps::parse_schedule_kind("interleaved_1f1b") == ps::schedule_kind::interleaved_1f1b);
    CHECK(ps::parse_schedule_kind("zb_v") == ps::schedule_kind::zb_v);
    // a device order that names a stage of another device, or runs too few ops
    auto bad = ps::zb_v(4, 4, true);
    bad.device_order[0][0] = 1;
    CHECK_THROWS_WITH(ps::validate(bad), Catch::Contains("not on that device"));
    bad = ps::zb_v(4, 4, true);
    bad.device_order[1].pop_back();
    CHECK_THROWS_WITH(ps::validate(bad), Catch::Contains("device order runs"));
}

TEST_CASE("virtual stages in the simulator: Megatron-LM's interleaved bubble, ZB-V's zero steady-state bubble",
          "[sync][virtual][simulator]") {
    for (const std::size_t p : {2u, 3u, 4u})
        for (const std::size_t v : {2u, 3u})
            for (const std::size_t m : {p, 2 * p, 4 * p}) {
                INFO("p = " << p << ", v = " << v << ", m = " << m);
                // chunk costs T_F = 1, T_BW = 2; 1F1B on p stages of v chunks each: T_F = v, T_BW = 2v
                const ps::stage_costs chunk{.forward = 1, .backward_input = 1, .backward_weight = 1, .optimizer = 0};
                const ps::stage_costs whole{.forward = double(v), .backward_input = double(v),
                                            .backward_weight = double(v), .optimizer = 0};
                const auto il = ps::simulate(ps::interleaved_1f1b(p * v, v, m, false), {chunk});
                const auto ofob = ps::simulate(ps::one_f_one_b(p, m, false), {whole});
                CHECK(il.makespan == double((m * v + p - 1) * 3));
                CHECK(ofob.makespan == double((m + p - 1) * 3 * v));
                CHECK(il.busy.size() == p);
                for (std::size_t d = 0; d < p; ++d) CHECK(il.idle[d] == double((p - 1) * 3));  // 1/v of 1F1B's
            }
    for (const std::size_t p : {2u, 3u, 4u, 5u})
        for (const std::size_t m : {2 * p, 3 * p, 4 * p}) {
            INFO("p = " << p << ", m = " << m);
            const ps::stage_costs chunk{.forward = 1, .backward_input = 1, .backward_weight = 1, .optimizer = 0};
            const ps::stage_costs whole{.forward = 2, .backward_input = 2, .backward_weight = 2, .optimizer = 0};
            const auto zbv = ps::zb_v(2 * p, m, true);
            const auto one = ps::simulate(zbv, {chunk});
            CHECK(one.makespan == double(6 * m + p - 1));
            const auto steady = ps::simulate(zbv, {chunk}, {.steps = 3, .barrier = false});
            CHECK(steady.step_time == double(6 * m));  // no bubble
            for (const double idle : steady.idle) CHECK(idle == 0.0);
            CHECK(one.makespan < ps::simulate(ps::zb_h1(p, m, true), {whole}).makespan);
            CHECK(one.makespan < ps::simulate(ps::one_f_one_b(p, m, true), {whole}).makespan);
        }
}

TEST_CASE("every virtual schedule equals whole-batch SGD and GPipe's bits, both executors",
          "[sync][virtual][executor][reference]") {
    openblas_set_num_threads(1);
    using k = ps::schedule_kind;
    // cnn has 7 layers: conv, group_norm, relu, flatten, dense, relu, dense
    const std::vector<config> configs{
        {k::interleaved_1f1b, {1, 2, 4}, 2, 4, 10},     // 4 stages on 2 devices, m a multiple of p, B % m != 0
        {k::interleaved_1f1b, {1, 2, 4, 5, 6}, 3, 2, 7},  // 6 stages, 3 chunks on 2 devices
        {k::interleaved_1f1b, {2}, 2, 3, 9},             // one device holding both stages
        {k::zb_v, {1, 2, 4}, 2, 4, 10},                  // 2 devices
        {k::zb_v, {1, 2, 4, 5, 6}, 2, 5, 11},            // 3 devices, m < 2p - 1
        {k::zb_v, {1, 2, 4, 5, 6}, 2, 8, 8},
    };
    for (const auto& c : configs) check_virtual_against_reference<float>(c, 3e-6);
    check_virtual_against_reference<double>(configs[0], 1e-12);
    check_virtual_against_reference<double>(configs[4], 1e-12);
}

TEST_CASE("a tiny LLaMA-like transformer: one step of every schedule equals whole-batch training",
          "[sync][virtual][transformer][reference]") {
    openblas_set_num_threads(1);
    check_transformer_every_schedule<float>(3e-6);
    check_transformer_every_schedule<double>(1e-12);
}

TEST_CASE("every batch size up to max_batch fits the buffers, every schedule, 2BP on and off",
          "[sync][virtual][executor]") {
    // A smaller m can need more slots on a stage than the full one (interleaved 1F1B's warm-up on 3 devices: stage
    // 5 holds 2 micro-batches at m = 2, 1 at m = 6): the executor sizes its buffers for every m a step can use.
    openblas_set_num_threads(1);
    for (const auto& split : {std::vector<std::size_t>{1, 2, 3, 4, 5}, std::vector<std::size_t>{1, 2, 4}})
        for (const auto kind : ps::all_schedule_kinds)
            for (const bool two : {false, true}) {
                const auto cut = pp::partition_at(cnn::layer_count, split);
                if (!ps::schedule_accepts(kind, cut.size(), 6)) continue;
                ps::schedule_executor<cnn, float>::options_type o;
                o.micro_batches = 6;
                o.max_batch = 12;
                o.seed = 42;
                ps::schedule_executor<cnn, float> ex(kind, two, cut, o), gpipe(ps::schedule_kind::gpipe, two, cut, o);
                for (std::size_t n = 1; n <= 12; ++n) {
                    INFO(ps::name(kind) << (two ? "+2bp" : "") << " on " << cut.size() << " stages, B = " << n);
                    const auto b = images<float>(n, 60 + n);
                    REQUIRE_NOTHROW(ex.step(b.x, b.y, sgd_step));
                    gpipe.step(b.x, b.y, sgd_step);
                    if (kind != ps::schedule_kind::interleaved_1f1b)  // (interleaved may round m down)
                        CHECK(bit_identical(ex.parameters(), gpipe.parameters()));
                    else
                        CHECK(relative_difference(ex.parameters(), gpipe.parameters()) <= 3e-6);
                }
            }
}

TEST_CASE("short batches on virtual stages: fewer samples than m still give whole-batch SGD", "[sync][virtual][executor]") {
    openblas_set_num_threads(1);
    const auto cut = pp::partition_at(cnn::layer_count, {1, 2, 4});  // 4 stages, 2 devices
    for (const auto kind : {ps::schedule_kind::interleaved_1f1b, ps::schedule_kind::zb_v})
        for (const std::size_t n : {1u, 3u, 5u}) {  // interleaved: m' = 1, 2 (3 rounded down to 2 devices), 4
            INFO(ps::name(kind) << ", B = " << n);
            const auto b = images<float>(n, 40 + n);
            pp::sequential_trainer<cnn, float> tr({.max_batch = 10, .seed = 42});
            tr.train_batch(b.x.data(), b.y.data(), n, sgd_step);
            const std::vector<float> w_ref(tr.parameters().begin(), tr.parameters().end());
            ps::schedule_executor<cnn, float>::options_type o;
            o.micro_batches = 6;
            o.max_batch = 10;
            o.seed = 42;
            ps::schedule_executor<cnn, float> ex(kind, true, cut, o);
            const auto r = ex.step(b.x, b.y, sgd_step);
            CHECK(r.micro_batches == (kind == ps::schedule_kind::zb_v ? std::min<std::size_t>(n, 6)
                                                                      : n <= 2 ? n : n - n % 2));
            CHECK(relative_difference(ex.parameters(), w_ref) <= 3e-6);
        }
}
