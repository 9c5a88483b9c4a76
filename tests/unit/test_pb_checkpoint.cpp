// PB checkpoints (include/pipeprop/pb/checkpoint.hpp): a run that stops at a drained point, saves, and resumes in a
// fresh engine gives bit-identically the run that did not stop, for every kind of policy state and across
// executors; a checkpoint loads under another stage cut exactly as one made for that cut (resharding); checkpoints
// for another policy or network are rejected by name; a PB checkpoint's weights and velocity load into the
// sequential trainer.
#include <catch2/catch.hpp>

#include <pipeprop/pb/checkpoint.hpp>
#include <pipeprop/pb/policy_optimizer_prediction.hpp>
#include <pipeprop/pb/policy_pipedream_2bw.hpp>
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


/// Resharding: a checkpoint of the fine-grained cut (5 stages) loads into a 2-stage pipeline exactly as the same
/// state written for the 2-stage cut does (pb_stages and the per-stage scalars rewritten by hand), and saving it
/// again gives the same tensors; the new cut then trains differently from the old one (so the comparison can fail).
template <class Policy>
void check_reshard() {
    openblas_set_num_threads(1);
    pb::options<Policy> o;
    o.max_batch = 2;
    if constexpr (Policy::corrects_discrepancy) o.policy.warmup_samples = 200;
    pb::pipeline<cnn, pp::fine_grained<>, Policy> fine(o);
    (void)run_span(fine, 0, 70, 2);
    pp::checkpoint saved;
    pb::save_state(fine, saved);
    REQUIRE(saved.scalar("pb_stages") == "0-1,1-4,4-7,7-9,9-10");
    pp::checkpoint by_hand = saved;
    by_hand.set_scalar("pb_stages", "0-5,5-10");
    for (const char* what : {"last_learning_rate", "last_weight_decay"})
        for (std::size_t s : {0, 1})
            if (saved.has_scalar(pb::detail::stage_scalar(0, what)))
                by_hand.set_scalar(pb::detail::stage_scalar(s, what),
                                   saved.scalar(pb::detail::stage_scalar(s == 0 ? 0 : 2, what)));
    using two_stages = pb::pipeline<cnn, pp::split_at<5>, Policy>;
    o.seed = 99;  // the checkpoint, not the seed, decides the weights
    two_stages resharded(o), reference(o);
    pb::load_state(resharded, saved);
    pb::load_state(reference, by_hand);
    INFO("policy " << Policy::name);
    pp::checkpoint again;
    pb::save_state(resharded, again);
    REQUIRE(again.tensors().size() == saved.tensors().size());
    for (const pp::checkpoint_tensor& t : saved.tensors()) {
        INFO("tensor " << t.name);
        CHECK(again.tensor(t.name).values == t.values);
    }
    CHECK(again.scalar("pb_stages") == "0-5,5-10");
    const std::vector<float> tail = run_span(resharded, 70, 140, 2);
    CHECK(bitwise_equal(tail, run_span(reference, 70, 140, 2)));
    CHECK(bitwise_equal(weights_of(resharded), weights_of(reference)));
    CHECK(bitwise_equal(velocities_of(resharded), velocities_of(reference)));
    CHECK_FALSE(bitwise_equal(tail, run_span(fine, 70, 140, 2)));
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

TEST_CASE("PB checkpoints are rejected for another policy or network, and need a drain",
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

TEST_CASE("a PB checkpoint resumes under another stage cut (resharding)", "[pb][checkpoint]") {
    check_reshard<pb::policy::sc_lwp<>>();
    check_reshard<pb::policy::pipemare>();
    check_reshard<pb::policy::optimizer_weight_prediction<>>();
    check_reshard<pb::policy::none>();

    // Refused: saved stages whose last learning rates differ, PipeDream-2BW under another cut, a damaged cut.
    openblas_set_num_threads(1);
    pb::pipeline<cnn, pp::fine_grained<>, pb::policy::sc_lwp<>> fine;
    (void)run_span(fine, 0, 10, 1);
    pp::checkpoint c;
    pb::save_state(fine, c);
    pb::pipeline<cnn, pp::split_at<5>, pb::policy::sc_lwp<>> two;
    pp::checkpoint differing = c;
    differing.set_scalar(pb::detail::stage_scalar(3, "last_learning_rate"), 0.5);
    CHECK_THROWS_WITH(pb::load_state(two, differing), Catch::Contains("last_learning_rate differ"));
    CHECK_NOTHROW(pb::load_state(fine, differing));  // under its own cut it is the saved state
    for (const char* bad : {"0-5", "0-5,6-10", "0-5,5-10,", "5-0,0-10", "a-5,5-10", "0-5,5-11"}) {
        pp::checkpoint damaged = c;
        damaged.set_scalar("pb_stages", bad);
        INFO("pb_stages " << bad);
        CHECK_THROWS_AS(pb::load_state(two, damaged), pp::checkpoint_error);
    }
    pb::pipeline<cnn, pp::fine_grained<>, pb::policy::pipedream_2bw> fine_2bw;
    (void)run_span(fine_2bw, 0, 10, 1);
    pp::checkpoint c2bw;
    pb::save_state(fine_2bw, c2bw);
    pb::pipeline<cnn, pp::split_at<5>, pb::policy::pipedream_2bw> two_2bw;
    CHECK_THROWS_WITH(pb::load_state(two_2bw, c2bw), Catch::Contains("resumes only under the cut it was made with"));
}
