// Composite blocks (include/pipeprop/graph/): residual blocks flatten into nodes with hierarchical
// names, compute x + body(x) and shortcut(x) + body(x) exactly as the separately run parts do, and their
// backward-p1 / backward-p2 match central finite differences in double (every node alone, every block alone and the
// small ResNet as a whole), at b = 1 and b = 3.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>

#include "unit/small_resnet.hpp"

#include <cstring>
#include <random>
#include <string_view>
#include <vector>

namespace pp = pipeprop;
using pp::shape;

namespace {

using identity_block = pp::network<shape<6>, pp::residual<pp::dense<5>, pp::relu, pp::dense<6>>>;
using mlp_with_block = pp::network<shape<6>, pp::dense<6>, pp::residual<pp::dense<5>, pp::relu, pp::dense<6>>,
                                   pp::relu, pp::dense<3>>;
using nested = pp::network<shape<4>, pp::residual<pp::dense<4>, pp::residual<pp::relu, pp::dense<4>>, pp::relu>,
                           pp::dense<2>>;
using projection_block =
    pp::network<shape<2, 6, 6>, pp::residual_projection<pp::shortcut<pp::conv2d<4, 1, 2>, pp::group_norm<2>>,
                                                        pp::conv2d<4, 3, 2, 1>, pp::group_norm<2>, pp::relu,
                                                        pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>>>;

template <class Net>
std::vector<double> run_forward(const std::vector<double>& w, const std::vector<double>& x, std::size_t b) {
    using stack = pp::layer_stack<Net, double>;
    const stack s;
    auto act = s.make_activations(stack::all(), b);
    auto ws = s.make_workspaces(stack::all(), b);
    std::copy(x.begin(), x.end(), act.input());
    s.forward(std::span<const double>(w), act, b, ws);
    return {act.output(), act.output() + b * stack::activation_size[stack::layer_count]};
}

std::vector<double> random_vector(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<double> v(n);
    for (auto& e : v) e = pp::uniform<double>(rng, -1.0, 1.0);
    return v;
}

}  // namespace

TEST_CASE("blocks flatten into nodes with hierarchical names", "[graph][names]") {
    using s = pp::layer_stack<mlp_with_block, float>;
    static_assert(s::layer_count == 8 && mlp_with_block::layer_count == 8);
    const std::vector<std::string_view> expected{"layer_00",          "layer_01.fork",    "layer_01.body_00",
                                                 "layer_01.body_01", "layer_01.body_02", "layer_01.add",
                                                 "layer_02",          "layer_03"};
    CHECK(std::vector<std::string_view>(s::node_names.begin(), s::node_names.end()) == expected);
    using n = pp::layer_stack<nested, float>;
    static_assert(n::layer_count == 9);
    CHECK(n::node_names[2] == "layer_00.body_01.fork");
    CHECK(n::node_names[3] == "layer_00.body_01.body_00");
    CHECK(n::node_names[5] == "layer_00.body_01.add");
    CHECK(n::node_names[7] == "layer_00.add");
    using r = pp::layer_stack<test_nets::small_resnet, float>;
    static_assert(r::layer_count == 23);
    CHECK(r::node_names[17] == "layer_05.shortcut_00");
    CHECK(r::node_names[19] == "layer_05.add");
    // The skip tensor is carried: inside a body the node buffers hold the main tensor and the skip tensor.
    static_assert(r::activation_size[4] == 2 * 4 * 8 * 8);   // body_00's input: main + skip
    static_assert(r::activation_size[17] == 8 * 4 * 4 + 4 * 8 * 8);  // body output + skip before the shortcut
    static_assert(r::activation_size[20] == 8 * 4 * 4);
    // The shortcut and its add cannot start a stage; every other node can.
    for (std::size_t i = 0; i < r::layer_count; ++i) CHECK(r::cut_allowed_before[i] == (i < 17 || i > 19));
    // Flat networks keep the names they always had (checkpoints stay readable).
    using flat = pp::layer_stack<pp::network<shape<3>, pp::dense<3>, pp::relu, pp::dense<2>>, float>;
    CHECK(flat::node_names[2] == "layer_02");
}

TEST_CASE("residual: x + body(x), computed by the block equals the parts run separately", "[graph][forward]") {
    using body = pp::network<shape<6>, pp::dense<5>, pp::relu, pp::dense<6>>;
    using block = pp::layer_stack<identity_block, double>;
    static_assert(block::parameter_count == pp::layer_stack<body, double>::parameter_count);
    const std::size_t b = 3;
    const auto w = random_vector(block::parameter_count, 1);
    const auto x = random_vector(b * 6, 2);
    const auto y = run_forward<identity_block>(w, x, b);
    const auto f = run_forward<body>(w, x, b);
    REQUIRE(y.size() == b * 6);
    for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == x[i] + f[i]);
}

TEST_CASE("residual_projection: shortcut(x) + body(x) equals the parts run separately", "[graph][forward]") {
    using body = pp::network<shape<2, 6, 6>, pp::conv2d<4, 3, 2, 1>, pp::group_norm<2>, pp::relu,
                             pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>>;
    using sc = pp::network<shape<2, 6, 6>, pp::conv2d<4, 1, 2>, pp::group_norm<2>>;
    using block = pp::layer_stack<projection_block, double>;
    constexpr std::size_t pb = pp::layer_stack<body, double>::parameter_count;
    constexpr std::size_t ps = pp::layer_stack<sc, double>::parameter_count;
    static_assert(block::parameter_count == pb + ps);  // body first, then the shortcut (node order)
    const std::size_t b = 2;
    const auto w = random_vector(block::parameter_count, 3);
    const auto x = random_vector(b * 72, 4);
    const auto y = run_forward<projection_block>(w, x, b);
    const auto f = run_forward<body>(std::vector<double>(w.begin(), w.begin() + pb), x, b);
    const auto g = run_forward<sc>(std::vector<double>(w.begin() + pb, w.end()), x, b);
    REQUIRE(y.size() == b * 4 * 3 * 3);
    for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == f[i] + g[i]);
}

TEST_CASE("every node type passes check_gradients (contract: assign / add / order)", "[graph][gradients]") {
    using T = double;
    using main = shape<3, 2, 2>;
    for (std::size_t b : {1u, 3u}) {
        INFO("b = " << b);
        const pp::testing::gradient_check_options o{.batch = b};
        CHECK(pp::testing::check_gradients(pp::block_fork<T, main, 5>{}, o).passed);
        CHECK(pp::testing::check_gradients(pp::block_add<T, main, 5>{}, o).passed);
        CHECK(pp::testing::check_gradients(pp::block_add<T, main, 0>{}, o).passed);
        using gn = pp::group_norm<3>::bind<T, main>;
        const auto c = pp::testing::check_gradients(pp::carried<gn, 7>{}, o);
        INFO(c.report);
        CHECK(c.passed);
        using conv = pp::conv2d<2, 1, 2>::bind<T, main>;
        const auto s = pp::testing::check_gradients(pp::on_shortcut<conv, 4, 6>{}, o);
        INFO(s.report);
        CHECK(s.passed);
    }
}

TEST_CASE("blocks pass the network gradient check in double (b = 1 and b = 3)", "[graph][gradients]") {
    for (std::size_t b : {1u, 3u}) {
        INFO("b = " << b);
        pp::testing::network_gradient_check_options o;
        o.batch = b;
        const auto a = pp::testing::check_network_gradients<identity_block>(o);
        INFO(a.report);
        CHECK(a.passed);
        const auto n = pp::testing::check_network_gradients<nested>(o);
        INFO(n.report);
        CHECK(n.passed);
        const auto p = pp::testing::check_network_gradients<projection_block>(o);
        INFO(p.report);
        CHECK(p.passed);
        o.max_checked = 300;
        const auto r = pp::testing::check_network_gradients<test_nets::small_resnet>(o);
        INFO(r.report);
        CHECK(r.passed);
    }
}

TEST_CASE("a gradient check catches a wrong block gradient", "[graph][gradients]") {
    // A block whose fork forgets the skip gradient must fail: the checker is not blind to blocks.
    struct forgetful_fork : pp::block_fork<double, shape<6>, 0> {
        void backward_input(std::span<const double>, const double*, const double*, const double* dy, double* dx,
                            std::size_t b, const pp::no_stash&, pp::no_workspace&) const noexcept {
            std::copy_n(dy, b * 6, dx);  // drops dy_skip
        }
    };
    using broken = pp::network<shape<6>, forgetful_fork, pp::carried<pp::dense<6>::bind<double, shape<6>>, 6>,
                               pp::block_add<double, shape<6>, 0>>;
    const auto r = pp::testing::check_network_gradients<broken>({});
    CHECK_FALSE(r.passed);
    CHECK(r.input_error > 0.1);
}

namespace {

// Forward then backward-p1 / p2 of Net over range r at b samples, in float, either as one pass over r (where runs of
// carried nodes copy their carried part once) or node by node (a pass per node, which copies it at every node, each
// node's output and input gradient moved between the nodes' own buffers). Returns the range's output, its input
// gradient, the weight gradient and the running state after the passes, concatenated.
template <class Net>
std::vector<float> range_passes(pp::layer_range r, std::size_t b, bool node_by_node, bool input_gradient_needed) {
    using stack_t = pp::layer_stack<Net, float>;
    const stack_t stack;
    std::vector<float> w(stack_t::parameter_count), dw(stack_t::parameter_count, 0.0f), state(stack_t::state_count);
    stack.init_parameters(std::span<float>(w), 7);
    stack.init_state(std::span<float>(state));
    const auto part_of = [](auto& v, const auto& offset, pp::layer_range p) {
        return std::span(v).subspan(offset[p.begin], offset[p.end] - offset[p.begin]);
    };
    std::vector<pp::layer_range> parts;
    for (std::size_t k = r.begin; k < r.end; ++k)
        if (node_by_node || k == r.begin) parts.push_back({k, node_by_node ? k + 1 : r.end});
    std::vector<typename stack_t::activations> acts;
    std::vector<typename stack_t::workspaces> wss;
    const auto x = random_vector(b * stack_t::activation_size[r.begin], 11);
    std::vector<float> v(x.begin(), x.end());
    for (const auto p : parts) {
        acts.push_back(stack.make_activations(p, b));
        wss.push_back(stack.make_workspaces(p, b));
        std::copy(v.begin(), v.end(), acts.back().input());
        stack.forward(std::span<const float>(part_of(w, stack_t::parameter_offset, p)), acts.back(), b, wss.back(),
                      part_of(state, stack_t::state_offset, p));
        v.assign(acts.back().output(), acts.back().output() + b * stack_t::activation_size[p.end]);
    }
    std::vector<float> out = v;
    const auto dy = random_vector(b * stack_t::activation_size[r.end], 12);
    v.assign(dy.begin(), dy.end());
    for (std::size_t j = parts.size(); j-- > 0;) {
        const auto p = parts[j];
        std::copy(v.begin(), v.end(), acts[j].output_gradient());
        stack.backward(std::span<const float>(part_of(w, stack_t::parameter_offset, p)),
                       part_of(dw, stack_t::parameter_offset, p), acts[j], b, wss[j], j > 0 || input_gradient_needed,
                       part_of(state, stack_t::state_offset, p));
        v.assign(acts[j].input_gradient(), acts[j].input_gradient() + b * stack_t::activation_size[p.begin]);
    }
    for (const auto* part : {&v, &dw, &state}) out.insert(out.end(), part->begin(), part->end());
    return out;
}

template <class Net>
void check_range_passes(pp::layer_range r) {
    for (const std::size_t b : {1, 3})
        for (const bool input_gradient_needed : {true, false}) {
            INFO("layers [" << r.begin << ", " << r.end << "), b = " << b << ", input gradient needed "
                            << input_gradient_needed);
            const auto whole = range_passes<Net>(r, b, false, input_gradient_needed);
            const auto nodes = range_passes<Net>(r, b, true, input_gradient_needed);
            REQUIRE(whole.size() == nodes.size());
            CHECK(std::memcmp(whole.data(), nodes.data(), whole.size() * sizeof(float)) == 0);
        }
}

}  // namespace

TEST_CASE("a pass over a range equals its nodes run one by one (runs of carried nodes copy once)",
          "[graph][carried]") {
    using stack_t = pp::layer_stack<test_nets::small_resnet, float>;
    static_assert(pp::layer_facts_of<boost::mp11::mp_at_c<stack_t::layer_list, 4>>.carry_size == 4 * 8 * 8);
    check_range_passes<test_nets::small_resnet>(stack_t::all());
    check_range_passes<test_nets::small_resnet>({5, 8});    // inside the first block's run: both ends cut it
    check_range_passes<test_nets::small_resnet>({3, 10});   // fork to add
    check_range_passes<test_nets::small_resnet>({12, 20});  // a run, then the shortcut
    check_range_passes<test_nets::small_resnet_on>(pp::layer_stack<test_nets::small_resnet_on, float>::all());
    check_range_passes<test_nets::small_resnet_on>({5, 8});  // a stateful node first, both ends inside the run
    check_range_passes<test_nets::small_resnet_on>({5, 9});  // a stateful node first and last (the add follows)
    check_range_passes<test_nets::small_resnet_on>({6, 9});
    check_range_passes<test_nets::small_resnet_on>({12, 20});  // the projection block: In and Out of a run differ
    check_range_passes<nested>(pp::layer_stack<nested, float>::all());
    check_range_passes<nested>({3, 5});  // the inner block's run of two carried nodes
    check_range_passes<nested>({2, 4});  // the inner fork and a cut inside that run
    check_range_passes<mlp_with_block>(pp::layer_stack<mlp_with_block, float>::all());
}
