// The library parts the synchronous pipeline shares with the other engines, on a network with a
// stateful layer (Online Normalization) inside a residual block, cut inside the block:
// - one compiled executor: pipeline_executor<..., Kind, 2BP> is schedule_executor<Net, T> with the schedule fixed;
//   make_any_executor gives the same executor type for every schedule, and the same bits as the typed one;
// - schedule_executor::evaluate (pipeprop/evaluation.hpp through the stages) equals sequential_trainer::evaluate on
//   the same parameters and running state, bit for bit, whatever the chunking (max_batch), and changes nothing;
// - step_or_undo: a NaN loss restores parameters, velocity, running state and the step counter bit for bit and
//   throws non_finite_loss_error; the next finite step equals that of an executor that never saw the bad batch;
// - sync::save_state / load_state: a resumed executor (another schedule) continues bit-identically to
//   one that did not stop; the checkpoint loads into a sequential_trainer and gives the same evaluation;
// - embedding: an executor on parameter storage the caller owns starts from its values, updates it in place, and
//   gives the bits of an executor on its own storage.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>
#include <pipeprop/layers/conv2d.hpp>
#include <pipeprop/layers/online_norm.hpp>
#include <pipeprop/loss/token_cross_entropy.hpp>
#include <pipeprop/optim/adamw.hpp>
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
    o.seed = 11;
    return o;
}

// The hyperparameters of every step of the momentum-SGD executors of options(): learning rate 0.05, momentum 0.9.
constexpr pp::optim::hyperparameters<double> sgd_step{.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 0.0};

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
        a.step(d.x, d.y, sgd_step);
        b->step(d.x, d.y, sgd_step);
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
        for (int k = 0; k < 2; ++k) ex->step({train.x.data(), 4 * in}, {train.y.data(), 4}, sgd_step);
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
    ex->step_or_undo(a.x, a.y, sgd_step, 0);
    ref->step_or_undo(a.x, a.y, sgd_step, 0);
    const auto w = ex->parameters(), v = ex->velocity(), s = ex->state();
    const auto steps = ex->steps();
    try {
        ex->step_or_undo(nan_batch.x, nan_batch.y, sgd_step, 6);
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
    ex->step_or_undo(b.x, b.y, sgd_step, 6);
    ref->step_or_undo(b.x, b.y, sgd_step, 6);
    CHECK(same_bits(ex->parameters(), ref->parameters()));
    CHECK(same_bits(ex->state(), ref->state()));
}

TEST_CASE("sync engine parts: save_state / load_state resume bit-identically, also into the trainer",
          "[sync][engine][checkpoint]") {
    const data a = make_data(6, 9), b = make_data(6, 10), test = make_data(7, 12);
    auto run = ps::make_any_executor<net, float>(ps::schedule_kind::zb_h2, true, cut_in_block, options());
    run->step(a.x, a.y, sgd_step);
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
    run->step(b.x, b.y, sgd_step);
    resumed->step(b.x, b.y, sgd_step);
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

TEST_CASE("sync engine parts: on caller-owned parameter storage, updated in place, same bits as own storage",
          "[sync][engine][embedding]") {
    const data a = make_data(6, 31), b = make_data(5, 32);
    using exec = ps::schedule_executor<net, float>;
    exec own(ps::schedule_kind::one_f_one_b, true, cut_in_block, options());
    std::vector<float> storage = own.parameters();  // the caller's block: the same initial weights
    const float* where = storage.data();
    exec borrowed(ps::schedule_kind::one_f_one_b, true, cut_in_block, options(), storage);
    for (const data* d : {&a, &b}) {
        const auto r1 = own.step(d->x, d->y, sgd_step);
        const auto r2 = borrowed.step(d->x, d->y, sgd_step);
        CHECK(r1.loss == r2.loss);
    }
    CHECK(storage.data() == where);
    CHECK(same_bits(storage, own.parameters()));  // the caller's block holds the current weights
    CHECK(same_bits(borrowed.parameters(), own.parameters()));
    CHECK(same_bits(borrowed.velocity(), own.velocity()));
    CHECK_FALSE(same_bits(storage, exec(ps::schedule_kind::gpipe, false, cut_in_block, options()).parameters()));
    std::vector<float> wrong(stack::parameter_count - 1);
    CHECK_THROWS_WITH(exec(ps::schedule_kind::gpipe, false, cut_in_block, options(), wrong),
                      Catch::Contains("storage has"));
}

namespace {

// A tiny LLaMA-like model (token ids [6] -> embedding [6, 8] -> pre-norm block -> norm -> LM head [6, 11]) with the
// per-token loss (padding id 0 ignored) and AdamW: what the main program's --mode sync runs on llama-tiny.
using lm = pp::network<shape<6>, pp::token_embedding<11, 8>, pp::prenorm_transformer_block<2, 12>, pp::rms_norm<>,
                       pp::token_linear<11, false>>;
using lm_loss = pp::token_cross_entropy<float, 6, 11, 0>;
using lm_adamw = pp::optim::adamw<float>;
constexpr std::size_t lm_len = 6;

data make_tokens(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    data d;
    for (std::size_t i = 0; i < n * lm_len; ++i) d.x.push_back(static_cast<float>(rng() % 11));
    for (std::size_t i = 0; i < n * lm_len; ++i) d.y.push_back(static_cast<std::int32_t>(rng() % 11));  // 0: ignored
    return d;
}

}  // namespace

TEST_CASE("sync engine parts: token loss and AdamW as policies, equal to the sequential trainer",
          "[sync][engine][policies]") {
    const data a = make_tokens(5, 21), b = make_tokens(5, 22), test = make_tokens(4, 23);
    const pp::optim::adamw_config cfg{.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8};
    const pp::optim::hyperparameters<double> h{.learning_rate = 0.01, .momentum = 0.0, .weight_decay = 0.01};
    using exec = ps::schedule_executor<lm, float, lm_loss, lm_adamw>;
    STATIC_REQUIRE(exec::targets_per_sample == lm_len);
    STATIC_REQUIRE(exec::optimizer_buffer_count == 2);
    // a cut inside the block: before its attention (flat layer 3) and before the SwiGLU residual's fork (5)
    const auto cut = pp::partition_at(pp::layer_stack<lm, float>::layer_count, {3, 5});
    pp::basic_sequential_trainer_config<pp::optim::adamw_config> tc;
    tc.max_batch = 5;
    tc.optimizer = cfg;
    tc.seed = 4;
    pp::sequential_trainer<lm, float, lm_loss, lm_adamw> tr(tc);
    const float l1 = tr.train_batch(a.x.data(), a.y.data(), 5, h);
    const float l2 = tr.train_batch(b.x.data(), b.y.data(), 5, h);
    const std::vector<float> w_ref(tr.parameters().begin(), tr.parameters().end());
    const auto e_ref = tr.evaluate(test.x.data(), test.y.data(), 4);
    for (const std::size_t m : {1u, 3u}) {
        CAPTURE(m);
        for (const auto kind : {ps::schedule_kind::one_f_one_b, ps::schedule_kind::zb_h2}) {
            ps::basic_executor_options<pp::optim::adamw_config> o;
            o.micro_batches = m;
            o.max_batch = 5;
            o.optimizer = cfg;
            o.seed = 4;
            exec ex(kind, true, cut, o);
            const auto r1 = ex.step(a.x, a.y, h);
            const auto r2 = ex.step(b.x, b.y, h);
            std::size_t counted = 0;
            for (const auto t : a.y) counted += t != 0 ? 1 : 0;
            CHECK(r1.targets == counted);  // the ignored id does not count (N of the whole batch)
            CHECK(ex.optimizer_step_count() == 2);
            const auto w = ex.parameters();
            if (m == 1) {  // the same arithmetic: bit-identical to the trainer
                CHECK(same_bits(w, w_ref));
                CHECK(static_cast<float>(r1.loss) == l1);
                CHECK(static_cast<float>(r2.loss) == l2);
            } else {  // only the float summation order of the micro-batch sums differs
                CHECK(r1.loss == Approx(l1).epsilon(1e-5));
                double worst = 0, scale = 0;
                for (std::size_t i = 0; i < w.size(); ++i) {
                    worst = std::max(worst, std::abs(double(w[i]) - double(w_ref[i])));
                    scale = std::max(scale, std::abs(double(w_ref[i])));
                }
                CHECK(worst <= 1e-4 * scale);
            }
            const auto e = ex.evaluate(test.x, test.y);
            CHECK(e.targets == e_ref.targets);
            if (m == 1) CHECK(e.loss == e_ref.loss);
        }
    }
    // The checkpoint carries both AdamW moments and the step count; it loads into the trainer.
    ps::basic_executor_options<pp::optim::adamw_config> o;
    o.micro_batches = 1;
    o.max_batch = 5;
    o.optimizer = cfg;
    o.seed = 4;
    exec ex(ps::schedule_kind::gpipe, false, cut, o);
    ex.step(a.x, a.y, h);
    pp::checkpoint c;
    ps::save_state(ex, c, 5, 4);
    CHECK(c.scalar("optimizer") == "adamw");
    pp::sequential_trainer<lm, float, lm_loss, lm_adamw> resumed(tc);
    resumed.load_state(c, "sync checkpoint");
    CHECK(resumed.step_count() == 1);
    ex.step(b.x, b.y, h);
    resumed.train_batch(b.x.data(), b.y.data(), 5, h);
    CHECK(same_bits(ex.parameters(), std::vector<float>(resumed.parameters().begin(), resumed.parameters().end())));
    // a momentum-SGD executor refuses an AdamW checkpoint before changing anything
    auto sgd_ex = ps::make_any_executor<lm, float, lm_loss>(ps::schedule_kind::gpipe, false, cut,
                                                           {.micro_batches = 1, .max_batch = 5, .seed = 4});
    const auto before = sgd_ex->parameters();
    CHECK_THROWS_WITH(ps::load_state(c, *sgd_ex, "ckpt"), Catch::Contains("optimizer adamw"));
    CHECK(same_bits(sgd_ex->parameters(), before));
    // a target outside the vocabulary: std::out_of_range before any work
    data bad = a;
    bad.y[4] = 11;
    CHECK_THROWS_AS(ex.step(bad.x, bad.y, h), std::out_of_range);
    CHECK_THROWS_AS(ex.step(a.x, {a.y.data(), a.y.size() - 1}, h), std::invalid_argument);
}
