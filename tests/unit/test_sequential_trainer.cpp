// Sequential reference trainer: evaluation before training and two momentum-SGD updates (heavy-ball and Nesterov,
// weight decay, schedule and explicit learning rate, a short batch) equal a hand computation of the network in
// double, learning on a separable problem, the update is an SGD
// step on the gradient of the MEAN batch loss (finite differences in double), bit-identical resume through a
// checkpoint on disk (MLP and small CNN, with a schedule and a short final batch), NaN/inf loss detection that
// leaves the state untouched, argument checks, no operator new in train_batch / evaluate / gather_batch after setup
// (this program replaces the global operator new with a counting one).
// GCC 12 flags free() in the replaced operator delete as mismatched with operator new, not knowing that the
// replaced operator new below uses malloc.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <catch2/catch.hpp>

#include <pipeprop/checkpoint.hpp>
#include <pipeprop/data/dataset.hpp>
#include <pipeprop/pipeprop.hpp>
#include <pipeprop/sequential_trainer.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace {
std::atomic<std::size_t> operator_new_calls{0};
}  // namespace

// Counting replacements of the global (unaligned) allocation functions; new[] and the nothrow forms forward here.
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

using mlp = pp::network<shape<12>, pp::dense<16>, pp::relu, pp::dense<16>, pp::relu, pp::dense<3>>;
using cnn = pp::network<shape<1, 8, 8>, pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>, pp::relu, pp::max_pool2d<2>,
                        pp::flatten, pp::dense<3>>;

/// n samples of `dim` inputs in U(-1, 1); label = arg-max of a fixed random linear map (a separable problem).
template <class T>
struct synthetic {
    std::vector<T> x;
    std::vector<std::int32_t> y;
    synthetic(std::size_t n, std::size_t dim, std::uint64_t seed) : x(n * dim), y(n) {
        std::mt19937_64 rng(seed);
        std::mt19937_64 map_rng(12345);
        std::vector<double> a(3 * dim);
        for (auto& v : a) v = pp::uniform<double>(map_rng, -1, 1);
        for (std::size_t i = 0; i < n; ++i) {
            double best = -1e300;
            for (std::size_t d = 0; d < dim; ++d) x[i * dim + d] = pp::uniform<T>(rng, -1, 1);
            for (std::int32_t c = 0; c < 3; ++c) {
                double s = 0;
                for (std::size_t d = 0; d < dim; ++d) s += a[c * dim + d] * static_cast<double>(x[i * dim + d]);
                if (s > best) {
                    best = s;
                    y[i] = c;
                }
            }
        }
    }
};

struct temp_dir {
    fs::path path;
    explicit temp_dir(const std::string& tag) {
        path = fs::temp_directory_path() / ("pipeprop-trainer-" + tag + "-" + std::to_string(::getpid()));
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

pp::sequential_trainer_config config(std::size_t max_batch, std::uint64_t seed, bool nesterov = false) {
    pp::sequential_trainer_config c;
    c.max_batch = max_batch;
    c.optimizer = {.nesterov = nesterov};
    c.momentum = 0.9;
    c.weight_decay = 1e-4;
    c.schedule = pp::optim::lr_schedule::cosine(0.05, 600).with_warmup(64);
    c.seed = seed;
    return c;
}

}  // namespace

namespace {

/// The trainer's network written out by hand (no library code): x [4] -> dense 4->3 -> relu -> dense 3->3 ->
/// softmax cross-entropy. Parameter block as the library lays out dense layers: W1 [3, 4] row-major, b1 [3],
/// W2 [3, 3], b2 [3] (30 values).
struct hand_net {
    static constexpr std::size_t P = 12 + 3 + 9 + 3;
    struct pass {
        double pre[3], h[3], z[3], p[3];
        double loss;
        int argmax;
    };
    static pass forward(const std::vector<double>& w, const double* x, int label) {
        pass r{};
        const double* W1 = w.data();
        const double* b1 = W1 + 12;
        const double* W2 = b1 + 3;
        const double* b2 = W2 + 9;
        for (int o = 0; o < 3; ++o) {
            r.pre[o] = b1[o];
            for (int i = 0; i < 4; ++i) r.pre[o] += W1[o * 4 + i] * x[i];
            r.h[o] = r.pre[o] > 0 ? r.pre[o] : 0.0;
        }
        for (int o = 0; o < 3; ++o) {
            r.z[o] = b2[o];
            for (int i = 0; i < 3; ++i) r.z[o] += W2[o * 3 + i] * r.h[i];
        }
        const double zmax = std::max({r.z[0], r.z[1], r.z[2]});
        double sum = 0;
        for (int o = 0; o < 3; ++o) sum += std::exp(r.z[o] - zmax);
        for (int o = 0; o < 3; ++o) r.p[o] = std::exp(r.z[o] - zmax) / sum;
        r.loss = -std::log(r.p[label]);
        r.argmax = static_cast<int>(std::max_element(r.z, r.z + 3) - r.z);
        return r;
    }
    /// Mean loss over the batch and its gradient g [P] w.r.t. w.
    static double mean_loss_and_gradient(const std::vector<double>& w, const double* x, const std::int32_t* y,
                                         std::size_t b, std::vector<double>& g) {
        g.assign(P, 0.0);
        double loss = 0;
        const double* W2 = w.data() + 15;
        for (std::size_t n = 0; n < b; ++n) {
            const double* xn = x + 4 * n;
            const pass r = forward(w, xn, y[n]);
            loss += r.loss / static_cast<double>(b);
            double dz[3], dpre[3];
            for (int o = 0; o < 3; ++o) dz[o] = (r.p[o] - (o == y[n] ? 1.0 : 0.0)) / static_cast<double>(b);
            for (int o = 0; o < 3; ++o) {
                for (int i = 0; i < 3; ++i) g[15 + o * 3 + i] += dz[o] * r.h[i];
                g[24 + o] += dz[o];
            }
            for (int i = 0; i < 3; ++i) {
                double dh = 0;
                for (int o = 0; o < 3; ++o) dh += dz[o] * W2[o * 3 + i];
                dpre[i] = r.pre[i] > 0 ? dh : 0.0;
            }
            for (int o = 0; o < 3; ++o) {
                for (int i = 0; i < 4; ++i) g[o * 4 + i] += dpre[o] * xn[i];
                g[12 + o] += dpre[o];
            }
        }
        return loss;
    }
};

bool close(const std::vector<double>& a, std::span<const double> b, double tol) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::abs(a[i] - b[i]) > tol * std::max(1.0, std::abs(a[i]))) return false;
    return true;
}

}  // namespace

TEST_CASE("sequential_trainer: evaluation and two updates equal a hand computation", "[trainer]") {
    using net = pp::network<shape<4>, pp::dense<3>, pp::relu, pp::dense<3>>;
    static_assert(pp::sequential_trainer<net, double>::parameter_count == hand_net::P);
    synthetic<double> d(8, 4, 31);
    for (const bool nesterov : {false, true}) {
        INFO((nesterov ? "Nesterov" : "heavy-ball"));
        pp::sequential_trainer_config c;
        c.max_batch = 5;
        c.optimizer = {.nesterov = nesterov};
        c.momentum = 0.9;
        c.weight_decay = 0.01;
        c.schedule = pp::optim::lr_schedule::constant(0.2);
        c.seed = 6;
        pp::sequential_trainer<net, double> t(c);
        std::vector<double> w(t.parameters().begin(), t.parameters().end()), v(hand_net::P, 0.0), g;

        // Evaluation before training, over 8 samples in chunks of 5 and 3: mean loss and accuracy by hand.
        double loss_sum = 0;
        std::size_t hits = 0;
        for (std::size_t n = 0; n < 8; ++n) {
            const auto r = hand_net::forward(w, d.x.data() + 4 * n, d.y[n]);
            loss_sum += r.loss;
            hits += r.argmax == d.y[n];
        }
        const auto e = t.evaluate(d.x.data(), d.y.data(), 8);
        CHECK(e.samples == 8);
        CHECK(e.loss == Approx(loss_sum / 8).epsilon(1e-12));
        CHECK(e.accuracy == static_cast<double>(hits) / 8);
        CHECK(t.step_count() == 0);
        CHECK(t.samples_seen() == 0);

        // Update 1 (samples 0..4, the schedule's lr 0.2) and update 2 (samples 5..7, explicit lr 0.05), by hand:
        // g = dL/dw + lambda w ; v <- m v + g ; heavy-ball w <- w - lr v, Nesterov w <- w - lr (g + m v).
        const double m = 0.9, lambda = 0.01;
        const std::pair<std::size_t, std::size_t> batches[2] = {{0, 5}, {5, 3}};
        const double lrs[2] = {0.2, 0.05};
        for (int k = 0; k < 2; ++k) {
            const auto [first, b] = batches[k];
            const double hand_loss = hand_net::mean_loss_and_gradient(w, d.x.data() + 4 * first, d.y.data() + first, b, g);
            for (std::size_t i = 0; i < hand_net::P; ++i) {
                g[i] += lambda * w[i];
                v[i] = m * v[i] + g[i];
                w[i] -= lrs[k] * (nesterov ? g[i] + m * v[i] : v[i]);
            }
            const double loss = k == 0 ? t.train_batch(d.x.data() + 4 * first, d.y.data() + first, b)
                                       : t.train_batch(d.x.data() + 4 * first, d.y.data() + first, b,
                                                       {.learning_rate = lrs[k], .momentum = m, .weight_decay = lambda});
            INFO("update " << k + 1);
            CHECK(loss == Approx(hand_loss).epsilon(1e-12));
            CHECK(close(w, t.parameters(), 1e-12));
            CHECK(close(v, t.optimizer().velocity(), 1e-12));
        }
        CHECK(t.step_count() == 2);
        CHECK(t.samples_seen() == 8);
        CHECK_THROWS_AS(t.evaluate(d.x.data(), d.y.data(), 0), std::invalid_argument);
    }
}

TEST_CASE("sequential_trainer: learns a separable problem", "[trainer]") {
    synthetic<float> train(512, 12, 2), test(256, 12, 3);
    pp::sequential_trainer_config c = config(16, 5);
    c.schedule = pp::optim::lr_schedule::constant(0.05);
    pp::sequential_trainer<mlp> t(c);
    const auto before = t.evaluate(test.x.data(), test.y.data(), 256);
    for (int epoch = 0; epoch < 6; ++epoch)
        for (std::size_t i = 0; i < 512; i += 16) (void)t.train_batch(train.x.data() + i * 12, train.y.data() + i, 16);
    const auto after = t.evaluate(test.x.data(), test.y.data(), 256);
    INFO("before: " << before.accuracy << " / " << before.loss << ", after: " << after.accuracy << " / " << after.loss);
    CHECK(after.loss < 0.5 * before.loss);
    CHECK(after.accuracy > 0.85);
    CHECK(t.step_count() == 6 * 32);
    CHECK(t.samples_seen() == 6 * 512);
}

TEST_CASE("sequential_trainer: one update is an SGD step on the gradient of the mean batch loss", "[trainer]") {
    // Double precision, momentum 0, no decay: (w_before - w_after) / lr must equal d(mean loss)/dw.
    using net = pp::network<shape<5>, pp::dense<4>, pp::relu, pp::dense<3>>;
    synthetic<double> d(6, 5, 9);
    pp::sequential_trainer_config c;
    c.max_batch = 6;
    c.momentum = 0.0;
    c.weight_decay = 0.0;
    c.seed = 4;
    pp::sequential_trainer<net, double> t(c);
    const std::vector<double> w0(t.parameters().begin(), t.parameters().end());
    const double lr = 0.1;
    const double loss = t.train_batch(d.x.data(), d.y.data(), 6, {.learning_rate = lr, .momentum = 0.0, .weight_decay = 0.0});
    const std::vector<double> w1(t.parameters().begin(), t.parameters().end());

    pp::sequential_trainer<net, double> probe(c);
    auto mean_loss = [&](const std::vector<double>& w) {
        std::copy(w.begin(), w.end(), probe.parameters().begin());
        return probe.evaluate(d.x.data(), d.y.data(), 6).loss;
    };
    CHECK(mean_loss(w0) == Approx(loss).epsilon(1e-12));
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
    INFO("max |analytic - numeric| = " << worst << ", max |numeric| = " << largest);
    CHECK(largest > 1e-3);
    CHECK(worst < 1e-7 * std::max(1.0, largest));
}

template <class Net>
void check_bit_identical_resume(std::size_t dim, bool nesterov) {
    // 40 samples per "epoch" with batch 16: batches of 16, 16 and a short one of 8, over several epochs.
    synthetic<float> d(40, dim, 11);
    const std::size_t k = 7;  // updates before the checkpoint (mid-epoch)
    auto run = [&](pp::sequential_trainer<Net>& t, std::size_t from, std::size_t to) {
        // Update u of the sequence uses samples [pos, pos + b) of the epoch it falls into.
        std::size_t u = 0;
        for (std::size_t epoch = 0; u < to; ++epoch)
            for (std::size_t pos = 0; pos < 40 && u < to; pos += 16, ++u) {
                const std::size_t b = std::min<std::size_t>(16, 40 - pos);
                if (u >= from) (void)t.train_batch(d.x.data() + pos * dim, d.y.data() + pos, b);
            }
    };
    pp::sequential_trainer<Net> straight(config(16, 21, nesterov));
    run(straight, 0, 2 * k);

    temp_dir tmp("resume");
    {
        pp::sequential_trainer<Net> first(config(16, 21, nesterov));
        run(first, 0, k);
        pp::checkpoint c;
        first.save_state(c);
        c.set_scalar("epoch", 2);
        pp::save_checkpoint(c, tmp.path / "ckpt");
    }
    pp::sequential_trainer<Net> resumed(config(16, 999, nesterov));  // other init seed: load must overwrite all
    const pp::checkpoint loaded = pp::load_checkpoint(tmp.path / "ckpt");
    resumed.load_state(loaded);
    CHECK(loaded.scalar_as<int>("epoch") == 2);
    CHECK(resumed.step_count() == k);
    run(resumed, k, 2 * k);

    CHECK(resumed.step_count() == straight.step_count());
    CHECK(resumed.samples_seen() == straight.samples_seen());
    CHECK(bitwise_equal(resumed.parameters(), straight.parameters()));
    CHECK(bitwise_equal(resumed.optimizer().velocity(), straight.optimizer().velocity()));

    // Control: without the optimizer state (fresh velocity) the trajectories differ, so the check above can fail.
    pp::sequential_trainer<Net> no_velocity(config(16, 999, nesterov));
    pp::checkpoint partial;
    partial.signature = loaded.signature;
    for (const auto& t : loaded.tensors()) {
        const auto& v = std::get<std::vector<float>>(t.values);
        std::vector<float> values = t.name.ends_with(".velocity") ? std::vector<float>(v.size(), 0.0f) : v;
        partial.add_tensor<float>(t.name, t.shape, values);
    }
    for (const auto& [key, value] : loaded.scalars()) partial.set_scalar(key, value);
    no_velocity.load_state(partial);
    run(no_velocity, k, 2 * k);
    CHECK_FALSE(bitwise_equal(no_velocity.parameters(), straight.parameters()));
}

TEST_CASE("sequential_trainer: a run resumed from a checkpoint is bit-identical (MLP)", "[trainer][resume]") {
    check_bit_identical_resume<mlp>(12, false);
    check_bit_identical_resume<mlp>(12, true);
}

TEST_CASE("sequential_trainer: a run resumed from a checkpoint is bit-identical (small CNN)", "[trainer][resume]") {
    check_bit_identical_resume<cnn>(64, false);
}

TEST_CASE("sequential_trainer: a checkpoint of another network is rejected, the trainer unchanged", "[trainer]") {
    using other = pp::network<shape<12>, pp::dense<8>, pp::relu, pp::dense<3>>;
    pp::sequential_trainer<other> o(config(4, 1));
    pp::checkpoint c;
    o.save_state(c);
    pp::sequential_trainer<mlp> t(config(4, 1));
    const std::vector<float> before(t.parameters().begin(), t.parameters().end());
    try {
        t.load_state(c, "ckpt-other");
        FAIL("load_state accepted a checkpoint of another network");
    } catch (const pp::checkpoint_error& e) {
        CHECK_THAT(std::string(e.what()), Catch::Contains("ckpt-other") && Catch::Contains("5 layers"));
    }
    CHECK(bitwise_equal(t.parameters(), before));
}

TEST_CASE("sequential_trainer: NaN / inf loss throws and leaves the state untouched", "[trainer]") {
    synthetic<float> d(8, 12, 4);
    pp::sequential_trainer<mlp> t(config(8, 2));
    (void)t.train_batch(d.x.data(), d.y.data(), 8);
    // The last 3 parameters are the output layer's bias: a NaN there makes every logit and the loss NaN.
    auto params = t.parameters();
    float* bias = params.data() + params.size() - 3;
    const float saved_bias = bias[0];
    bias[0] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> w(params.begin(), params.end());
    const std::vector<float> v(t.optimizer().velocity().begin(), t.optimizer().velocity().end());
    try {
        (void)t.train_batch(d.x.data(), d.y.data(), 8);
        FAIL("no exception for a NaN loss");
    } catch (const pp::non_finite_loss_error& e) {
        CHECK_THAT(std::string(e.what()), Catch::Contains("NaN") && Catch::Contains("update 1"));
        CHECK(e.step() == 1);
        CHECK(e.samples_seen() == 8);
    }
    CHECK(bitwise_equal(t.parameters(), w));
    CHECK(bitwise_equal(t.optimizer().velocity(), v));
    CHECK(t.step_count() == 1);
    CHECK(t.samples_seen() == 8);

    // Finite logits whose loss overflows: +3e38 for class 0, -3e38 for the others, labels != 0 -> loss = inf.
    bias[0] = 3e38f;
    bias[1] = bias[2] = -3e38f;
    std::vector<std::int32_t> not_zero(8, 1);
    try {
        (void)t.train_batch(d.x.data(), not_zero.data(), 8);
        FAIL("no exception for an infinite loss");
    } catch (const pp::non_finite_loss_error& e) {
        CHECK_THAT(std::string(e.what()), Catch::Contains("infinite"));
    }
    CHECK(t.step_count() == 1);

    // Bad arguments: batch size and labels; the state stays as it was.
    bias[0] = saved_bias;
    bias[1] = bias[2] = 0.0f;
    const std::vector<float> w2(params.begin(), params.end());
    CHECK_THROWS_AS(t.train_batch(d.x.data(), d.y.data(), 0), std::invalid_argument);
    CHECK_THROWS_AS(t.train_batch(d.x.data(), d.y.data(), 9), std::invalid_argument);
    auto labels = d.y;
    labels[3] = 3;
    CHECK_THROWS_AS(t.train_batch(d.x.data(), labels.data(), 8), std::out_of_range);
    // Hyperparameters the optimizer rejects (the field named), before any work.
    CHECK_THROWS_WITH(t.train_batch(d.x.data(), d.y.data(), 8, {.learning_rate = -0.1, .momentum = 0.9}),
                      Catch::Contains("pipeprop::optim::sgd: learning_rate = -0.100000 must be finite and >= 0"));
    CHECK_THROWS_WITH(t.train_batch(d.x.data(), d.y.data(), 8, {.learning_rate = 0.1, .momentum = 1.0}),
                      Catch::Contains("momentum = 1.000000 must be in [0, 1)"));
    CHECK(bitwise_equal(t.parameters(), w2));
    CHECK(t.samples_seen() == 8);
    CHECK_NOTHROW(t.train_batch(d.x.data(), d.y.data(), 8));
    CHECK(t.step_count() == 2);
}

TEST_CASE("sequential_trainer: no operator new per batch after setup", "[trainer][allocation]") {
    // The counter moves when something allocates (so that zero below means something).
    const std::size_t before_vector = operator_new_calls.load();
    { std::vector<int> probe(100); (void)probe; }
    REQUIRE(operator_new_calls.load() > before_vector);

    synthetic<float> d(48, 64, 6);
    pipeprop::data::dataset ds;
    ds.geometry = {1, 8, 8};
    ds.count = 48;
    ds.classes = 3;
    ds.images = d.x;
    ds.labels = d.y;
    const auto order = pipeprop::data::epoch_permutation(1, 0, 48);
    std::vector<float> x(16 * 64);
    std::vector<std::int32_t> y(16);
    pp::sequential_trainer<cnn> t(config(16, 8, true));
    (void)t.train_batch(d.x.data(), d.y.data(), 16);  // warm-up (BLAS sets up its buffers on first use)
    (void)t.evaluate(d.x.data(), d.y.data(), 48);
    const std::size_t start = operator_new_calls.load();
    for (std::size_t pos = 0; pos < 48; pos += 16) {
        pipeprop::data::gather_batch(ds, order, pos, 16, x.data(), y.data());
        (void)t.train_batch(x.data(), y.data(), 16);
    }
    (void)t.train_batch(x.data(), y.data(), 5);  // a short batch
    const auto e = t.evaluate(d.x.data(), d.y.data(), 48);
    CHECK(operator_new_calls.load() == start);
    CHECK(std::isfinite(e.loss));
    CHECK(t.step_count() == 5);
}
