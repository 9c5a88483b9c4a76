// Fine-grained PB on a small-width ResNet with Online Normalization: the weight-layer cut
// (pp::weight_layer_stages: every conv a stage with its norm and relu, cuts inside both residual blocks), b = 1.
// The concurrent flow-graph executor equals the sequential reference bitwise, weights, velocities, losses and the
// norms' running state (updated in forward order by the forwards and in backward order by the backward-p1 passes,
// docs/online-norm.md), for every mitigation; a run checkpointed mid-epoch and resumed in a fresh engine
// continues bit-identically, and one resumed without the running state does not.
#include <catch2/catch.hpp>

#include <pipeprop/pb/checkpoint.hpp>

#include <filesystem>
#include <unistd.h>

#include "unit/small_resnet.hpp"
#include "unit/test_pb_support.hpp"

using namespace pb_test;
using test_nets::small_resnet_on;

namespace {

using layout = pp::pipeline_layout<small_resnet_on, pp::weight_layer_stages>;
static_assert(layout::stage_count == 6);
static_assert(layout::boundaries == std::array<std::size_t, 7>{0, 4, 7, 12, 15, 22, 23});
static_assert(layout::delays[0] == 10 && layout::delays[5] == 0);
using stack = pp::layer_stack<small_resnet_on, float>;
static_assert(stack::normalizes[1] && stack::normalizes[18] && !stack::normalizes[17] && !stack::normalizes[0]);
static_assert(stack::state_count > 0);
// The same network with group norm keeps its partition: fine_grained<> still makes every norm its own stage.
static_assert(pp::pipeline_layout<test_nets::small_resnet, pp::fine_grained<>>::stage_count == 11);
static_assert(pp::pipeline_layout<test_nets::small_resnet, pp::weight_layer_stages>::stage_count == 6);

template <class Pipe>
std::vector<float> state_of(const Pipe& p) {
    std::vector<float> s;
    for (const auto& st : p.stages()) s.insert(s.end(), st.state().begin(), st.state().end());
    return s;
}

template <class Policy>
pb::options<Policy> opts(pb::executor_kind k) {
    pb::options<Policy> o;
    o.max_batch = 1;
    o.executor = k;
    o.push_buffer = 16;
    o.seed = 17;
    if constexpr (Policy::corrects_discrepancy) o.policy.warmup_samples = 150;
    return o;
}

template <class Policy>
void check_executors_agree() {
    using pipe = pb::pipeline<small_resnet_on, pp::weight_layer_stages, Policy>;
    pipe seq(opts<Policy>(pb::executor_kind::sequential));
    pipe con(opts<Policy>(pb::executor_kind::concurrent));
    const std::vector<float> state0 = state_of(seq);
    const bool fixed = Policy::fixed_momentum;
    const run_record rs = drive(seq, 230, 1, 0, 101, fixed);
    const run_record rc = drive(con, 230, 1, 0, 101, fixed);
    INFO("policy " << Policy::name);
    REQUIRE(rs.ids.size() == 230);
    CHECK(rc.ids == rs.ids);
    CHECK(bitwise_equal(rc.losses, rs.losses));
    CHECK(bitwise_equal(rc.weights, rs.weights));
    CHECK(bitwise_equal(rc.velocities, rs.velocities));
    CHECK(bitwise_equal(state_of(con), state_of(seq)));
    CHECK_FALSE(bitwise_equal(state_of(seq), state0));  // the running statistics moved
}

template <class Engine>
std::vector<float> weights_of(const Engine& e) {
    std::vector<float> w(Engine::stack_type::parameter_count);
    e.copy_parameters(w);
    return w;
}

}  // namespace

TEST_CASE("ResNet with Online Norm, a stage per conv, b = 1: concurrent == sequential bitwise, none / sc / lwp",
          "[graph][pb][stateful]") {
    openblas_set_num_threads(1);
    check_executors_agree<pb::policy::none>();
    check_executors_agree<pb::policy::spike_compensation<>>();
    check_executors_agree<pb::policy::linear_weight_prediction<>>();
    check_executors_agree<pb::policy::linear_weight_prediction<pb::lwp_form::weight_difference>>();
}

TEST_CASE("ResNet with Online Norm, a stage per conv, b = 1: concurrent == sequential bitwise, sc_lwp / stash / "
          "pipemare",
          "[graph][pb][stateful]") {
    openblas_set_num_threads(1);
    check_executors_agree<pb::policy::sc_lwp<>>();
    check_executors_agree<pb::policy::weight_stashing>();
    check_executors_agree<pb::policy::pipemare>();
}

TEST_CASE("ResNet with Online Norm, a stage per conv: a mid-epoch checkpoint resumes bit-identically",
          "[graph][pb][stateful][checkpoint]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::sc_lwp<>;
    using pipe = pb::pipeline<small_resnet_on, pp::weight_layer_stages, policy>;
    temp_dir dir("pipeprop_resnet_on_");
    // One "epoch" is the stream's 240 micro-batches; the run stops after 130 of them (drained there).
    const auto span = [](auto& e, std::size_t from, std::size_t to) { return run_span(e, from, to, 1, 240, 29); };
    auto o = opts<policy>(pb::executor_kind::concurrent);
    pipe whole(o);
    (void)span(whole, 0, 130);
    const std::vector<float> tail_whole = span(whole, 130, 240);
    pipe first(o);
    (void)span(first, 0, 130);
    pb::save_checkpoint(first, dir.path / "ckpt");
    o.executor = pb::executor_kind::sequential;
    o.seed = 91;  // the checkpoint, not the seed, decides the weights and the state
    pipe resumed(o);
    pb::load_checkpoint(resumed, dir.path / "ckpt");
    CHECK(resumed.micro_batches_pushed() == 130);
    CHECK(bitwise_equal(state_of(resumed), state_of(first)));
    const std::vector<float> tail_resumed = span(resumed, 130, 240);
    REQUIRE(tail_resumed.size() == 110);
    CHECK(bitwise_equal(tail_resumed, tail_whole));
    CHECK(bitwise_equal(weights_of(resumed), weights_of(whole)));
    CHECK(bitwise_equal(state_of(resumed), state_of(whole)));
    // The checkpoint holds the running state by name; without it the continuation differs.
    const auto c = pp::load_checkpoint(dir.path / "ckpt");
    CHECK(c.has_tensor("layer_05.shortcut_01.m"));
    pipe cold(o);
    cold.load_parameters(weights_of(first));
    const std::vector<float> tail_cold = span(cold, 130, 240);
    CHECK_FALSE(bitwise_equal(tail_cold, tail_whole));
}
