// The library parts the synchronous pipeline shares with the other engines (issue 10, item 5), on a network with a
// stateful layer (Online Normalization) inside a residual block, cut inside the block:
// - one compiled executor: pipeline_executor<..., Kind, 2BP> is schedule_executor<Net, T> with the schedule fixed;
//   make_any_executor gives the same executor type for every schedule, and the same bits as the typed one;
// - schedule_executor::evaluate (pipeprop/evaluation.hpp through the stages) equals sequential_trainer::evaluate on
//   the same parameters and running state, bit for bit, whatever the chunking (max_batch), and changes nothing;
// - step_or_undo: a NaN loss restores parameters, velocity, running state and the step counter bit for bit and
//   throws non_finite_loss_error; the next finite step equals that of an executor that never saw the bad batch;
// - sync::save_state / load_state: a resumed executor (another schedule) continues bit-identically to
//   one that did not stop; the checkpoint loads into a sequential_trainer and gives the same evaluation.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>
#include <pipeprop/layers/conv2d.hpp>
#include <pipeprop/layers/online_norm.hpp>
#include <pipeprop/sequential_trainer.hpp>
#include <pipeprop/sync/any_executor.hpp>
#include <pipeprop/sync/checkpoint.hpp>
#include <pipeprop/sync/executor.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

namespace pp = pipeprop;
namespace ps = pipeprop::sync;
using pp::shape;

namespace {

using net = pp::network<shape<2, 5, 5>, pp::conv2d<3, 3, 1, 1>, pp::online_norm<>, pp::relu,
                        pp::residual<pp::conv2d<3, 3, 1, 1>, pp::online_norm<>, pp::relu>, pp::flatten,
                        pp::dense<4>>;
using stack = pp::layer_stack<net, float>;
constexpr std::size_t in = stack::input_shape::size;
static_assert(stack::state_count > 0);

struct data {
    std::vector<float> x;
    std::vector<std::int32_t> y;
};
data make_data(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.f, 1.f);
    data d;
    for (std::size_t i = 0; i < n * in; ++i) d.x.push_back(g(rng));
    for (std::size_t i = 0; i < n; ++i) d.y.push_back(static_cast<std::int32_t>(rng() % 4));
    return d;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

ps::executor_options options(std::size_t max_batch = 6) {
    ps::executor_options o;
    o.micro_batches = 3;
    o.max_batch = max_batch;
    o.sgd.momentum = 0.9;
    o.seed = 11;
    return o;
}

// A cut inside the residual block: stage 1 starts at its body's conv (flat layer 4).
const std::vector<pp::layer_range> cut_in_block = pp::partition_at(stack::layer_count, {2, 5});

}  // namespace

TEST_CASE("sync engine parts: one compiled executor for every schedule", "[sync][engine]") {
    using typed = ps::pipeline_executor<net, float, ps::schedule_kind::zb_h1, true>;
    STATIC_REQUIRE(std::is_base_of_v<ps::schedule_executor<net, float>, typed>);
    STATIC_REQUIRE(std::is_same_v<ps::any_executor<net, float>, ps::schedule_executor<net, float>>);
    const data d = make_data(6, 3);
    typed a(cut_in_block, options());
    auto b = ps::make_any_executor<net, float>(ps::schedule_kind::zb_h1, true, cut_in_block, options());
    CHECK(b->kind() == ps::schedule_kind::zb_h1);
    CHECK(b->two_stage_bp());
    CHECK(b->current_schedule().label() == a.current_schedule().label());
    for (int k = 0; k < 3; ++k) {
        a.step(d.x, d.y, 0.05);
        b->step(d.x, d.y, 0.05);
    }
    CHECK(same_bits(a.parameters(), b->parameters()));
    CHECK(same_bits(a.state(), b->state()));
}

TEST_CASE("sync engine parts: evaluate equals the sequential trainer's and changes nothing", "[sync][engine]") {
    const data train = make_data(6, 5), test = make_data(13, 6);
    for (const std::size_t max_batch : {6u, 4u}) {
        CAPTURE(max_batch);
        auto ex = ps::make_any_executor<net, float>(ps::schedule_kind::one_f_one_b, true, cut_in_block,
                                                    options(max_batch));
        for (int k = 0; k < 2; ++k) ex->step({train.x.data(), 4 * in}, {train.y.data(), 4}, 0.05);
        const auto w = ex->parameters(), s = ex->state(), v = ex->velocity();
        const pp::evaluation e = ex->evaluate(test.x, test.y);

        pp::sequential_trainer<net, float> tr({.max_batch = 5, .seed = 11});
        std::copy(w.begin(), w.end(), tr.parameters().begin());
        std::copy(s.begin(), s.end(), tr.state().begin());
        const pp::evaluation r = tr.evaluate(test.x.data(), test.y.data(), 13);
        CHECK(e.samples == 13);
        CHECK(e.targets == 13);
        CHECK(e.correct == r.correct);
        CHECK(e.accuracy == r.accuracy);
        CHECK(e.loss == Approx(r.loss).epsilon(1e-6));  // chunks of 4 or 6 vs 5: float sums of other lengths
        CHECK(same_bits(ex->parameters(), w));
        CHECK(same_bits(ex->state(), s));
        CHECK(same_bits(ex->velocity(), v));
        CHECK_THROWS_AS(ex->evaluate({test.x.data(), 3 * in}, {test.y.data(), 2}), std::invalid_argument);
        CHECK_THROWS_AS(ex->evaluate({}, {}), std::invalid_argument);
        std::vector<std::int32_t> bad = test.y;
        bad[7] = 4;
        CHECK_THROWS_AS(ex->evaluate(test.x, bad), std::out_of_range);
    }
}

TEST_CASE("sync engine parts: step_or_undo restores everything on a NaN loss", "[sync][engine]") {
    const data a = make_data(6, 7), b = make_data(6, 8);
    data nan_batch = a;
    nan_batch.x[3] = std::numeric_limits<float>::quiet_NaN();
    auto ex = ps::make_any_executor<net, float>(ps::schedule_kind::gpipe, false, cut_in_block, options());
    auto ref = ps::make_any_executor<net, float>(ps::schedule_kind::gpipe, false, cut_in_block, options());
    ex->step_or_undo(a.x, a.y, 0.05, 0);
    ref->step_or_undo(a.x, a.y, 0.05, 0);
    const auto w = ex->parameters(), v = ex->velocity(), s = ex->state();
    const auto steps = ex->steps();
    try {
        ex->step_or_undo(nan_batch.x, nan_batch.y, 0.05, 6);
        FAIL("no exception");
    } catch (const pp::non_finite_loss_error& e) {
        CHECK(e.step() == 1);
        CHECK(e.samples_seen() == 6);
        CHECK(std::string(e.what()).find("NaN") != std::string::npos);
    }
    CHECK(same_bits(ex->parameters(), w));
    CHECK(same_bits(ex->velocity(), v));
    CHECK(same_bits(ex->state(), s));
    CHECK(ex->steps() == steps);
    ex->step_or_undo(b.x, b.y, 0.05, 6);
    ref->step_or_undo(b.x, b.y, 0.05, 6);
    CHECK(same_bits(ex->parameters(), ref->parameters()));
    CHECK(same_bits(ex->state(), ref->state()));
}

TEST_CASE("sync engine parts: save_state / load_state resume bit-identically, also into the trainer",
          "[sync][engine][checkpoint]") {
    const data a = make_data(6, 9), b = make_data(6, 10), test = make_data(7, 12);
    auto run = ps::make_any_executor<net, float>(ps::schedule_kind::zb_h2, true, cut_in_block, options());
    run->step(a.x, a.y, 0.05);
    pp::checkpoint c;
    ps::save_state(*run, c, 6, 11);
    CHECK(c.scalar_as<std::uint64_t>("step_count") == 1);
    CHECK(c.scalar_as<std::uint64_t>("samples_seen") == 6);
    const auto dir = std::filesystem::temp_directory_path() / "pipeprop_test_sync_engine_parts";
    std::filesystem::remove_all(dir);
    pp::save_checkpoint(c, dir);
    const pp::checkpoint loaded = pp::load_checkpoint(dir);

    // another schedule without 2BP: for the same m and cut every schedule gives the same bits
    auto resumed = ps::make_any_executor<net, float>(ps::schedule_kind::gpipe, false, cut_in_block, options());
    const auto counters = ps::load_state(loaded, *resumed, dir.string());
    CHECK(counters.samples_seen == 6);
    CHECK(counters.step_count == 1);
    CHECK(resumed->steps() == 1);
    run->step(b.x, b.y, 0.05);
    resumed->step(b.x, b.y, 0.05);
    CHECK(same_bits(run->parameters(), resumed->parameters()));
    CHECK(same_bits(run->velocity(), resumed->velocity()));
    CHECK(same_bits(run->state(), resumed->state()));

    // the same checkpoint in the sequential trainer: same parameters and state, so the same evaluation
    pp::sequential_trainer<net, float> tr({.max_batch = 6, .seed = 1});
    tr.load_state(loaded, dir.string());
    auto fresh = ps::make_any_executor<net, float>(ps::schedule_kind::one_f_one_b, true, cut_in_block, options());
    ps::load_state(loaded, *fresh, dir.string());
    CHECK(same_bits(std::vector<float>(tr.parameters().begin(), tr.parameters().end()), fresh->parameters()));
    const auto e1 = fresh->evaluate(test.x, test.y);
    const auto e2 = tr.evaluate(test.x.data(), test.y.data(), 7);
    CHECK(e1.loss == e2.loss);
    CHECK(e1.correct == e2.correct);

    // a checkpoint of another network is refused before anything changes
    pp::checkpoint other = loaded;
    other.signature.layers.pop_back();
    const auto before = fresh->parameters();
    CHECK_THROWS_AS(ps::load_state(other, *fresh, "other"), pp::checkpoint_error);
    CHECK(same_bits(fresh->parameters(), before));
    std::filesystem::remove_all(dir);
}
