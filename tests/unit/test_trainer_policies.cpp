// sequential_trainer with the loss and the optimizer as policies: a token loss
// (token_cross_entropy over [b, L, V], mean over the batch's non-ignored tokens) on a small LLaMA-like decoder, and
// AdamW. Checks: one update is an SGD step on the gradient of the mean over the non-ignored tokens (central finite
// differences in double); evaluate counts tokens and agrees with train_batch's loss; AdamW's m, v and step count go
// through a checkpoint on disk and the resumed run is bit-identical (and the control without them is not); a
// checkpoint of another optimizer is rejected; a bad target leaves the trainer unchanged; no operator new per batch
// after setup (this program replaces the global operator new with a counting one).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <catch2/catch.hpp>

#include <pipeprop/checkpoint.hpp>
#include <pipeprop/graph/transformer_block.hpp>
#include <pipeprop/layers/dense.hpp>
#include <pipeprop/layers/relu.hpp>
#include <pipeprop/layers/rms_norm.hpp>
#include <pipeprop/layers/token_embedding.hpp>
#include <pipeprop/layers/token_linear.hpp>
#include <pipeprop/loss/token_cross_entropy.hpp>
#include <pipeprop/optim/adamw.hpp>
#include <pipeprop/seed.hpp>
#include <pipeprop/sequential_trainer.hpp>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <random>
#include <vector>

namespace {
std::atomic<std::size_t> operator_new_calls{0};
}  // namespace

void* operator new(std::size_t n) {
    operator_new_calls.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace fs = std::filesystem;
namespace pp = pipeprop;
using pp::shape;

namespace {

constexpr std::size_t L = 5, V = 11;
/// A one-block LLaMA-like decoder: token ids [5] -> embedding [5, 8] -> pre-norm block (2 heads, SwiGLU 12) ->
/// RMSNorm -> LM head [5, 11].
using decoder = pp::network<shape<L>, pp::token_embedding<V, 8>, pp::prenorm_transformer_block<2, 12>, pp::rms_norm<>,
                            pp::token_linear<V, false>>;
template <class T>
using token_loss = pp::token_cross_entropy<T, L, V>;
template <class T>
using adamw_trainer = pp::sequential_trainer<decoder, T, token_loss<T>, pp::optim::adamw<T>>;

using mlp = pp::network<shape<6>, pp::dense<8>, pp::relu, pp::dense<3>>;

/// n sequences of L token ids (as T values) and next-token targets [n, L] (a cyclic pattern plus noise, so it is
/// learnable); every 7th target is the ignore index -100.
template <class T>
struct token_data {
    std::vector<T> x;
    std::vector<std::int32_t> y;
    token_data(std::size_t n, std::uint64_t seed) : x(n * L), y(n * L) {
        std::mt19937_64 rng(seed);
        for (std::size_t s = 0; s < n; ++s) {
            std::int32_t t = static_cast<std::int32_t>(rng() % V);
            for (std::size_t l = 0; l < L; ++l) {
                x[s * L + l] = static_cast<T>(t);
                t = rng() % 4 == 0 ? static_cast<std::int32_t>(rng() % V) : (t + 3) % static_cast<std::int32_t>(V);
                y[s * L + l] = (s * L + l) % 7 == 3 ? -100 : t;
            }
        }
    }
    [[nodiscard]] std::size_t counted(std::size_t first, std::size_t n) const {
        std::size_t c = 0;
        for (std::size_t i = first * L; i < (first + n) * L; ++i) c += y[i] != -100 ? 1 : 0;
        return c;
    }
};

struct temp_dir {
    fs::path path;
    explicit temp_dir(const std::string& tag) {
        path = fs::temp_directory_path() / ("pipeprop-policies-" + tag + "-" + std::to_string(::getpid()));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

template <class A, class B>
bool bitwise_equal(const A& a, const B& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
}

pp::basic_sequential_trainer_config<pp::optim::adamw_config> adamw_config(std::size_t max_batch, std::uint64_t seed) {
    pp::basic_sequential_trainer_config<pp::optim::adamw_config> c;
    c.max_batch = max_batch;
    c.optimizer = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    c.schedule = pp::optim::lr_schedule::cosine(3e-3, 400).with_warmup(40);
    c.weight_decay = 0.1;
    c.seed = seed;
    return c;
}

}  // namespace

TEST_CASE("trainer policies: the default template arguments are softmax cross-entropy and momentum SGD",
          "[trainer][policies]") {
    using t = pp::sequential_trainer<mlp>;
    STATIC_REQUIRE(std::is_same_v<t::loss_type, pp::softmax_cross_entropy<float, 3>>);
    STATIC_REQUIRE(std::is_same_v<t::optimizer_type, pp::optim::sgd<float>>);
    STATIC_REQUIRE(std::is_same_v<t::config_type, pp::sequential_trainer_config>);
    STATIC_REQUIRE(pp::loss_policy<pp::softmax_cross_entropy<float, 3>>);
    STATIC_REQUIRE(pp::loss_policy<token_loss<double>>);
    STATIC_REQUIRE(pp::optim::optimizer_policy<pp::optim::sgd<float>>);
    STATIC_REQUIRE(pp::optim::optimizer_policy<pp::optim::adamw<double>>);
    STATIC_REQUIRE(adamw_trainer<float>::targets_per_sample == L);
    STATIC_REQUIRE_FALSE(pp::loss_fits_output<token_loss<float>, shape<3>>);
}

TEST_CASE("trainer policies: one token-loss update is an SGD step on the gradient of the mean over the non-ignored "
          "tokens", "[trainer][policies][token]") {
    // Double precision, momentum 0, no decay: (w_before - w_after) / lr must equal d(mean token loss)/dw, where the
    // mean runs over the batch's non-ignored tokens (not over b * L).
    using trainer = pp::sequential_trainer<decoder, double, token_loss<double>>;
    token_data<double> d(4, 3);
    const std::size_t tokens = d.counted(0, 4);
    REQUIRE(tokens < 4 * L);  // some targets are ignored
    pp::sequential_trainer_config c;
    c.max_batch = 4;
    c.momentum = 0.0;
    c.weight_decay = 0.0;
    c.seed = 5;
    trainer t(c);
    const std::vector<double> w0(t.parameters().begin(), t.parameters().end());
    const double lr = 0.1;
    const double loss = t.train_batch(d.x.data(), d.y.data(), 4, {.learning_rate = lr, .momentum = 0.0, .weight_decay = 0.0});
    const std::vector<double> w1(t.parameters().begin(), t.parameters().end());

    trainer probe(c);
    auto mean_loss = [&](const std::vector<double>& w) {
        std::copy(w.begin(), w.end(), probe.parameters().begin());
        const pp::evaluation e = probe.evaluate(d.x.data(), d.y.data(), 4);
        CHECK(e.targets == tokens);
        CHECK(e.samples == 4);
        return e.loss;
    };
    CHECK(mean_loss(w0) == Approx(loss).epsilon(1e-12));
    CHECK(loss == Approx(std::log(double(V))).epsilon(0.25));  // small init: near the uniform loss ln V
    double worst = 0, largest = 0;
    for (std::size_t i = 0; i < w0.size(); ++i) {
        auto wp = w0, wm = w0;
        wp[i] += 1e-6;
        wm[i] -= 1e-6;
        const double numeric = (mean_loss(wp) - mean_loss(wm)) / 2e-6;
        const double analytic = (w0[i] - w1[i]) / lr;
        worst = std::max(worst, std::abs(numeric - analytic));
        largest = std::max(largest, std::abs(numeric));
    }
    INFO("max |analytic - numeric| = " << worst << ", max |numeric| = " << largest << " over " << w0.size()
                                       << " parameters");
    CHECK(largest > 1e-3);
    CHECK(worst < 1e-7 * std::max(1.0, largest));
}

TEST_CASE("trainer policies: evaluation of a token loss is chunk-independent and counts tokens",
          "[trainer][policies][token]") {
    token_data<float> d(13, 8);
    adamw_trainer<float> a(adamw_config(13, 2));
    adamw_trainer<float> b(adamw_config(4, 2));  // chunks 4, 4, 4, 1
    const auto ea = a.evaluate(d.x.data(), d.y.data(), 13);
    const auto eb = b.evaluate(d.x.data(), d.y.data(), 13);
    CHECK(ea.targets == d.counted(0, 13));
    CHECK(eb.targets == ea.targets);
    CHECK(eb.loss == Approx(ea.loss).epsilon(1e-6));
    CHECK(eb.accuracy == ea.accuracy);
    // Training on the data lowers the validation-style loss.
    for (int epoch = 0; epoch < 30; ++epoch)
        for (std::size_t first = 0; first + 13 <= 13; first += 13) (void)a.train_batch(d.x.data(), d.y.data(), 13);
    const auto after = a.evaluate(d.x.data(), d.y.data(), 13);
    INFO("before " << ea.loss << ", after " << after.loss);
    CHECK(after.loss < ea.loss - 0.3);
}

TEST_CASE("trainer policies: AdamW state (m, v, step count) goes through a checkpoint; the resumed run is "
          "bit-identical", "[trainer][policies][adamw][resume]") {
    token_data<float> d(24, 4);
    const std::size_t k = 5;  // updates before the checkpoint; batches of 8 over 24 sequences
    auto run = [&](adamw_trainer<float>& t, std::size_t from, std::size_t to) {
        for (std::size_t u = from; u < to; ++u) {
            const std::size_t pos = (u % 3) * 8;
            (void)t.train_batch(d.x.data() + pos * L, d.y.data() + pos * L, u % 4 == 3 ? 5 : 8);
        }
    };
    adamw_trainer<float> straight(adamw_config(8, 21));
    run(straight, 0, 2 * k);

    temp_dir tmp("adamw");
    {
        adamw_trainer<float> first(adamw_config(8, 21));
        run(first, 0, k);
        pp::checkpoint c;
        first.save_state(c);
        pp::save_checkpoint(c, tmp.path / "ckpt");
    }
    const pp::checkpoint loaded = pp::load_checkpoint(tmp.path / "ckpt");
    CHECK(loaded.scalar("optimizer") == "adamw");
    std::size_t m_tensors = 0, v_tensors = 0;
    for (const auto& t : loaded.tensors()) {
        m_tensors += t.name.ends_with(".first_moment") ? 1 : 0;
        v_tensors += t.name.ends_with(".second_moment") ? 1 : 0;
    }
    CHECK(m_tensors >= 8);  // table, 2 norms, wq wk wv wo, w_gate w_up w_down, final norm, head
    CHECK(v_tensors == m_tensors);

    adamw_trainer<float> resumed(adamw_config(8, 999));  // other init seed: load must overwrite all
    resumed.load_state(loaded);
    CHECK(resumed.step_count() == k);
    run(resumed, k, 2 * k);
    CHECK(resumed.step_count() == straight.step_count());
    CHECK(resumed.samples_seen() == straight.samples_seen());
    CHECK(bitwise_equal(resumed.parameters(), straight.parameters()));
    CHECK(bitwise_equal(resumed.optimizer().first_moment(), straight.optimizer().first_moment()));
    CHECK(bitwise_equal(resumed.optimizer().second_moment(), straight.optimizer().second_moment()));

    // Controls: without the moments, or with another step count (bias corrections), the trajectories differ.
    auto altered = [&](bool zero_moments, std::uint64_t steps) {
        pp::checkpoint partial;
        partial.signature = loaded.signature;
        for (const auto& t : loaded.tensors()) {
            const auto& v = std::get<std::vector<float>>(t.values);
            const bool moment = t.name.ends_with("_moment");
            partial.add_tensor<float>(t.name, t.shape,
                                      zero_moments && moment ? std::vector<float>(v.size(), 0.0f) : v);
        }
        for (const auto& [key, value] : loaded.scalars()) partial.set_scalar(key, value);
        partial.set_scalar("step_count", steps);
        adamw_trainer<float> t(adamw_config(8, 999));
        t.load_state(partial);
        run(t, k, 2 * k);
        return bitwise_equal(t.parameters(), straight.parameters());
    };
    CHECK(altered(false, k));  // the unaltered copy reproduces the run (so the controls below test the alteration)
    CHECK_FALSE(altered(true, k));
    CHECK_FALSE(altered(false, 1));
}

TEST_CASE("trainer policies: a checkpoint of another optimizer is rejected, the trainer unchanged",
          "[trainer][policies][adamw]") {
    pp::sequential_trainer<decoder, float, token_loss<float>> sgd({.max_batch = 2});
    pp::checkpoint c;
    sgd.save_state(c);
    CHECK(c.scalar("optimizer") == "sgd");
    adamw_trainer<float> t(adamw_config(2, 1));
    const std::vector<float> before(t.parameters().begin(), t.parameters().end());
    try {
        t.load_state(c, "ckpt-sgd");
        FAIL("an AdamW trainer accepted a momentum-SGD checkpoint");
    } catch (const pp::checkpoint_error& e) {
        CHECK_THAT(std::string(e.what()),
                   Catch::Contains("ckpt-sgd") && Catch::Contains("optimizer sgd") && Catch::Contains("adamw"));
    }
    CHECK(bitwise_equal(t.parameters(), before));
    CHECK(t.step_count() == 0);
}

TEST_CASE("trainer policies: a bad token target throws before anything changes", "[trainer][policies][token]") {
    token_data<float> d(4, 9);
    adamw_trainer<float> t(adamw_config(4, 3));
    (void)t.train_batch(d.x.data(), d.y.data(), 4);
    const std::vector<float> w(t.parameters().begin(), t.parameters().end());
    const std::vector<float> m(t.optimizer().first_moment().begin(), t.optimizer().first_moment().end());
    auto y = d.y;
    y[2 * L + 4] = static_cast<std::int32_t>(V);
    try {
        (void)t.train_batch(d.x.data(), y.data(), 4);
        FAIL("no exception for a target outside the vocabulary");
    } catch (const std::out_of_range& e) {
        CHECK_THAT(std::string(e.what()), Catch::Contains("sample 2, position 4"));
    }
    CHECK_THROWS_AS(t.evaluate(d.x.data(), y.data(), 4), std::out_of_range);
    // AdamW's momentum hyperparameter must be 0 (its momentum is beta1): per update and in the config.
    CHECK_THROWS_WITH(t.train_batch(d.x.data(), d.y.data(), 4, {.learning_rate = 1e-3, .momentum = 0.9}),
                      Catch::Contains("pipeprop::optim::adamw: momentum = 0.900000 must be 0"));
    auto with_momentum = adamw_config(4, 3);
    with_momentum.momentum = 0.5;
    CHECK_THROWS_WITH(adamw_trainer<float>(with_momentum), Catch::Contains("momentum = 0.500000 must be 0"));
    CHECK(bitwise_equal(t.parameters(), w));
    CHECK(bitwise_equal(t.optimizer().first_moment(), m));
    CHECK(t.step_count() == 1);
    CHECK(t.samples_seen() == 4);
    // An all-ignored batch: loss 0, and the step still counts.
    std::vector<std::int32_t> ignored(4 * L, -100);
    CHECK(t.train_batch(d.x.data(), ignored.data(), 4) == 0.0f);
    CHECK(t.step_count() == 2);
}

TEST_CASE("trainer policies: no operator new per batch after setup (token loss, AdamW)",
          "[trainer][policies][allocation]") {
    const std::size_t before_vector = operator_new_calls.load();
    { std::vector<int> probe(100); (void)probe; }
    REQUIRE(operator_new_calls.load() > before_vector);

    token_data<float> d(16, 6);
    adamw_trainer<float> t(adamw_config(8, 4));
    (void)t.train_batch(d.x.data(), d.y.data(), 8);  // warm-up (BLAS sets up its buffers on first use)
    (void)t.evaluate(d.x.data(), d.y.data(), 16);
    const std::size_t start = operator_new_calls.load();
    (void)t.train_batch(d.x.data(), d.y.data(), 8);
    (void)t.train_batch(d.x.data() + 8 * L, d.y.data() + 8 * L, 3);  // a short batch
    const auto e = t.evaluate(d.x.data(), d.y.data(), 16);
    CHECK(operator_new_calls.load() == start);
    CHECK(std::isfinite(e.loss));
}
