// runtime_layer_stack: the network-free base of layer_stack. Its run-time tables equal layer_tables' constant
// expressions; a forward and backward through it (one non-template function for every network) give the same bits
// as calling each layer's own members directly, position by position, through layer_stack's typed accessors; a copy
// of a layer_stack runs on its own layer objects after the original is gone; the weightless backward-p2 is refused
// at run time for a network whose layers read their weights in p2. The PB engine's stage programs, stage states and
// executors are one type for two networks.
#include <catch2/catch.hpp>

#include <boost/mp11/algorithm.hpp>
#include <pipeprop/pipeprop.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "small_resnet.hpp"

namespace pp = pipeprop;

namespace {

using mlp = pp::network<pp::shape<2, 3, 2>, pp::flatten, pp::dense<7>, pp::relu, pp::dense<4>>;

struct pass_result {
    std::vector<double> y, dx, dw;
};

std::vector<double> random_values(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<double> v(n);
    for (double& e : v) e = pp::uniform<double>(rng, -1, 1);
    return v;
}

// Forward and backward of the whole network through the network-free base: one function for every network.
pass_result run_through_base(const pp::runtime_layer_stack<double>& s, std::span<const double> w,
                             const std::vector<double>& x, const std::vector<double>& dy, std::size_t b) {
    auto act = s.make_activations(s.all(), b);
    auto ws = s.make_workspaces(s.all(), b);
    std::copy(x.begin(), x.end(), act.input());
    s.forward(w, act, b, ws);
    std::copy(dy.begin(), dy.end(), act.output_gradient());
    pass_result r{{act.output(), act.output() + dy.size()}, {}, std::vector<double>(s.parameter_count, 0.0)};
    s.backward(w, r.dw, act, b, ws);
    r.dx.assign(act.input_gradient(), act.input_gradient() + x.size());
    return r;
}

// The same passes with every layer's members called directly (typed, no entry points), last layer first in the
// backward: the independent reference of the entry points and the run-time offsets.
template <class Stack>
pass_result run_layer_by_layer(const Stack& s, std::span<const double> w, const std::vector<double>& x,
                               const std::vector<double>& dy, std::size_t b) {
    constexpr std::size_t n = Stack::layer_count;
    auto act = s.make_activations(Stack::all(), b);
    auto ws = s.make_workspaces(Stack::all(), b);
    std::copy(x.begin(), x.end(), act.input());
    const auto weights = [&](std::size_t i) {
        return w.subspan(Stack::parameter_offset[i], Stack::parameter_offset[i + 1] - Stack::parameter_offset[i]);
    };
    boost::mp11::mp_for_each<boost::mp11::mp_iota_c<n>>([&](auto i) {
        s.template layer<i>().forward(weights(i), act.a(i), act.a(i + 1), b, s.template stash<i>(act),
                                      s.template workspace<i>(ws));
    });
    std::copy(dy.begin(), dy.end(), act.output_gradient());
    pass_result r{{act.output(), act.output() + dy.size()}, {}, std::vector<double>(Stack::parameter_count, 0.0)};
    boost::mp11::mp_for_each<boost::mp11::mp_iota_c<n>>([&](auto k) {
        constexpr std::size_t i = n - 1 - k;
        const auto& l = s.template layer<i>();
        l.backward_input(weights(i), act.a(i), act.a(i + 1), act.g(i + 1), act.g(i), b, s.template stash<i>(act),
                         s.template workspace<i>(ws));
        if constexpr (std::remove_cvref_t<decltype(l)>::parameter_count > 0)
            pp::call_backward_weight(l, weights(i),
                                     std::span<double>(r.dw).subspan(Stack::parameter_offset[i],
                                                                     weights(i).size()),
                                     act.a(i), act.a(i + 1), act.g(i + 1), b, s.template stash<i>(act),
                                     s.template workspace<i>(ws));
    });
    r.dx.assign(act.input_gradient(), act.input_gradient() + x.size());
    return r;
}

template <class Net>
void check_against_direct_calls(std::size_t b) {
    using stack_t = pp::layer_stack<Net, double>;
    stack_t stack;
    std::vector<double> w(stack_t::parameter_count);
    stack.init_parameters(w, 7);
    const auto x = random_values(b * stack_t::activation_size[0], 1);
    const auto dy = random_values(b * stack_t::activation_size[stack_t::layer_count], 2);
    const pass_result base = run_through_base(stack, w, x, dy, b);
    const pass_result direct = run_layer_by_layer(stack, w, x, dy, b);
    CHECK(base.y == direct.y);
    CHECK(base.dx == direct.dx);
    CHECK(base.dw == direct.dw);
}

template <class Net>
void check_tables() {
    using stack_t = pp::layer_stack<Net, float>;
    const stack_t stack;
    const pp::runtime_layer_stack<float>& r = stack;
    REQUIRE(r.layer_count == stack_t::layer_count);
    CHECK(r.parameter_count == stack_t::parameter_count);
    CHECK(r.state_count == stack_t::state_count);
    CHECK(r.has_weighted_backward_weight == stack_t::has_weighted_backward_weight);
    for (std::size_t i = 0; i <= stack_t::layer_count; ++i) {
        CHECK(r.parameter_offset[i] == stack_t::parameter_offset[i]);
        CHECK(r.state_offset[i] == stack_t::state_offset[i]);
        CHECK(r.activation_size[i] == stack_t::activation_size[i]);
    }
    for (std::size_t i = 0; i < stack_t::layer_count; ++i) {
        CHECK(r.node_names[i] == stack_t::node_names[i]);
        CHECK(r.cut_allowed_before[i] == stack_t::cut_allowed_before[i]);
        CHECK(r.has_parameters[i] == stack_t::has_parameters[i]);
        CHECK(r.normalizes[i] == stack_t::normalizes[i]);
    }
    const pp::layer_range half{1, stack_t::layer_count / 2};
    CHECK(r.parameter_count_of(half) == stack_t::parameter_count_of(half));
    CHECK(r.state_count_of(half) == stack_t::state_count_of(half));
    CHECK(r.inference_stride(5) == stack_t::inference_stride(5));
    CHECK(r.fuses_momentum_update_in(r.all()) == stack_t::fuses_momentum_update_in(stack_t::all()));
    CHECK(r.unfused_parameter_runs(r.all()) == stack_t::unfused_parameter_runs(stack_t::all()));
    CHECK(r.unfused_parameter_runs(half) == stack_t::unfused_parameter_runs(half));
}

}  // namespace

TEST_CASE("runtime_layer_stack: the run-time tables equal layer_tables' constant expressions", "[layer_stack]") {
    check_tables<mlp>();
    check_tables<test_nets::small_resnet>();
    check_tables<test_nets::small_resnet_on>();
}

TEST_CASE("runtime_layer_stack: passes give the bits of direct layer calls, for two networks through one function",
          "[layer_stack]") {
    for (std::size_t b : {1, 3}) {
        check_against_direct_calls<mlp>(b);
        check_against_direct_calls<test_nets::small_resnet>(b);
    }
}

TEST_CASE("layer_stack: a copy runs on its own layer objects", "[layer_stack]") {
    using stack_t = pp::layer_stack<test_nets::small_resnet, double>;
    std::vector<double> w(stack_t::parameter_count);
    const std::size_t b = 2;
    const auto x = random_values(b * stack_t::activation_size[0], 3);
    const auto dy = random_values(b * stack_t::activation_size[stack_t::layer_count], 4);
    stack_t reference;
    reference.init_parameters(w, 11);
    const pass_result expected = run_through_base(reference, w, x, dy, b);

    auto original = std::make_unique<stack_t>();
    const stack_t copy(*original);
    stack_t assigned;
    assigned = *original;
    original.reset();  // the copies must not point at its layer objects (ASan reports it if they do)
    for (const stack_t* s : std::array<const stack_t*, 2>{&copy, &assigned}) {
        const pass_result r = run_through_base(*s, w, x, dy, b);
        CHECK(r.y == expected.y);
        CHECK(r.dx == expected.dx);
        CHECK(r.dw == expected.dw);
    }
}

TEST_CASE("runtime_layer_stack: backward-p2 without weights is refused for a network that reads them",
          "[layer_stack]") {
    using net = pp::network<pp::shape<3, 4>, pp::swiglu<5>>;
    using stack_t = pp::layer_stack<net, float>;
    static_assert(stack_t::has_weighted_backward_weight);
    const stack_t stack;
    const pp::runtime_layer_stack<float>& r = stack;
    std::vector<float> w(stack_t::parameter_count, 0.1f), dw(stack_t::parameter_count, 0.0f);
    auto act = r.make_activations(r.all(), 1);
    auto ws = r.make_workspaces(r.all(), 1);
    std::fill_n(act.input(), 12, 0.5f);
    r.forward(w, act, 1, ws);
    std::fill_n(act.output_gradient(), 12, 0.25f);
    r.backward_input(w, act, 1, ws);
    CHECK_THROWS_AS(r.backward_weight(std::span<float>(dw), act, 1, ws), std::logic_error);
    CHECK_NOTHROW(r.backward_weight(std::span<const float>(w), std::span<float>(dw), act, 1, ws));
}

TEST_CASE("PB: stage programs, stage states and executors are one type for every network", "[layer_stack][pb]") {
    using resnet = test_nets::small_resnet;
    using policy = pp::pb::policy::sc_lwp<>;
    // What the engines of two networks share is compiled once (the property the main program's build relies on).
    static_assert(std::is_same_v<pp::stage_program<pp::layer_stack<mlp, float>>,
                                 pp::stage_program<pp::layer_stack<resnet, float>>>);
    using mlp_engine = pp::pb::engine<mlp, policy>;
    using resnet_engine = pp::pb::engine<resnet, policy>;
    static_assert(std::is_same_v<mlp_engine::stage_type, resnet_engine::stage_type>);
    static_assert(std::is_same_v<mlp_engine::stage_type, pp::pb::basic_stage_state<policy, float>>);
    // One executor instantiation serves both networks' stacks (as their network-free base).
    pp::layer_stack<mlp, float> a;
    pp::layer_stack<resnet, float> b;
    const pp::runtime_layer_stack<float>& ra = a;
    const pp::runtime_layer_stack<float>& rb = b;
    std::vector<float> wa(a.parameter_count), wb(b.parameter_count);
    a.init_parameters(wa, 1);
    b.init_parameters(wb, 1);
    const pp::pb::options<policy> opt{.max_batch = 1, .executor = pp::executor_kind::sequential};
    for (const pp::runtime_layer_stack<float>* s : {&ra, &rb}) {
        std::vector<pp::pb::basic_stage_state<policy, float>> stages;
        const auto& w = s == &ra ? wa : wb;
        stages.emplace_back(*s, 0, 1, pp::detail::make_stage_program<float, pp::dynamic_range>(s->all()),
                            std::span<const float>(w), opt.policy);
        using loss = pp::softmax_cross_entropy<float, 3>;  // not run here: only made for both stacks
        const auto ex = pp::pb::make_executor<policy, float, loss, pp::optim::sgd<float>>(*s, stages, opt, {});
        CHECK(ex->kind() == pp::executor_kind::sequential);
        CHECK(ex->in_flight() == 0);
    }
}
