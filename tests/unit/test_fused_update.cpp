// Backward-p2 fused into the momentum update at b = 1 (dense_layer::backward_weight_momentum_update,
// layer_stack::backward_momentum_update, the sequential trainer and the PB stages): the same bits as backward-p2
// into a zeroed gradient followed by optim::momentum_update, for the layer, for stacks with conv2d, group norm,
// residual blocks and several dense layers (whole network and stage ranges), over several trainer steps with
// heavy-ball, Nesterov and weight decay, in float and double; inputs include +0, -0 and subnormal-free random values.
// Which parts of a block the fused pass leaves to the optimizer (unfused_parameter_runs), which PB stages fuse, and a
// PB stage's fused backward + update against its unfused ones for five policies.
#include <catch2/catch.hpp>

#include <pipeprop/pb/stage_state.hpp>
#include <pipeprop/pipeprop.hpp>
#include <pipeprop/sequential_trainer.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace {

namespace pp = pipeprop;
using pp::shape;

using mlp = pp::network<shape<13>, pp::dense<37>, pp::relu, pp::dense<19>, pp::relu, pp::dense<3>>;
using cnn = pp::network<shape<2, 6, 6>, pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>, pp::relu, pp::max_pool2d<2>,
                        pp::flatten, pp::dense<11>, pp::relu, pp::dense<3>>;
using with_block = pp::network<shape<6>, pp::dense<6>, pp::residual<pp::dense<5>, pp::relu, pp::dense<6>>, pp::relu,
                               pp::dense<4>>;
// No layer fuses its p2 (no dense layer): at b = 1 every update is applied layer by layer from the gradient; the
// second with stateful layers (Online Normalization) inside the block's run of carried nodes.
using conv_only = pp::network<shape<1, 6, 6>, pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>, pp::relu,
                              pp::residual<pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>, pp::relu>, pp::global_avg_pool>;
using conv_only_on =
    pp::network<shape<1, 6, 6>, pp::conv2d<4, 3, 1, 1>, pp::online_norm<>, pp::relu,
                pp::residual<pp::conv2d<4, 3, 1, 1>, pp::online_norm<>, pp::relu>, pp::global_avg_pool>;

// Values in U(-1, 1) with every 7th an exact +0 and every 11th a -0 (the sign of a zero gradient must match too).
template <class T>
std::vector<T> values(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<T> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = i % 7 == 3 ? T(0) : i % 11 == 5 ? -T(0) : static_cast<T>(u(rng));
    return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
std::vector<pp::optim::update_coefficients<T>> coefficient_sets() {
    return {pp::optim::heavy_ball<T>(T(0.05), T(0.9), T(0)), pp::optim::heavy_ball<T>(T(0.1), T(0.5), T(1e-3)),
            pp::optim::nesterov<T>(T(0.03), T(0.9), T(5e-4)),
            pp::optim::spike_compensation<T>(T(0.02), T(0.9), T(1e-4), 6), pp::optim::heavy_ball<T>(T(0.1), T(0), T(0))};
}

template <class T>
void check_dense_layer() {
    using layer = pp::dense_layer<T, shape<37>, 13>;  // rows of 37: vector body and scalar tail on every width
    const layer l;
    constexpr std::size_t P = layer::parameter_count;
    std::uint64_t seed = 1;
    for (const auto& c : coefficient_sets<T>()) {
        const std::vector<T> x = values<T>(layer::in, ++seed), dy = values<T>(layer::out, ++seed);
        std::vector<T> w = values<T>(P, ++seed), v = values<T>(P, ++seed);
        std::vector<T> w_ref = w, v_ref = v, g(P, T(0));
        pp::no_stash st;
        pp::no_workspace ws;
        l.backward_weight(std::span<T>(g), x.data(), nullptr, dy.data(), 1, st, ws);
        pp::optim::momentum_update(P, w_ref.data(), v_ref.data(), g.data(), c);
        l.backward_weight_momentum_update(std::span<T>(w), std::span<T>(v), x.data(), dy.data(), c);
        CHECK(same_bits(w, w_ref));
        CHECK(same_bits(v, v_ref));
        CHECK_FALSE(same_bits(w, values<T>(P, seed - 1)));  // the update did something
    }
}

// backward_momentum_update over range r of Net at b = 1 against backward + momentum_update over the whole block.
template <class Net, class T>
void check_stack_range(pp::layer_range r, std::uint64_t seed) {
    using stack_t = pp::layer_stack<Net, T>;
    const stack_t stack;
    const std::size_t P = stack_t::parameter_count_of(r);
    std::vector<T> network(stack_t::parameter_count);
    stack.init_parameters(std::span<T>(network), seed);
    const std::vector<T> w0(network.begin() + static_cast<std::ptrdiff_t>(stack_t::parameter_offset[r.begin]),
                            network.begin() + static_cast<std::ptrdiff_t>(stack_t::parameter_offset[r.end]));
    const std::vector<T> v0 = values<T>(P, seed + 1);
    const std::vector<T> x = values<T>(stack_t::activation_size[r.begin], seed + 2);
    const std::vector<T> dy = values<T>(stack_t::activation_size[r.end], seed + 3);
    std::vector<T> state(stack_t::state_count_of(r));
    for (const auto& c : coefficient_sets<T>()) {
        // reference: fused backward into a zeroed gradient, then the update of the whole block
        auto act = stack.make_activations(r, 1);
        auto ws = stack.make_workspaces(r, 1);
        std::copy(x.begin(), x.end(), act.input());
        stack.forward(std::span<const T>(w0), act, 1, ws, std::span<T>(state));
        std::copy(dy.begin(), dy.end(), act.output_gradient());
        std::vector<T> w_ref = w0, v_ref = v0, g(P, T(0));
        stack.backward(std::span<const T>(w_ref), std::span<T>(g), act, 1, ws, true, std::span<T>(state));
        const std::vector<T> dx_ref(act.input_gradient(), act.input_gradient() + stack_t::activation_size[r.begin]);
        pp::optim::momentum_update(P, w_ref.data(), v_ref.data(), g.data(), c);

        // fused: same forward, then the fused pass (w aliases the weights it reads) and the rest of the update
        auto act2 = stack.make_activations(r, 1);
        auto ws2 = stack.make_workspaces(r, 1);
        std::copy(x.begin(), x.end(), act2.input());
        stack.forward(std::span<const T>(w0), act2, 1, ws2, std::span<T>(state));
        std::copy(dy.begin(), dy.end(), act2.output_gradient());
        std::vector<T> w = w0, v = v0;
        std::vector<T> g2(P, std::numeric_limits<T>::quiet_NaN());  // parts the fused layers must not touch
        const auto runs = stack_t::unfused_parameter_runs(r);
        for (const auto& [offset, count] : runs) std::fill_n(g2.begin() + static_cast<std::ptrdiff_t>(offset), count, T(0));
        stack.backward_momentum_update(std::span<const T>(w), std::span<T>(g2), std::span<T>(w), std::span<T>(v), c,
                                       act2, ws2, true, std::span<T>(state));
        const std::vector<T> dx(act2.input_gradient(), act2.input_gradient() + stack_t::activation_size[r.begin]);
        std::size_t untouched = 0, covered = 0;
        for (const auto& [offset, count] : runs) {
            pp::optim::momentum_update(count, w.data() + offset, v.data() + offset, g2.data() + offset, c);
            covered += count;
        }
        for (T e : g2) untouched += std::isnan(e) ? 1 : 0;
        CHECK(untouched == P - covered);  // the fused layers' part of the gradient block was not written
        CHECK(same_bits(dx, dx_ref));
        CHECK(same_bits(w, w_ref));
        CHECK(same_bits(v, v_ref));

        // update_unfused: the pass applies every layer's update; the gradient block is scratch (NaN before: each
        // unfused layer's part must be zeroed before its p2 adds into it)
        auto act3 = stack.make_activations(r, 1);
        auto ws3 = stack.make_workspaces(r, 1);
        std::copy(x.begin(), x.end(), act3.input());
        stack.forward(std::span<const T>(w0), act3, 1, ws3, std::span<T>(state));
        std::copy(dy.begin(), dy.end(), act3.output_gradient());
        std::vector<T> w3 = w0, v3 = v0, g3(P, std::numeric_limits<T>::quiet_NaN());
        stack.backward_momentum_update(std::span<const T>(w3), std::span<T>(g3), std::span<T>(w3), std::span<T>(v3),
                                       c, act3, ws3, true, std::span<T>(state), /*update_unfused=*/true);
        CHECK(same_bits(std::vector<T>(act3.input_gradient(), act3.input_gradient() + dx_ref.size()), dx_ref));
        CHECK(same_bits(w3, w_ref));
        CHECK(same_bits(v3, v_ref));
    }
}

}  // namespace

TEST_CASE("dense backward-p2 fused into the momentum update equals p2 then the update bitwise", "[fused][dense]") {
    check_dense_layer<float>();
    check_dense_layer<double>();
}

TEST_CASE("which parts of a block the fused backward leaves to the optimizer", "[fused][stack]") {
    using runs_t = std::vector<std::pair<std::size_t, std::size_t>>;
    // mlp: every parameter belongs to a dense layer
    CHECK(pp::layer_stack<mlp, float>::unfused_parameter_runs(pp::layer_stack<mlp, float>::all()).empty());
    // cnn: conv2d 4 x 2 x 3 x 3 + 4 = 76, group norm 2 x 4 = 8: [0, 84) unfused, then the dense layers
    CHECK(pp::layer_stack<cnn, float>::unfused_parameter_runs(pp::layer_stack<cnn, float>::all()) == runs_t{{0, 84}});
    // the stage [2, 8) of cnn starts after the conv: nothing left; [0, 4): the conv and the norm, all unfused
    CHECK(pp::layer_stack<cnn, float>::unfused_parameter_runs({2, 8}).empty());
    CHECK(pp::layer_stack<cnn, float>::unfused_parameter_runs({0, 4}) == runs_t{{0, 84}});
    CHECK(pp::layer_stack<cnn, float>::fuses_momentum_update_in({0, 8}));
    CHECK(pp::layer_stack<cnn, float>::fuses_momentum_update_in({5, 6}));
    CHECK_FALSE(pp::layer_stack<cnn, float>::fuses_momentum_update_in({0, 5}));  // conv, norm, parameter-free
    CHECK_FALSE(pp::layer_stack<cnn, float>::fuses_momentum_update_in({6, 7}));  // relu alone
    // with_block: dense 6->6 (42), the residual block's dense layers are inside a block (not fused: 35 + 36),
    // then dense 6->4 (28)
    CHECK(pp::layer_stack<with_block, float>::unfused_parameter_runs(pp::layer_stack<with_block, float>::all()) ==
          runs_t{{42, 71}});
}

TEST_CASE("layer_stack::backward_momentum_update equals backward then the update bitwise", "[fused][stack]") {
    check_stack_range<mlp, float>(pp::layer_stack<mlp, float>::all(), 11);
    check_stack_range<mlp, double>(pp::layer_stack<mlp, double>::all(), 12);
    check_stack_range<mlp, float>({2, 5}, 13);
    check_stack_range<cnn, float>(pp::layer_stack<cnn, float>::all(), 14);
    check_stack_range<cnn, double>(pp::layer_stack<cnn, double>::all(), 15);
    check_stack_range<cnn, float>({5, 8}, 16);
    check_stack_range<with_block, float>(pp::layer_stack<with_block, float>::all(), 17);
    check_stack_range<with_block, double>({1, 4}, 18);
}

namespace {

// The sequential trainer (fused at b = 1) against the unfused steps written out with layer_stack and optim::sgd.
template <class Net, class T>
void check_trainer(bool nesterov, double weight_decay) {
    using stack_t = pp::layer_stack<Net, T>;
    pp::sequential_trainer_config cfg;
    cfg.max_batch = 3;
    cfg.schedule = pp::optim::lr_schedule::constant(0.05);
    cfg.weight_decay = weight_decay;
    cfg.optimizer.nesterov = nesterov;
    cfg.seed = 5;
    pp::sequential_trainer<Net, T> trainer(cfg);

    const stack_t stack;
    std::vector<T> w(stack_t::parameter_count), g(stack_t::parameter_count);
    stack.init_parameters(std::span<T>(w), cfg.seed);
    REQUIRE(same_bits(w, std::vector<T>(trainer.parameters().begin(), trainer.parameters().end())));
    pp::optim::sgd<T> opt(stack_t::parameter_count, cfg.optimizer);
    auto act = stack.make_activations(stack_t::all(), 3);
    auto ws = stack.make_workspaces(stack_t::all(), 3);
    std::vector<T> state(stack_t::state_count);
    if constexpr (stack_t::state_count > 0) stack.init_state(std::span<T>(state));
    using loss = pp::softmax_cross_entropy<T, stack_t::output_shape::size>;

    constexpr std::size_t in = stack_t::input_shape::size;
    for (std::size_t step = 0; step < 6; ++step) {
        const std::size_t b = step == 3 ? 3 : 1;  // a b = 3 step in between (unfused) and back
        const std::vector<T> x = values<T>(b * in, 100 + step);
        std::vector<std::int32_t> labels(b);
        for (std::size_t i = 0; i < b; ++i) labels[i] = static_cast<std::int32_t>((step + i) % stack_t::output_shape::size);
        const T loss_fused = trainer.train_batch(x.data(), labels.data(), b);

        const pp::optim::hyperparameters<double> h{.learning_rate = 0.05, .momentum = cfg.momentum,
                                                   .weight_decay = weight_decay};
        std::copy(x.begin(), x.end(), act.input());
        stack.forward(std::span<const T>(w), act, b, ws, std::span<T>(state));
        const pp::loss_totals t =
            loss::totals_and_gradient(act.output(), labels.data(), b, act.output_gradient(), T(1) / static_cast<T>(b));
        std::fill(g.begin(), g.end(), T(0));
        stack.backward(std::span<const T>(w), std::span<T>(g), act, b, ws, false, std::span<T>(state));
        opt.step(std::span<T>(w), std::span<const T>(g), h);
        CHECK(loss_fused == static_cast<T>(t.mean()));
        CHECK(same_bits(w, std::vector<T>(trainer.parameters().begin(), trainer.parameters().end())));
        CHECK(same_bits(std::vector<T>(opt.velocity().begin(), opt.velocity().end()),
                        std::vector<T>(trainer.optimizer().velocity().begin(), trainer.optimizer().velocity().end())));
    }
    CHECK(trainer.step_count() == 6);
}

}  // namespace

TEST_CASE("the sequential trainer at b = 1 (fused) equals the unfused steps bitwise", "[fused][trainer]") {
    check_trainer<mlp, float>(false, 0.0);
    check_trainer<mlp, double>(true, 1e-3);
    check_trainer<cnn, float>(true, 5e-4);
    check_trainer<cnn, double>(false, 1e-2);
    check_trainer<with_block, float>(false, 1e-3);
    check_trainer<conv_only, float>(true, 1e-3);
    check_trainer<conv_only_on, float>(false, 0.0);
    check_trainer<conv_only_on, double>(true, 1e-3);
}

TEST_CASE("which PB stages fuse backward-p2 into the update", "[fused][pb]") {
    namespace pb = pp::pb;
    using stack_t = pp::layer_stack<cnn, float>;
    std::vector<float> w(stack_t::parameter_count);
    stack_t{}.init_parameters(std::span<float>(w), 3);
    const auto make = [&]<class Policy, class Opt = pp::optim::sgd<float>>(pp::layer_range r) {
        return pb::stage_state<cnn, Policy, float, Opt>(0, 2, r, std::span<const float>(w), {});
    };
    // a stage with dense layers fuses at b = 1 only; conv-only and parameter-free stages do not
    auto sc = make.template operator()<pb::policy::spike_compensation<>>(pp::layer_range{4, 8});
    CHECK(sc.fuses_update(1));
    CHECK_FALSE(sc.fuses_update(2));
    CHECK_FALSE(make.template operator()<pb::policy::none>(pp::layer_range{0, 4}).fuses_update(1));
    CHECK_FALSE(make.template operator()<pb::policy::none>(pp::layer_range{2, 5}).fuses_update(1));
    CHECK(make.template operator()<pb::policy::linear_weight_prediction<>>(pp::layer_range{0, 8}).fuses_update(1));
    CHECK(make.template operator()<pb::policy::weight_stashing>(pp::layer_range{0, 8}).fuses_update(1));
    // policies that need the weights from before the update, and AdamW, never fuse
    CHECK_FALSE(make.template operator()<pb::policy::linear_weight_prediction<pb::lwp_form::weight_difference>>(
                        pp::layer_range{0, 8})
                    .fuses_update(1));
    CHECK_FALSE(make.template operator()<pb::policy::pipemare>(pp::layer_range{0, 8}).fuses_update(1));
    CHECK_FALSE(make.template operator()<pb::policy::none, pp::optim::adamw<float>>(pp::layer_range{0, 8})
                    .fuses_update(1));
}

namespace {

// Two PB stages from the same weights and velocity: the program's backward then update(), against
// backward_fusing_update then update(), three micro-batches in a row; weights, velocity, gradient block (zero after
// the update), forward weights (LWP) and update count bitwise.
template <class Policy>
void check_pb_stage(pp::layer_range r) {
    namespace pb = pp::pb;
    using stack_t = pp::layer_stack<cnn, float>;
    using stage_t = pb::stage_state<cnn, Policy, float>;
    const stack_t stack;
    std::vector<float> w(stack_t::parameter_count);
    stack.init_parameters(std::span<float>(w), 9);
    stage_t plain(0, 3, r, std::span<const float>(w), {}), fused(0, 3, r, std::span<const float>(w), {});
    const std::vector<float> v0 = values<float>(plain.parameter_count(), 21);
    std::copy(v0.begin(), v0.end(), plain.velocity().begin());
    std::copy(v0.begin(), v0.end(), fused.velocity().begin());
    REQUIRE(fused.fuses_update(1));
    auto act = stack.make_activations(r, 1), act2 = stack.make_activations(r, 1);
    auto ws = stack.make_workspaces(r, 1), ws2 = stack.make_workspaces(r, 1);
    std::vector<float> fw_plain(plain.parameter_count()), fw_fused(plain.parameter_count());
    for (std::size_t n = 0; n < 3; ++n) {
        pb::micro_batch_info<float> mb;
        mb.id = n;
        mb.batch = 1;
        mb.first_sample = n;
        mb.hyper = {.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = n == 1 ? 1e-3f : 0.0f};
        const std::vector<float> x = values<float>(stack_t::activation_size[r.begin], 30 + n);
        const std::vector<float> dy = values<float>(stack_t::activation_size[r.end], 40 + n);
        for (auto* a : {&act, &act2}) {
            std::copy(x.begin(), x.end(), a->input());
            stack.forward(plain.weights(), *a, 1, a == &act ? ws : ws2, std::span<float>{});
            std::copy(dy.begin(), dy.end(), a->output_gradient());
        }
        plain.program().backward(stack, plain.weights(), plain.gradient(), act, 1, ws, true, plain.state());
        plain.update(mb, fw_plain.data());
        fused.backward_fusing_update(stack, fused.weights(), act2, ws2, true, mb);
        fused.update(mb, fw_fused.data());
        const auto vec = [](std::span<const float> s) { return std::vector<float>(s.begin(), s.end()); };
        CHECK(same_bits(vec(plain.weights()), vec(fused.weights())));
        CHECK(same_bits(vec(plain.velocity()), vec(fused.velocity())));
        CHECK(same_bits(fw_plain, fw_fused));
        CHECK(same_bits(std::vector<float>(act.input_gradient(), act.input_gradient() + x.size()),
                        std::vector<float>(act2.input_gradient(), act2.input_gradient() + x.size())));
        for (float g : fused.gradient()) REQUIRE(g == 0.0f);
        CHECK(plain.updates() == fused.updates());
    }
    // update() without a fused backward before it applies the whole block again (the flag does not stick)
    pb::micro_batch_info<float> mb;
    mb.batch = 1;
    mb.hyper = {.learning_rate = 0.05f, .momentum = 0.9f, .weight_decay = 0.0f};
    std::fill(plain.gradient().begin(), plain.gradient().end(), 1.0f);
    std::fill(fused.gradient().begin(), fused.gradient().end(), 1.0f);
    plain.update(mb, nullptr);
    fused.update(mb, nullptr);
    CHECK(same_bits(std::vector<float>(plain.weights().begin(), plain.weights().end()),
                    std::vector<float>(fused.weights().begin(), fused.weights().end())));
}

}  // namespace

TEST_CASE("a PB stage's fused backward and update equal the unfused ones bitwise", "[fused][pb]") {
    namespace pb = pp::pb;
    check_pb_stage<pb::policy::none>({4, 8});
    check_pb_stage<pb::policy::spike_compensation<>>({0, 8});
    check_pb_stage<pb::policy::linear_weight_prediction<>>({0, 8});
    check_pb_stage<pb::policy::sc_lwp<>>({5, 8});
    check_pb_stage<pb::policy::weight_stashing>({0, 8});
}
