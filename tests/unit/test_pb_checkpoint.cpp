// PB checkpoints (include/pipeprop/pb/checkpoint.hpp): a run that stops at a drained point, saves, and resumes in a
// fresh engine gives bit-identically the run that did not stop, for every kind of policy state and across
// executors; checkpoints for another policy, partition or network are rejected by name; a PB checkpoint's weights
// and velocity load into the sequential trainer.
#include <catch2/catch.hpp>

#include <pipeprop/pb/checkpoint.hpp>
#include <pipeprop/sequential_trainer.hpp>

#include <filesystem>
#include <unistd.h>

#include "unit/test_pb_support.hpp"

using namespace pb_test;

namespace {

/// The fixed stream of these tests: 200 micro-batches of b samples, data seed 21.
template <class Engine>
std::vector<float> run_span(Engine& e, std::size_t from, std::size_t to, std::size_t b) {
    return pb_test::run_span(e, from, to, b, 200 * b, 21);
}

template <class Engine>
std::vector<float> weights_of(const Engine& e) {
    std::vector<float> w(Engine::stack_type::parameter_count);
    e.copy_parameters(w);
    return w;
}
template <class Engine>
std::vector<float> velocities_of(const Engine& e) {
    std::vector<float> v(Engine::stack_type::parameter_count);
    e.copy_velocities(v);
    return v;
}

template <class Policy>
void check_resume(pb::executor_kind save_with, pb::executor_kind resume_with) {
    openblas_set_num_threads(1);
    using pipe = pb::pipeline<cnn, pp::fine_grained<>, Policy>;
    temp_dir dir("pipeprop_pb_ckpt_");
    pb::options<Policy> o;
    o.max_batch = 2;
    o.push_buffer = 8;
    if constexpr (Policy::corrects_discrepancy) o.policy.warmup_samples = 200;
    // Uninterrupted: 0..140 with a drain at 70 (the end of an "epoch").
    o.executor = save_with;
    pipe whole(o);
    (void)run_span(whole, 0, 70, 2);
    const std::vector<float> tail_whole = run_span(whole, 70, 140, 2);
    // Interrupted: 0..70, checkpoint, then a fresh engine continues 70..140.
    pipe first(o);
    (void)run_span(first, 0, 70, 2);
    pb::save_checkpoint(first, dir.path / "ckpt");
    o.executor = resume_with;
    o.seed = 99;  // the checkpoint, not the seed, decides the weights
    pipe resumed(o);
    pb::load_checkpoint(resumed, dir.path / "ckpt");
    CHECK(resumed.micro_batches_pushed() == 70);
    CHECK(resumed.samples_pushed() == 140);
    CHECK(bitwise_equal(weights_of(resumed), weights_of(first)));
    const std::vector<float> tail_resumed = run_span(resumed, 70, 140, 2);
    INFO("policy " << Policy::name << ", saved with " << pb::to_string(save_with) << ", resumed with "
                   << pb::to_string(resume_with));
    REQUIRE(tail_resumed.size() == 70);
    CHECK(bitwise_equal(tail_resumed, tail_whole));
    CHECK(bitwise_equal(weights_of(resumed), weights_of(whole)));
    CHECK(bitwise_equal(velocities_of(resumed), velocities_of(whole)));
    // And stopping does matter if the state is not restored (so the comparison can fail):
    pipe cold(o);
    (void)run_span(cold, 70, 140, 2);
    CHECK_FALSE(bitwise_equal(weights_of(cold), weights_of(whole)));
}

}  // namespace

TEST_CASE("resuming from a PB checkpoint continues bit-identically", "[pb][checkpoint]") {
    using ek = pb::executor_kind;
    check_resume<pb::policy::sc_lwp<>>(ek::concurrent, ek::concurrent);
    check_resume<pb::policy::sc_lwp<>>(ek::sequential, ek::concurrent);
    check_resume<pb::policy::linear_weight_prediction<pb::lwp_form::weight_difference>>(ek::concurrent, ek::sequential);
    check_resume<pb::policy::pipemare>(ek::concurrent, ek::concurrent);
    check_resume<pb::policy::weight_stashing>(ek::sequential, ek::sequential);
    check_resume<pb::policy::none>(ek::concurrent, ek::concurrent);
}

TEST_CASE("PB checkpoints are rejected for another policy, partition or network, and need a drain",
          "[pb][checkpoint]") {
    openblas_set_num_threads(1);
    temp_dir dir("pipeprop_pb_ckpt_");
    using policy = pb::policy::sc_lwp<>;
    pb::pipeline<cnn, pp::fine_grained<>, policy> p;
    (void)run_span(p, 0, 10, 1);
    pb::save_checkpoint(p, dir.path / "c");

    pb::pipeline<cnn, pp::fine_grained<>, pb::policy::spike_compensation<>> other_policy;
    CHECK_THROWS_WITH(pb::load_checkpoint(other_policy, dir.path / "c"),
                      Catch::Contains("mitigation policy 'sc_lwp'") && Catch::Contains("uses 'sc'"));
    pb::pipeline<cnn, pp::split_at<5>, policy> other_cut;
    CHECK_THROWS_WITH(pb::load_checkpoint(other_cut, dir.path / "c"),
                      Catch::Contains("made for stages 0-1,1-4,4-7,7-9,9-10, this pipeline has 0-5,5-10"));
    pb::pipeline<mlp, pp::fine_grained<>, policy> other_net;
    CHECK_THROWS_WITH(pb::load_checkpoint(other_net, dir.path / "c"), Catch::Contains("does not fit this network"));

    // Not at a drained point: neither save nor load.
    data_stream<cnn> data(4, 3);
    (void)p.push(data.xs(0, 1), data.ys(0, 1), 1);
    REQUIRE(p.in_flight() == 1);
    CHECK_THROWS_AS(pb::save_checkpoint(p, dir.path / "c2"), std::logic_error);
    CHECK_THROWS_AS(pb::load_checkpoint(p, dir.path / "c"), std::logic_error);
    (void)p.drain();
    CHECK_NOTHROW(pb::load_checkpoint(p, dir.path / "c"));
}

TEST_CASE("a PB checkpoint's weights and velocity load into the sequential trainer", "[pb][checkpoint]") {
    openblas_set_num_threads(1);
    temp_dir dir("pipeprop_pb_ckpt_");
    pb::pipeline<cnn, pp::fine_grained<>, pb::policy::none> p;
    (void)run_span(p, 0, 12, 1);
    pb::save_checkpoint(p, dir.path / "c");
    pp::sequential_trainer<cnn> sgd({.max_batch = 1});
    sgd.load_state(pp::load_checkpoint(dir.path / "c"));
    CHECK(bitwise_equal(std::vector<float>(sgd.parameters().begin(), sgd.parameters().end()), weights_of(p)));
    CHECK(sgd.step_count() == 12);
}
