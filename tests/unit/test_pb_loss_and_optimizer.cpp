// PB with loss and optimizer policies (pb/optimizer.hpp): a language model (token embedding,
// pre-norm transformer block, RMSNorm, token LM head) trained by PB with the per-token cross-entropy (padding id 0
// ignored) and AdamW or momentum SGD.
//   - One stage has delay 0, so PB is then plain per-micro-batch training: it must equal the sequential trainer with
//     the same loss and optimizer bitwise (weights, both AdamW moments, losses): an independent code path.
//   - Fine-grained (a stage per parametric layer, cuts inside both residual blocks): the concurrent executor equals
//     the sequential reference bitwise for every policy AdamW admits and for SC + LWP under SGD, with a partial last
//     micro-batch, a drain and a checkpoint resume in the middle.
//   - Bad targets are refused before anything changes; AdamW refuses a momentum hyperparameter.
#include <catch2/catch.hpp>

#include <pipeprop/pb/checkpoint.hpp>
#include <pipeprop/pipeprop.hpp>

#include <cblas.h>

#include <cstring>
#include <random>
#include <vector>

namespace {

namespace pp = pipeprop;
namespace pb = pipeprop::pb;
using pp::shape;

constexpr std::size_t len = 6, vocab = 11;
using lm = pp::network<shape<len>, pp::token_embedding<vocab, 8>, pp::prenorm_transformer_block<2, 12>, pp::rms_norm<>,
                       pp::token_linear<vocab, false>>;
using lm_loss = pp::token_cross_entropy<float, len, vocab, 0>;
using adamw = pp::optim::adamw<float>;
using sgd = pp::optim::sgd<float>;

/// Token sequences x [n, len] (as floats, the embedding's input) and next-token targets y [n, len] (0: ignored).
struct tokens {
    std::vector<float> x;
    std::vector<std::int32_t> y;
    tokens(std::size_t n, std::uint64_t seed) {
        std::mt19937_64 rng(seed);
        for (std::size_t i = 0; i < n * len; ++i) x.push_back(static_cast<float>(rng() % vocab));
        for (std::size_t i = 0; i < n * len; ++i) y.push_back(static_cast<std::int32_t>(rng() % vocab));
    }
    std::span<const float> xs(std::size_t first, std::size_t b) const { return {x.data() + first * len, b * len}; }
    std::span<const std::int32_t> ys(std::size_t first, std::size_t b) const {
        return {y.data() + first * len, b * len};
    }
};

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Learning rate of micro-batch n (a step schedule: every micro-batch carries its own) and a weight decay that is
/// exact in float (the trainer takes double hyperparameters).
float lr_at(std::size_t n) { return n < 40 ? 0.004f : 0.002f; }
constexpr float decay = 0.015625f;
const pp::optim::adamw_config betas{.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8};

template <class Optimizer>
pp::optim::hyperparameters<float> hyper(std::size_t n) {
    return {lr_at(n), pb::is_adamw<Optimizer, float> ? 0.0f : 0.75f, decay};
}

struct record {
    std::vector<float> losses;
    std::vector<std::size_t> targets, correct;
    std::vector<float> weights, first, second;
};

/// Pushes micro-batches [from, to) of b sequences (the last of the whole run, number count - 1, has `last_b`).
template <class Engine>
void push_range(Engine& e, const tokens& data, std::size_t from, std::size_t to, std::size_t count, std::size_t b,
                std::size_t last_b, record& r) {
    auto take = [&](auto done) {
        for (const auto& c : done) {
            r.losses.push_back(c.loss);
            r.targets.push_back(c.targets);
            r.correct.push_back(c.correct);
        }
    };
    for (std::size_t n = from; n < to; ++n) {
        const std::size_t bb = n + 1 == count ? last_b : b;
        e.set_hyperparameters(hyper<typename Engine::optimizer_type>(n));
        take(e.push(data.xs(n * b, bb), data.ys(n * b, bb), bb));
    }
    take(e.drain());
}

template <class Engine>
void finish(Engine& e, record& r) {
    using stack = typename Engine::stack_type;
    r.weights.resize(stack::parameter_count);
    e.copy_parameters(r.weights);
    r.first.resize(stack::parameter_count);
    e.copy_optimizer_state(0, r.first);
    if constexpr (Engine::optimizer_type::state_buffer_names.size() > 1) {
        r.second.resize(stack::parameter_count);
        e.copy_optimizer_state(1, r.second);
    }
}

}  // namespace

TEST_CASE("PB with one stage equals the sequential trainer: token loss with AdamW and with momentum SGD",
          "[pb][policies][optimizer]") {
    openblas_set_num_threads(1);
    const tokens data(3 * 30, 41);
    auto check = [&]<class Optimizer>(Optimizer, auto config) {
        INFO(Optimizer::name);
        pp::basic_sequential_trainer_config<decltype(config)> tc;
        tc.max_batch = 3;
        tc.optimizer = config;
        tc.seed = 7;
        pp::sequential_trainer<lm, float, lm_loss, Optimizer> tr(tc);
        pb::options<pb::policy::none> o;
        o.max_batch = 3;
        o.seed = 7;
        o.adamw = betas;
        o.executor = pb::executor_kind::sequential;
        pb::engine<lm, pb::policy::none, float, lm_loss, Optimizer> e({{0, pp::layer_stack<lm, float>::layer_count}},
                                                                      o);
        REQUIRE(e.stage_delay(0) == 0);
        for (std::size_t n = 0; n < 30; ++n) {
            e.set_hyperparameters(hyper<Optimizer>(n));
            const auto done = e.push(data.xs(3 * n, 3), data.ys(3 * n, 3), 3);
            REQUIRE(done.size() == 1);
            const auto h = hyper<Optimizer>(n);
            const float loss = tr.train_batch(data.x.data() + 3 * n * len, data.y.data() + 3 * n * len, 3,
                                              {.learning_rate = static_cast<double>(h.learning_rate),
                                               .momentum = static_cast<double>(h.momentum),
                                               .weight_decay = static_cast<double>(h.weight_decay)});
            CHECK(done[0].loss == loss);
            CHECK(done[0].targets == lm_loss::count_targets(data.y.data() + 3 * n * len, 3));
        }
        std::vector<float> w(pp::layer_stack<lm, float>::parameter_count);
        e.copy_parameters(w);
        CHECK(same_bits(w, tr.parameters()));
        for (std::size_t k = 0; k < Optimizer::state_buffer_names.size(); ++k) {
            e.copy_optimizer_state(k, w);
            CHECK(same_bits(w, tr.optimizer().state_buffer(k)));
        }
        CHECK(tr.step_count() == 30);
    };
    check(adamw{}, betas);
    check(sgd{}, pp::optim::sgd_config{});
}

TEST_CASE("PB on a language model, fine-grained: concurrent == sequential bitwise with token loss and AdamW / SGD, "
          "across a drain and a checkpoint resume",
          "[pb][policies][optimizer][transformer]") {
    openblas_set_num_threads(1);
    constexpr std::size_t count = 90, b = 3, last_b = 2, resume_at = 50;
    const tokens data(count * b, 43);
    const auto tmp = std::filesystem::temp_directory_path() / ("pipeprop_pb_lm_" + std::to_string(::getpid()));
    auto check = [&]<class Policy, class Optimizer>(Policy, Optimizer) {
        using pipe = pb::pipeline<lm, pp::fine_grained<>, Policy, float, lm_loss, Optimizer>;
        static_assert(pipe::stage_count == 7);  // embedding; norm, attention, norm, swiglu; final norm; head
        INFO(Policy::name << " with " << Optimizer::name);
        pb::options<Policy> o;
        o.max_batch = b;
        o.seed = 9;
        o.adamw = betas;
        o.push_buffer = 7;
        if constexpr (Policy::corrects_discrepancy) o.policy.warmup_samples = 60;
        record straight[2], resumed;
        for (const auto kind : {pb::executor_kind::sequential, pb::executor_kind::concurrent}) {
            o.executor = kind;
            pipe p(o);
            record& r = straight[kind == pb::executor_kind::concurrent ? 1 : 0];
            push_range(p, data, 0, resume_at, count, b, last_b, r);
            if (kind == pb::executor_kind::concurrent) pb::save_checkpoint(p, tmp);
            push_range(p, data, resume_at, count, count, b, last_b, r);
            finish(p, r);
        }
        REQUIRE(straight[0].losses.size() == count);
        CHECK(same_bits(straight[0].losses, straight[1].losses));
        CHECK(straight[0].targets == straight[1].targets);
        CHECK(straight[0].correct == straight[1].correct);
        CHECK(same_bits(straight[0].weights, straight[1].weights));
        CHECK(same_bits(straight[0].first, straight[1].first));
        CHECK(same_bits(straight[0].second, straight[1].second));
        // Resumed from the concurrent run's checkpoint, with the sequential executor: the rest of the same run.
        o.executor = pb::executor_kind::sequential;
        pipe p(o);
        pb::load_checkpoint(p, tmp);
        CHECK(p.micro_batches_pushed() == resume_at);
        push_range(p, data, resume_at, count, count, b, last_b, resumed);
        finish(p, resumed);
        const std::vector<float> tail(straight[0].losses.begin() + resume_at, straight[0].losses.end());
        CHECK(same_bits(resumed.losses, tail));
        CHECK(same_bits(resumed.weights, straight[0].weights));
        CHECK(same_bits(resumed.second, straight[0].second));
        // The run learned something (not a run that changes nothing): the weights moved from the initial ones.
        pipe fresh(o);
        std::vector<float> w0(pipe::stack_type::parameter_count);
        fresh.copy_parameters(w0);
        CHECK_FALSE(same_bits(w0, straight[0].weights));
        std::filesystem::remove_all(tmp);
    };
    check(pb::policy::none{}, adamw{});
    check(pb::policy::weight_stashing{}, adamw{});
    check(pb::policy::linear_weight_prediction<pb::lwp_form::weight_difference>{}, adamw{});
    check(pb::policy::pipemare{}, adamw{});
    check(pb::policy::sc_lwp<>{}, sgd{});  // and every policy with momentum SGD
    check(pb::policy::none{}, sgd{});
    check(pb::policy::spike_compensation<>{}, sgd{});
    check(pb::policy::linear_weight_prediction<>{}, sgd{});
    check(pb::policy::linear_weight_prediction<pb::lwp_form::weight_difference>{}, sgd{});
    check(pb::policy::weight_stashing{}, sgd{});
    check(pb::policy::pipemare{}, sgd{});
}

TEST_CASE("PB with a token loss and AdamW: bad targets and a momentum are refused before anything changes",
          "[pb][policies][optimizer]") {
    using pipe = pb::pipeline<lm, pp::fine_grained<>, pb::policy::none, float, lm_loss, adamw>;
    pb::options<pb::policy::none> o;
    o.max_batch = 2;
    pipe p(o);
    const tokens data(2, 3);
    std::vector<std::int32_t> bad = data.y;
    bad[7] = static_cast<std::int32_t>(vocab);
    CHECK_THROWS_WITH(p.push(data.xs(0, 2), bad, 2), Catch::Contains("micro-batch 0") && Catch::Contains("11"));
    CHECK_THROWS_WITH(p.push(data.xs(0, 2), data.ys(0, 1), 2), Catch::Contains("expected b * 6 = 12"));
    CHECK(p.micro_batches_pushed() == 0);
    CHECK_THROWS_WITH(p.set_hyperparameters({0.01f, 0.9f, 0.0f}), Catch::Contains("AdamW"));
    o.adamw.beta2 = 1.0;
    CHECK_THROWS_WITH(pipe(o), Catch::Contains("beta2"));
    STATIC_REQUIRE(pipe::targets_per_sample == len);
    STATIC_REQUIRE(pipe::classes == vocab);
}
