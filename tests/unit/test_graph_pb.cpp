// PB on a residual network cut inside its blocks (docs/pb-semantics.md §6): the small
// ResNet (tests/unit/small_resnet.hpp) fine-grained (every parametric node its own stage, boundaries inside both
// blocks, the skip tensor carried across them) and cut by split points inside the bodies; the concurrent flow-graph
// executor equals the sequential reference bitwise for every policy, >= 200 micro-batches, b = 1 and b = 3 with a
// partial last micro-batch, across a drain and across a checkpoint resume.
#include <catch2/catch.hpp>

#include <pipeprop/pb/checkpoint.hpp>

#include <filesystem>
#include <unistd.h>

#include "unit/small_resnet.hpp"
#include "unit/test_pb_support.hpp"

using namespace pb_test;
using test_nets::small_resnet;

namespace {

using fine_resnet_layout = pp::pipeline_layout<small_resnet, pp::fine_grained<>>;
// Parametric nodes 0 1 4 5 7 8 12 13 15 16 (17 18: the shortcut, joined to 16's stage) 22.
static_assert(fine_resnet_layout::stage_count == 11);
static_assert(fine_resnet_layout::boundaries[9] == 16 && fine_resnet_layout::boundaries[10] == 22);
// A boundary inside the first block's body: stage 2 starts at the body's first conv, its input carries the skip.
static_assert(fine_resnet_layout::boundaries[2] == 4);
static_assert(pp::layer_stack<small_resnet, float>::activation_size[4] == 2 * 4 * 8 * 8);

template <class Policy>
pb::options<Policy> opts(pb::executor_kind k, std::size_t max_b) {
    pb::options<Policy> o;
    o.max_batch = max_b;
    o.executor = k;
    o.push_buffer = 16;
    o.seed = 13;
    if constexpr (Policy::corrects_discrepancy) o.policy.warmup_samples = 150;
    return o;
}

template <class Pipe>
void check_agree(std::size_t b, std::size_t partial_last) {
    using Policy = typename Pipe::policy_type;
    const std::size_t count = 205, drain_at = 97;
    Pipe seq(opts<Policy>(pb::executor_kind::sequential, b));
    Pipe con(opts<Policy>(pb::executor_kind::concurrent, b));
    const bool fixed = Policy::fixed_momentum;
    const run_record rs = drive(seq, count, b, partial_last, drain_at, fixed);
    const run_record rc = drive(con, count, b, partial_last, drain_at, fixed);
    INFO("policy " << Policy::name << ", b = " << b << ", S = " << Pipe::stage_count);
    REQUIRE(rs.ids.size() == count);
    CHECK(rc.ids == rs.ids);
    CHECK(bitwise_equal(rc.losses, rs.losses));
    CHECK(bitwise_equal(rc.weights, rs.weights));
    CHECK(bitwise_equal(rc.velocities, rs.velocities));
    Pipe fresh(opts<Policy>(pb::executor_kind::sequential, b));
    std::vector<float> w0(Pipe::stack_type::parameter_count);
    fresh.copy_parameters(w0);
    CHECK_FALSE(bitwise_equal(w0, rs.weights));
}

template <class Policy>
void check_policy() {
    check_agree<pb::pipeline<small_resnet, pp::fine_grained<>, Policy>>(1, 0);
    check_agree<pb::pipeline<small_resnet, pp::fine_grained<>, Policy>>(3, 2);
    check_agree<pb::pipeline<small_resnet, pp::split_at<5, 13, 16>, Policy>>(3, 1);
}

template <class Engine>
std::vector<float> run_span(Engine& e, std::size_t from, std::size_t to, std::size_t b) {
    return pb_test::run_span(e, from, to, b, 220 * b, 23);
}

template <class Engine>
std::vector<float> weights_of(const Engine& e) {
    std::vector<float> w(Engine::stack_type::parameter_count);
    e.copy_parameters(w);
    return w;
}

}  // namespace

TEST_CASE("small ResNet, cuts inside blocks: concurrent == sequential bitwise, none / sc / lwp", "[graph][pb]") {
    openblas_set_num_threads(1);
    check_policy<pb::policy::none>();
    check_policy<pb::policy::spike_compensation<>>();
    check_policy<pb::policy::linear_weight_prediction<>>();
    check_policy<pb::policy::linear_weight_prediction<pb::lwp_form::weight_difference>>();
}

TEST_CASE("small ResNet, cuts inside blocks: concurrent == sequential bitwise, sc_lwp / stash / pipemare",
          "[graph][pb]") {
    openblas_set_num_threads(1);
    check_policy<pb::policy::sc_lwp<>>();
    check_policy<pb::policy::weight_stashing>();
    check_policy<pb::policy::pipemare>();
}

TEST_CASE("small ResNet: a cut inside a projection shortcut is rejected", "[graph][pb][errors]") {
    using engine = pb::engine<small_resnet, pb::policy::none>;
    const auto ranges = pp::partition_at(small_resnet::layer_count, {18});
    REQUIRE_THROWS_WITH(engine(ranges, {}), Catch::Contains("layer_05.shortcut_01") &&
                                                Catch::Contains("share the stage of the block's add"));
    REQUIRE_NOTHROW(engine(pp::partition_at(small_resnet::layer_count, {17 - 1, 20}), {}));
}

TEST_CASE("small ResNet fine-grained: resuming from a checkpoint continues bit-identically", "[graph][pb][checkpoint]") {
    openblas_set_num_threads(1);
    using pipe = pb::pipeline<small_resnet, pp::fine_grained<>, pb::policy::sc_lwp<>>;
    temp_dir dir("pipeprop_graph_pb_");
    auto o = opts<pb::policy::sc_lwp<>>(pb::executor_kind::concurrent, 3);
    pipe whole(o);
    (void)run_span(whole, 0, 110, 3);
    const auto tail_whole = run_span(whole, 110, 210, 3);
    pipe first(o);
    (void)run_span(first, 0, 110, 3);
    pb::save_checkpoint(first, dir.path / "ckpt");
    o.executor = pb::executor_kind::sequential;
    o.seed = 77;
    pipe resumed(o);
    pb::load_checkpoint(resumed, dir.path / "ckpt");
    const auto tail_resumed = run_span(resumed, 110, 210, 3);
    REQUIRE(tail_resumed.size() == 100);
    CHECK(bitwise_equal(tail_resumed, tail_whole));
    CHECK(bitwise_equal(weights_of(resumed), weights_of(whole)));
    // The checkpoint names the block's tensors hierarchically.
    const auto c = pp::load_checkpoint(dir.path / "ckpt");
    CHECK(c.has_tensor("layer_05.shortcut_00.weight"));
    CHECK(c.has_tensor("layer_03.body_03.weight.velocity"));
}

TEST_CASE("stages are types: layers, delay, horizon and spike coefficients as constants", "[graph][pb][types]") {
    using pipe = pb::pipeline<small_resnet, pp::fine_grained<>, pb::policy::sc_lwp<std::ratio<9, 10>>>;
    using s2 = pipe::stage<2>;
    static_assert(s2::index == 2 && s2::begin == 4 && s2::end == 5 && s2::delay == 2 * (11 - 1 - 2));
    static_assert(std::is_same_v<boost::mp11::mp_front<s2::layers>, pp::layer_stack<small_resnet, float>::layer_type<4>>);
    static_assert(boost::mp11::mp_size<pipe::stage_list>::value == 11);
    // The shortcut's two nodes are in the add's stage (9: nodes 16..21).
    using s9 = pipe::stage<9>;
    static_assert(s9::begin == 16 && s9::end == 22 && boost::mp11::mp_size<s9::layers>::value == 6);
    static_assert(s2::horizon == float(s2::delay));
    // a = m^D, b = (1 - m^D) / (1 - m) at m = 0.9, D = 16.
    const double m16 = std::pow(0.9, 16);
    CHECK(s2::spike_compensation.a == Approx(m16).epsilon(1e-6));
    CHECK(s2::spike_compensation.b == Approx((1 - m16) / 0.1).epsilon(1e-6));
    // The static pipeline runs each stage's code instantiated for its stage type.
    using policy = pb::policy::sc_lwp<std::ratio<9, 10>>;
    pipe p{pb::options<policy>{}};
    for (const auto& st : p.stages()) CHECK(st.program().static_code);
    pb::engine<small_resnet, pb::policy::sc_lwp<std::ratio<9, 10>>> dynamic(
        pp::stage_ranges<pipe::layout>(), pb::options<pb::policy::sc_lwp<std::ratio<9, 10>>>{});
    for (const auto& st : dynamic.stages()) CHECK_FALSE(st.program().static_code);
}

TEST_CASE("embedding: the engine trains the caller's parameter storage in place, same bits as its own",
          "[pb][embedding]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::sc_lwp<>;
    using pipe = pb::pipeline<small_resnet, pp::fine_grained<>, policy>;
    auto o = opts<policy>(pb::executor_kind::concurrent, 1);
    pipe own(o);
    std::vector<float> storage(pipe::stack_type::parameter_count);
    own.copy_parameters(storage);  // the caller's initial weights: the same as the engine's own seed-13 ones
    pipe embedded(o, storage);
    const auto r_own = drive(own, 60, 1, 0, 30);
    const auto r_emb = drive(embedded, 60, 1, 0, 30);
    CHECK(bitwise_equal(r_emb.weights, r_own.weights));
    CHECK(bitwise_equal(storage, r_own.weights));  // the caller's storage holds the current weights
    CHECK(bitwise_equal(r_emb.losses, r_own.losses));
    std::vector<float> short_storage(10);
    CHECK_THROWS_WITH(pipe(o, short_storage), Catch::Contains("storage has 10 elements"));
}
