// Consecutive synchronous steps without a barrier (sync/schedule.hpp consecutive_steps,
// schedule_executor::consecutive_steps): every stage starts step n + 1 right after its own update of step n.
// - for every schedule (the virtual-stage ones where the cut and m allow them), with and without 2BP, 2..4 stages cut
//   inside the blocks, k = 2 and 3 steps, both
//   executors: the consecutive run equals k calls of step() on the same batches BITWISE (weights, both AdamW
//   moments or the velocity, step counts, per-step loss, correct count, targets and gradient norm), on a tiny
//   LLaMA-like model with the token loss and AdamW and on a CNN with momentum SGD;
// - the steps do overlap: in the sequential executor's run of two ZB-H2 steps the first stage runs forwards of step 1
//   before the last stage's step-0 backward-p2 ops end, and the simulator's steady state (barrier off) on the same
//   schedule has exactly these overlaps: for every schedule it times the executor's k-step lists
//   (consecutive_steps) exactly as it times k steps of the one-step schedule back to back, optimizer steps included;
// - the concurrent executor really runs them overlapped: a probe layer on the last stage holds that stage's last
//   step-0 backward-p2 op until a probe on the first stage has seen a forward of step 1 (with a barrier between
//   the steps this could never happen; the probe gives up after 30 s and the test fails);
// - the list checks (a stage's steps in order) and the call's errors (too many steps, batches of different sizes,
//   fewer samples than micro-batches, clipping) are reported before any work;
// - consecutive_steps_or_undo on a NaN in step 1 ends exactly where step_or_undo on each batch in turn ends.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>
#include <pipeprop/layers/conv2d.hpp>
#include <pipeprop/layers/group_norm.hpp>
#include <pipeprop/loss/token_cross_entropy.hpp>
#include <pipeprop/optim/adamw.hpp>
#include <pipeprop/sync/any_executor.hpp>
#include <pipeprop/sync/simulator.hpp>

#include <oneapi/tbb/info.h>

#include <atomic>
#include <cblas.h>
#include <chrono>
#include <cstring>
#include <thread>
#include <limits>
#include <random>
#include <vector>

namespace pp = pipeprop;
namespace ps = pipeprop::sync;
using pp::shape;

namespace {

// A tiny LLaMA-like model: token ids [6] -> embedding [6, 8] -> pre-norm block -> RMSNorm -> LM head [6, 11].
using lm = pp::network<shape<6>, pp::token_embedding<11, 8>, pp::prenorm_transformer_block<2, 12>, pp::rms_norm<>,
                       pp::token_linear<11, false>>;
using lm_loss = pp::token_cross_entropy<float, 6, 11, 0>;
using lm_exec = ps::schedule_executor<lm, float, lm_loss, pp::optim::adamw<float>>;
using cnn = pp::network<shape<2, 6, 6>, pp::conv2d<4, 3, 1, 1>, pp::group_norm<2>, pp::relu, pp::flatten,
                        pp::dense<3>>;
using cnn_exec = ps::schedule_executor<cnn, float>;

struct batch {
    std::vector<float> x;
    std::vector<std::int32_t> y;
};

batch tokens(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    batch d;
    for (std::size_t i = 0; i < n * 6; ++i) d.x.push_back(static_cast<float>(rng() % 11));
    for (std::size_t i = 0; i < n * 6; ++i) d.y.push_back(static_cast<std::int32_t>(rng() % 11));  // 0: ignored
    return d;
}
batch images(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> g(0.f, 1.f);
    batch d;
    for (std::size_t i = 0; i < n * 72; ++i) d.x.push_back(g(rng));
    for (std::size_t i = 0; i < n; ++i) d.y.push_back(static_cast<std::int32_t>(rng() % 3));
    return d;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

template <class Exec>
void check_same_state(const Exec& a, const Exec& b) {
    CHECK(same_bits(a.parameters(), b.parameters()));
    for (std::size_t k = 0; k < Exec::optimizer_buffer_count; ++k) CHECK(same_bits(a.optimizer_state(k), b.optimizer_state(k)));
    CHECK(same_bits(a.state(), b.state()));
    CHECK(a.steps() == b.steps());
    CHECK(a.optimizer_step_count() == b.optimizer_step_count());
}

constexpr ps::schedule_kind kinds[] = {ps::schedule_kind::gpipe, ps::schedule_kind::one_f_one_b,
                                       ps::schedule_kind::zb_h1, ps::schedule_kind::zb_h2};


// For every schedule, 2BP on and off, both executors and k = 2, 3: a consecutive run of k steps (after one ordinary
// step, so the optimizer state is not fresh) equals k step() calls on the same batches, bit for bit.
template <class Exec>
void check_consecutive_equals_steps(const std::vector<pp::layer_range>& cut, typename Exec::options_type o,
                                    const std::vector<batch>& data, const pp::optim::hyperparameters<double>& h) {
    o.max_consecutive_steps = 3;
    for (const auto kind : ps::all_schedule_kinds)
        for (const bool two : {false, true})
            for (const auto ek : {pp::executor_kind::sequential, pp::executor_kind::concurrent})
                for (const std::size_t k : {2u, 3u}) {
                    if (!ps::schedule_accepts(kind, cut.size(), o.micro_batches)) continue;
                    INFO(ps::name(kind) << (two ? "+2bp" : "") << ", " << pp::to_string(ek) << ", k = " << k
                                        << ", p = " << cut.size());
                    o.executor = ek;
                    Exec ref(kind, two, cut, o), ex(kind, two, cut, o);
                    ref.step(data[0].x, data[0].y, h);
                    ex.step(data[0].x, data[0].y, h);
                    std::vector<ps::step_result> want;
                    std::vector<typename Exec::batch_view> views;
                    for (std::size_t n = 1; n <= k; ++n) {
                        auto hn = h;
                        hn.learning_rate *= 1.0 - 0.1 * static_cast<double>(n);  // a schedule: per-step values used
                        want.push_back(ref.step(data[n].x, data[n].y, hn));
                        views.push_back({data[n].x, data[n].y, hn});
                    }
                    const auto got = ex.consecutive_steps(views);
                    REQUIRE(got.size() == k);
                    for (std::size_t n = 0; n < k; ++n) {
                        CHECK(got[n].loss == want[n].loss);
                        CHECK(got[n].correct == want[n].correct);
                        CHECK(got[n].targets == want[n].targets);
                        CHECK(got[n].gradient_norm == want[n].gradient_norm);
                        CHECK(got[n].micro_batches == want[n].micro_batches);
                    }
                    check_same_state(ex, ref);
                    // and it goes on like the reference
                    const auto a = ex.step(data[4].x, data[4].y, h), b = ref.step(data[4].x, data[4].y, h);
                    CHECK(a.loss == b.loss);
                    check_same_state(ex, ref);
                }
}

// Probes (identity layers) for the overlap test: the first stage's counts its forwards and raises the flag at the
// first forward of step 1 (call m + 1); the last stage's holds its m-th backward-p2 call (the last one of step 0)
// until the flag is up, at most 30 s.
struct overlap_flags {
    static inline std::size_t m = 0;
    static inline std::atomic<std::size_t> forwards{0}, weight_calls{0};
    static inline std::atomic<bool> step1_started{false}, held{false}, timed_out{false};
};
template <class T, class In>
struct first_probe_layer {
    using value_type = T;
    using input_shape = In;
    using output_shape = In;
    static constexpr std::size_t parameter_count = 0;
    void forward(std::span<const T>, const T* x, T* y, std::size_t b, pp::no_stash&, pp::no_workspace&) const {
        std::copy(x, x + b * In::size, y);
        if (++overlap_flags::forwards == overlap_flags::m + 1) overlap_flags::step1_started = true;
    }
    void backward_input(std::span<const T>, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const pp::no_stash&, pp::no_workspace&) const {
        std::copy(dy, dy + b * In::size, dx);
    }
};
template <class T, class In>
struct last_probe_layer {
    using value_type = T;
    using input_shape = In;
    using output_shape = In;
    static constexpr std::size_t parameter_count = 1;  // unused; it makes the stage's W call the probe
    void init_parameters(std::span<T> w, std::uint64_t) const { w[0] = T(0); }
    void forward(std::span<const T>, const T* x, T* y, std::size_t b, pp::no_stash&, pp::no_workspace&) const {
        std::copy(x, x + b * In::size, y);
    }
    void backward_input(std::span<const T>, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const pp::no_stash&, pp::no_workspace&) const {
        std::copy(dy, dy + b * In::size, dx);
    }
    void backward_weight(std::span<T>, const T*, const T*, const T*, std::size_t, const pp::no_stash&,
                         pp::no_workspace&) const {
        if (++overlap_flags::weight_calls != overlap_flags::m) return;
        overlap_flags::held = true;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!overlap_flags::step1_started)
            if (std::chrono::steady_clock::now() > deadline) {
                overlap_flags::timed_out = true;
                return;
            } else {
                std::this_thread::sleep_for(std::chrono::microseconds(100));
            }
    }
};
struct first_probe {
    template <class T, class In>
    using bind = first_probe_layer<T, In>;
};
struct last_probe {
    template <class T, class In>
    using bind = last_probe_layer<T, In>;
};
using probed = pp::network<shape<6>, first_probe, pp::dense<6>, pp::relu, pp::dense<6>, last_probe, pp::dense<3>>;

}  // namespace

TEST_CASE("consecutive steps equal one step at a time, bitwise: tiny LLaMA-like model, token loss, AdamW",
          "[sync][consecutive][transformer]") {
    openblas_set_num_threads(1);
    std::vector<batch> data;
    for (std::uint64_t n = 0; n < 5; ++n) data.push_back(tokens(5, 30 + n));
    lm_exec::options_type o;
    o.micro_batches = 3;  // B = 5 not divisible by m
    o.max_batch = 5;
    o.optimizer = {.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8};
    o.seed = 4;
    const pp::optim::hyperparameters<double> h{.learning_rate = 0.01, .momentum = 0.0, .weight_decay = 0.01};
    constexpr std::size_t layers = pp::layer_stack<lm, float>::layer_count;
    // inside the block: before its attention (flat layer 3) and before the SwiGLU residual's fork (5); and 4 stages
    check_consecutive_equals_steps<lm_exec>(pp::partition_at(layers, {3, 5}), o, data, h);
    check_consecutive_equals_steps<lm_exec>(pp::partition_at(layers, {1, 3, 5}), o, data, h);
}

TEST_CASE("consecutive steps equal one step at a time, bitwise: CNN, momentum SGD, m = p and m > p",
          "[sync][consecutive]") {
    openblas_set_num_threads(1);
    std::vector<batch> data;
    for (std::uint64_t n = 0; n < 5; ++n) data.push_back(images(8, 50 + n));
    cnn_exec::options_type o;
    o.max_batch = 8;
    o.seed = 9;
    const pp::optim::hyperparameters<double> h{.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 1e-4};
    constexpr std::size_t layers = pp::layer_stack<cnn, float>::layer_count;
    for (const std::size_t m : {2u, 4u}) {
        o.micro_batches = m;
        check_consecutive_equals_steps<cnn_exec>(pp::partition_at(layers, {2}), o, data, h);
        check_consecutive_equals_steps<cnn_exec>(pp::partition_at(layers, {1, 2, 4}), o, data, h);  // 2 devices
    }
}

TEST_CASE("consecutive ZB-H2 steps overlap as the simulator's steady state says", "[sync][consecutive][simulator]") {
    openblas_set_num_threads(1);
    constexpr std::size_t p = 3, m = 6;
    const ps::schedule one = ps::zb_h2(p, m, true);
    const ps::schedule two = ps::consecutive_steps(one, 2);
    REQUIRE_NOTHROW(ps::validate(two));
    CHECK(two.steps == 2);
    CHECK(two.micro_batches_per_step() == m);
    // The simulator's steady state of the one-step schedule is the executor's two-step lists: the same spans (ops and
    // each stage's two optimizer steps, same times, steps and micro-batches), for every schedule.
    const ps::stage_costs c{.forward = 1, .backward_input = 1, .backward_weight = 1, .optimizer = 0.5};
    for (const auto kind : ps::all_schedule_kinds)
        for (const bool two_bp : {false, true}) {
            INFO(ps::name(kind) << (two_bp ? "+2bp" : ""));
            const auto sc = ps::make_schedule(kind, 4, 4, two_bp);
            const auto a = ps::simulate(sc, {c}, {.steps = 3, .barrier = false}).spans;
            const auto lists = ps::simulate(ps::consecutive_steps(sc, 3), {c});
            const auto& b = lists.spans;
            REQUIRE(a.size() == b.size());
            for (std::size_t i = 0; i < a.size(); ++i) {
                CHECK(a[i].stage == b[i].stage);
                CHECK(a[i].kind == b[i].kind);
                CHECK(a[i].start == b[i].start);
                CHECK(a[i].end == b[i].end);
                CHECK(a[i].step == b[i].step);
                CHECK(a[i].micro_batch == b[i].micro_batch);
            }
        }
    const auto steady = ps::simulate(one, {c}, {.steps = 2, .barrier = false});
    // ...where stage 0's first forward of step 1 starts before the last stage's last W of step 0 ends, and the
    // barrier would forbid that.
    auto first_f1 = [](const std::vector<ps::op_span>& sp) {
        double t = std::numeric_limits<double>::infinity();
        for (const auto& s : sp)
            if (s.stage == 0 && s.step == 1 && s.kind == ps::span_kind::forward) t = std::min(t, s.start);
        return t;
    };
    auto last_w0 = [](const std::vector<ps::op_span>& sp) {
        double t = 0;
        for (const auto& s : sp)
            if (s.stage == p - 1 && s.step == 0 && s.kind == ps::span_kind::backward_weight) t = std::max(t, s.end);
        return t;
    };
    CHECK(first_f1(steady.spans) < last_w0(steady.spans));
    const auto barrier = ps::simulate(one, {c}, {.steps = 2, .barrier = true});
    CHECK(first_f1(barrier.spans) >= last_w0(barrier.spans));
    CHECK(steady.step_time < barrier.step_time);

    // The sequential executor's run of the same two steps shows the same overlap (its spans are in run order).
    using stack = pp::layer_stack<cnn, float>;
    cnn_exec::options_type o;
    o.micro_batches = m;
    o.max_batch = m;
    o.max_consecutive_steps = 2;
    o.executor = pp::executor_kind::sequential;
    cnn_exec ex(ps::schedule_kind::zb_h2, true, pp::partition_at(stack::layer_count, {2, 3}), o);
    const batch d0 = images(m, 1), d1 = images(m, 2);
    const pp::optim::hyperparameters<double> h{.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 0.0};
    const std::vector<cnn_exec::batch_view> v{{d0.x, d0.y, h}, {d1.x, d1.y, h}};
    ex.consecutive_steps(v);
    const auto spans = ex.spans();
    CHECK(first_f1(spans) < last_w0(spans));
    std::size_t optimizer_spans = 0;
    for (const auto& sp : spans) optimizer_spans += sp.kind == ps::span_kind::optimizer ? 1 : 0;
    CHECK(optimizer_spans == 2 * p);
}

TEST_CASE("the concurrent executor runs consecutive steps overlapped: step 1 starts before step 0 ends",
          "[sync][consecutive][concurrent]") {
    if (tbb::info::default_concurrency() < 2) {
        WARN("one hardware thread: the overlap probe needs two; skipped");
        return;
    }
    openblas_set_num_threads(1);
    constexpr std::size_t m = 6;
    overlap_flags::m = m;
    using exec = ps::schedule_executor<probed, float>;
    exec::options_type o;
    o.micro_batches = m;
    o.max_batch = m;
    o.max_consecutive_steps = 2;
    o.executor = pp::executor_kind::concurrent;
    const pp::optim::hyperparameters<double> h{.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 0.0};
    std::mt19937_64 rng(3);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> x(m * 6);
    std::vector<std::int32_t> y(m);
    for (auto& v : x) v = g(rng);
    for (auto& v : y) v = static_cast<std::int32_t>(rng() % 3);
    for (const auto kind : kinds) {
        INFO(ps::name(kind) << "+2bp");
        overlap_flags::forwards = 0;
        overlap_flags::weight_calls = 0;
        overlap_flags::step1_started = false;
        overlap_flags::held = false;
        overlap_flags::timed_out = false;
        // stage 0: the first probe and a dense; stage 1: relu, dense; stage 2: the last probe and the head
        exec ex(kind, true, pp::partition_at(pp::layer_stack<probed, float>::layer_count, {2, 4}), o);
        ex.consecutive_steps(std::vector<exec::batch_view>{{x, y, h}, {x, y, h}});
        CHECK(overlap_flags::held);
        CHECK_FALSE(overlap_flags::timed_out);
        CHECK(overlap_flags::forwards == 2 * m);
    }
}

TEST_CASE("consecutive steps: list checks and call errors before any work", "[sync][consecutive][errors]") {
    // a stage that runs an op of step 1 before one of step 0
    ps::schedule bad = ps::consecutive_steps(ps::one_f_one_b(2, 2, false), 2);
    std::swap(bad.ops[0][3], bad.ops[0][4]);
    CHECK_THROWS_WITH(ps::validate(bad), Catch::Contains("earlier step"));
    CHECK_THROWS_AS(ps::consecutive_steps(ps::gpipe(2, 2, false), 0), std::invalid_argument);
    CHECK_THROWS_AS(ps::consecutive_steps(bad, 2), std::invalid_argument);

    using stack = pp::layer_stack<cnn, float>;
    cnn_exec::options_type o;
    o.micro_batches = 4;
    o.max_batch = 8;
    o.max_consecutive_steps = 2;
    cnn_exec ex(ps::schedule_kind::zb_h2, true, pp::partition_at(stack::layer_count, {2}), o);
    const auto w = ex.parameters();
    const batch d8 = images(8, 1), d6 = images(6, 2), d3 = images(3, 3);
    const pp::optim::hyperparameters<double> h{.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 0.0};
    using views = std::vector<cnn_exec::batch_view>;
    CHECK_THROWS_WITH(ex.consecutive_steps(views{{d8.x, d8.y, h}, {d8.x, d8.y, h}, {d8.x, d8.y, h}}),
                      Catch::Contains("max_consecutive_steps = 2"));
    CHECK_THROWS_WITH(ex.consecutive_steps(views{{d8.x, d8.y, h}, {d6.x, d6.y, h}}), Catch::Contains("same size"));
    CHECK_THROWS_WITH(ex.consecutive_steps(views{{d3.x, d3.y, h}, {d3.x, d3.y, h}}),
                      Catch::Contains("fewer than the 4 micro-batches"));
    batch bad_label = d8;
    bad_label.y[5] = 3;
    CHECK_THROWS_AS(ex.consecutive_steps(views{{d8.x, d8.y, h}, {bad_label.x, bad_label.y, h}}), std::out_of_range);
    CHECK_THROWS_AS(ex.consecutive_steps(views{}), std::invalid_argument);
    CHECK(same_bits(ex.parameters(), w));
    CHECK(ex.steps() == 0);
    o.max_gradient_norm = 1.0;
    cnn_exec clipped(ps::schedule_kind::zb_h2, true, pp::partition_at(stack::layer_count, {2}), o);
    CHECK_THROWS_WITH(clipped.consecutive_steps(views{{d8.x, d8.y, h}, {d8.x, d8.y, h}}),
                      Catch::Contains("clipping"));
    o.max_consecutive_steps = 0;
    CHECK_THROWS_AS(cnn_exec(ps::schedule_kind::zb_h2, true, pp::partition_at(stack::layer_count, {2}), o),
                    std::invalid_argument);
}

TEST_CASE("consecutive_steps_or_undo on a NaN ends where step_or_undo on each batch ends", "[sync][consecutive]") {
    openblas_set_num_threads(1);
    using stack = pp::layer_stack<cnn, float>;
    cnn_exec::options_type o;
    o.micro_batches = 2;
    o.max_batch = 4;
    o.max_consecutive_steps = 3;
    o.seed = 5;
    const auto cut = pp::partition_at(stack::layer_count, {2});
    const pp::optim::hyperparameters<double> h{.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 0.0};
    const batch a = images(4, 1), c = images(4, 3);
    batch nan_batch = images(4, 2);
    nan_batch.x[7] = std::numeric_limits<float>::quiet_NaN();
    for (const auto ek : {pp::executor_kind::sequential, pp::executor_kind::concurrent}) {
        o.executor = ek;
        cnn_exec ex(ps::schedule_kind::zb_h1, true, cut, o), ref(ps::schedule_kind::zb_h1, true, cut, o);
        ref.step_or_undo(a.x, a.y, h, 0);
        CHECK_THROWS_AS(ref.step_or_undo(nan_batch.x, nan_batch.y, h, 4), pp::non_finite_loss_error);
        try {
            ex.consecutive_steps_or_undo(
                std::vector<cnn_exec::batch_view>{{a.x, a.y, h}, {nan_batch.x, nan_batch.y, h}, {c.x, c.y, h}}, 0);
            FAIL("no exception");
        } catch (const pp::non_finite_loss_error& e) {
            CHECK(e.step() == 1);
            CHECK(e.samples_seen() == 4);
        }
        check_same_state(ex, ref);
        CHECK(ex.steps() == 1);
    }
}
