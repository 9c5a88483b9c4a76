// The trainer contract (include/pipeprop/trainer_concept.hpp): the sequential trainer, pb::trainer and sync::trainer
// all satisfy pipeprop::trainer, and one generic training loop, written only against the contract, drives each of
// them: stopping at a drained point, saving, loading into a fresh trainer and going on gives bit-identically the run
// that did not stop; the losses a trainer reports add up to its completed micro-batches; a synchronous pipeline of one
// stage and one micro-batch, and a PB pipeline of one stage (delay 0), give the sequential trainer's bits; a
// sequential checkpoint resumes in the synchronous trainer.
#include <catch2/catch.hpp>

#include <pipeprop/pb/trainer.hpp>
#include <pipeprop/sequential_trainer.hpp>
#include <pipeprop/sync/trainer.hpp>
#include <pipeprop/trainer_concept.hpp>

#include <cstdint>
#include <span>
#include <vector>

#include "unit/test_pb_support.hpp"

using namespace pb_test;

namespace {

using seq_trainer = pp::sequential_trainer<mlp>;
using pb_trainer = pb::trainer<mlp, pb::policy::sc_lwp<>>;
using sync_trainer = pp::sync::trainer<mlp>;
static_assert(pp::trainer<seq_trainer> && pp::trainer<pb_trainer> && pp::trainer<sync_trainer>);
static_assert(!pp::trainer<pb::engine<mlp, pb::policy::sc_lwp<>>>);  // the engine alone has no schedule

const pp::optim::lr_schedule lr = pp::optim::lr_schedule::step(0.01, 40, 0.5);
constexpr double momentum = 0.9, weight_decay = 1e-3;

/// What a training loop written against the contract sees of samples [from, to) in batches of b, then a drain.
struct observed {
    std::vector<double> reported;  // train_batch's L * b per call, then drain()'s sum
    double test_loss = 0.0, test_accuracy = 0.0;
    std::uint64_t samples_seen = 0;
};

template <pp::trainer E>
observed train_span(E& e, const data_stream<mlp>& data, std::size_t from, std::size_t to, std::size_t b) {
    observed o;
    for (std::size_t i = from; i < to; i += b)
        o.reported.push_back(e.train_batch(data.xs(i, b).data(), data.ys(i, b).data(), b) * double(b));
    o.reported.push_back(e.drain());
    const pp::evaluation r = e.evaluate(data.x.data(), data.labels.data(), 64);
    o.test_loss = r.loss;
    o.test_accuracy = r.accuracy;
    o.samples_seen = e.samples_seen();
    return o;
}

void check_same(const observed& a, const observed& b) {
    CHECK(a.test_loss == b.test_loss);  // bitwise: the same updates in the same order
    CHECK(a.test_accuracy == b.test_accuracy);
    CHECK(a.samples_seen == b.samples_seen);
}

/// Stop at sample 48, save, load into a fresh trainer, go on to 96: the same as 96 without stopping.
template <pp::trainer E, class Make>
void check_resume(Make make, std::size_t b) {
    const data_stream<mlp> data(128, 3, 17);
    auto whole = make();
    (void)train_span(*whole, data, 0, 48, b);
    pp::checkpoint c;
    whole->save_state(c);
    const observed straight = train_span(*whole, data, 48, 96, b);

    auto resumed = make();
    resumed->load_state(c, "the contract test's checkpoint");
    CHECK(resumed->samples_seen() == 48);
    CHECK(resumed->current_learning_rate() == lr(48));
    check_same(train_span(*resumed, data, 48, 96, b), straight);
}

seq_trainer::config_type seq_config(std::size_t b) {
    return {.max_batch = b, .schedule = lr, .momentum = momentum, .weight_decay = weight_decay, .seed = 3};
}
pb::options<pb::policy::sc_lwp<>> pb_options(pb::executor_kind k) {
    pb::options<pb::policy::sc_lwp<>> o;
    o.executor = k;
    o.seed = 3;
    return o;
}
sync_trainer::executor_type::options_type sync_options(std::size_t m, std::size_t max_batch) {
    return {.micro_batches = m, .max_batch = max_batch, .seed = 3, .executor = pp::executor_kind::concurrent};
}

}  // namespace

TEST_CASE("every trainer resumes through the contract bit-identically", "[trainer]") {
    openblas_set_num_threads(1);
    check_resume<seq_trainer>([] { return std::make_unique<seq_trainer>(seq_config(4)); }, 4);
    for (const auto k : {pb::executor_kind::concurrent, pb::executor_kind::sequential})
        check_resume<pb_trainer>(
            [k] {
                return std::make_unique<pb_trainer>(pp::partition_at(mlp::layer_count, {2, 4}), pb_options(k), lr,
                                                    momentum, weight_decay);
            },
            1);
    check_resume<sync_trainer>(
        [] {
            return std::make_unique<sync_trainer>(pp::sync::schedule_kind::one_f_one_b, true,
                                                  pp::partition_at(mlp::layer_count, {2, 4}), sync_options(2, 4), lr,
                                                  momentum, weight_decay);
        },
        4);
}

TEST_CASE("a PB trainer's reported losses add up to its completed micro-batches", "[trainer][pb]") {
    openblas_set_num_threads(1);
    const data_stream<mlp> data(64, 3, 17);
    pb_trainer t(pp::partition_at(mlp::layer_count, {2, 4}), pb_options(pb::executor_kind::sequential), lr, momentum,
                 weight_decay);
    const observed o = train_span(t, data, 0, 40, 1);
    double sum = 0.0;
    for (const double v : o.reported) sum += v;
    CHECK(t.completed().samples == 40);
    CHECK(t.completed().targets == 40);
    CHECK(sum == Approx(t.completed().loss_times_targets).epsilon(1e-12));

    // The concurrent executor reports its micro-batches later (its graph runs up to push_buffer of them at once),
    // but the same ones with the same losses.
    pb_trainer c(pp::partition_at(mlp::layer_count, {2, 4}), pb_options(pb::executor_kind::concurrent), lr, momentum,
                 weight_decay);
    const observed oc = train_span(c, data, 0, 40, 1);
    CHECK(oc.reported.back() > 0.0);  // the drain completes the micro-batches still buffered
    CHECK(c.completed().samples == 40);
    CHECK(c.completed().loss_times_targets == t.completed().loss_times_targets);
    check_same(oc, o);
}

TEST_CASE("one stage: the synchronous and PB trainers give the sequential trainer's bits", "[trainer]") {
    openblas_set_num_threads(1);
    const data_stream<mlp> data(128, 3, 17);
    const std::vector<pp::layer_range> one{{0, mlp::layer_count}};

    seq_trainer seq4(seq_config(4));
    sync_trainer sync4(pp::sync::schedule_kind::gpipe, false, one, sync_options(1, 4), lr, momentum, weight_decay);
    const observed s4 = train_span(seq4, data, 0, 96, 4);
    const observed y4 = train_span(sync4, data, 0, 96, 4);
    CHECK(s4.reported == y4.reported);
    check_same(s4, y4);

    seq_trainer seq1(seq_config(64));  // trained at b = 1; evaluated in chunks of 64 as the PB engine does
    pb_trainer pb1(one, pb_options(pb::executor_kind::sequential), lr, momentum, weight_decay);
    const observed s1 = train_span(seq1, data, 0, 48, 1);
    const observed p1 = train_span(pb1, data, 0, 48, 1);
    CHECK(s1.reported == p1.reported);
    check_same(s1, p1);

    // A sequential checkpoint goes on in the synchronous trainer as in the sequential one.
    pp::checkpoint c;
    seq4.save_state(c);
    sync_trainer from_seq(pp::sync::schedule_kind::gpipe, false, one, sync_options(1, 4), lr, momentum, weight_decay);
    from_seq.load_state(c, "sequential checkpoint");
    check_same(train_span(from_seq, data, 96, 128, 4), train_span(seq4, data, 96, 128, 4));
}
