// A layer that throws inside a stage: in forward, backward-p1 or backward-p2, in the PB engine
// (sequential and concurrent executors) and the synchronous 2BP executor (sequential and concurrent, 2BP on and
// off). The exception reaches the caller as pipeprop::stage_error naming the stage and the micro-batch (the layer's
// exception nested), nothing hangs (every run is bounded by a watchdog), and afterwards:
//   - PB: the engine refuses every later call with std::logic_error (pb/engine.hpp, "Failures");
//   - sync: once the parameters and velocity from before the failed step are restored, the executor continues
//     exactly like one that never failed (sync/executor.hpp, step()).
#include <catch2/catch.hpp>

#include <cblas.h>

#include <pipeprop/pb/checkpoint.hpp>
#include <pipeprop/pb/engine.hpp>
#include <pipeprop/pipeprop.hpp>
#include <pipeprop/stage_error.hpp>
#include <pipeprop/sync/executor.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <vector>

namespace {

namespace pp = pipeprop;
namespace pb = pipeprop::pb;
namespace ps = pipeprop::sync;
using pp::shape;

// ---- the faulty layer -------------------------------------------------------------------------------------------
enum class phase : int { none, forward, p1, p2 };
std::atomic<int> armed{0};          // which phase throws
std::atomic<long> calls_left{0};    // the call of that phase that throws (1 = the next one)
std::atomic<long> throws{0};        // how many times it threw

void maybe_throw(phase ph, const char* name) {
    if (armed.load() == int(ph) && calls_left.fetch_sub(1) == 1) {
        ++throws;
        throw std::runtime_error(std::string("injected failure in ") + name);
    }
}
void arm(phase ph, long k) {
    calls_left = k;
    throws = 0;
    armed = int(ph);
}
void disarm() { armed = int(phase::none); }

/// y = x * w element-wise, w [n]; throws on the k-th call of the armed phase.
template <class T, class Shape>
struct faulty_layer {
    using value_type = T;
    using input_shape = Shape;
    using output_shape = Shape;
    static constexpr std::size_t parameter_count = Shape::size;
    using stash_type = pp::no_stash;
    using workspace_type = pp::no_workspace;
    void init_parameters(std::span<T> w, std::uint64_t seed) const {
        std::mt19937_64 rng(seed);
        for (auto& v : w) v = T(1) + pp::uniform<T>(rng, T(-0.2), T(0.2));
    }
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type&, workspace_type&) const {
        maybe_throw(phase::forward, "forward");
        for (std::size_t n = 0; n < b; ++n)
            for (std::size_t i = 0; i < parameter_count; ++i) y[n * parameter_count + i] = x[n * parameter_count + i] * w[i];
    }
    void backward_input(std::span<const T> w, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const stash_type&, workspace_type&) const {
        maybe_throw(phase::p1, "backward-p1");
        for (std::size_t n = 0; n < b; ++n)
            for (std::size_t i = 0; i < parameter_count; ++i)
                dx[n * parameter_count + i] = dy[n * parameter_count + i] * w[i];
    }
    void backward_weight(std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b, const stash_type&,
                         workspace_type&) const {
        maybe_throw(phase::p2, "backward-p2");
        for (std::size_t n = 0; n < b; ++n)
            for (std::size_t i = 0; i < parameter_count; ++i)
                dw[i] += dy[n * parameter_count + i] * x[n * parameter_count + i];
    }
};
struct faulty {
    template <class T, class In>
    using bind = faulty_layer<T, In>;
};

/// 6 layers; the faulty one (layer 2) opens stage 1 of the cut below (so its backward-p1 runs).
using net = pp::network<shape<4>, pp::dense<5>, pp::relu, faulty, pp::dense<4>, pp::relu, pp::dense<3>>;
const std::vector<pp::layer_range> cut{{0, 2}, {2, 4}, {4, 6}};
constexpr std::size_t faulty_stage = 1;

/// Runs f on another thread; a run that takes longer than 60 s is a hang: report it and end the process (a
/// hanging executor cannot be joined).
template <class F>
void bounded(const char* what, F&& f) {
    auto done = std::async(std::launch::async, std::forward<F>(f));
    if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
        std::fprintf(stderr, "test_stage_failures: HANG: %s did not finish within 60 s\n", what);
        std::fflush(stderr);
        std::_Exit(3);
    }
    done.get();  // rethrows what the body threw (a failed REQUIRE)
}

struct data {
    std::vector<float> x;
    std::vector<std::int32_t> y;
    explicit data(std::size_t samples, std::uint64_t seed = 3) : x(samples * 4), y(samples) {
        std::mt19937_64 rng(seed);
        for (auto& v : x) v = pp::uniform<float>(rng, -1.0f, 1.0f);
        for (auto& l : y) l = static_cast<std::int32_t>(rng() % 3);
    }
};

std::string nested_what(const std::exception& e) {
    try {
        std::rethrow_if_nested(e);
    } catch (const std::exception& inner) {
        return inner.what();
    }
    return "(none)";
}

struct blas_single_thread {
    blas_single_thread() { openblas_set_num_threads(1); }
} const blas_once;

}  // namespace

// ---- PB -------------------------------------------------------------------------------------------------------

namespace {
template <class Policy>
void pb_failure(pb::executor_kind kind, std::size_t lanes, phase ph) {
    constexpr std::size_t k = 6;  // the 6th call of the phase at the faulty layer: micro-batch 5
    const char* phase_text = ph == phase::forward ? "forward" : "backward";
    const char* layer_text = ph == phase::forward ? "forward" : (ph == phase::p1 ? "backward-p1" : "backward-p2");
    INFO(pb::to_string(kind) << " executor, lanes " << lanes << ", layer throws in its " << layer_text);
    pb::options<Policy> opt;
    opt.executor = kind;
    opt.lanes = lanes;
    opt.push_buffer = 4;
    pb::engine<net, Policy> e(cut, opt);
    e.set_hyperparameters({0.01f, 0.9f, 0.0f});
    const data d(40);
    arm(ph, k);
    std::size_t caught = 0;
    std::string what;
    bounded("PB run with a throwing layer", [&] {
        try {
            for (std::size_t n = 0; n < 40; ++n)
                (void)e.push(std::span<const float>(d.x.data() + 4 * n, 4), std::span<const std::int32_t>(&d.y[n], 1),
                             1);
            (void)e.drain();
        } catch (const pp::stage_error& err) {
            ++caught;
            what = err.what();
            CHECK(err.stage() == faulty_stage);
            CHECK(err.micro_batch() == k - 1);
            CHECK(err.phase() == phase_text);
            CHECK(nested_what(err) == std::string("injected failure in ") + layer_text);
        }
    });
    disarm();
    INFO("what(): " << what);
    REQUIRE(caught == 1);
    CHECK(throws == 1);
    CHECK(what.find("stage 1, micro-batch 5, " + std::string(phase_text) + ": injected failure in " + layer_text) !=
          std::string::npos);
    CHECK(what.find(kind == pb::executor_kind::sequential ? "sequential_executor" : "concurrent_executor") !=
          std::string::npos);
    REQUIRE(e.failed());

    // Every later call is refused, naming the call and the first failure.
    std::vector<float> block(pp::layer_stack<net, float>::parameter_count);
    const std::vector<float> rates(cut.size(), 0.01f);
    auto refused = [&](const char* call, auto&& f) {
        INFO("call " << call);
        bounded(call, [&] {
            try {
                f();
                FAIL("not refused");
            } catch (const std::logic_error& err) {
                const std::string m = err.what();
                CHECK(m.find(std::string("pipeprop::pb::engine::") + call + ": the engine failed earlier") !=
                      std::string::npos);
                CHECK(m.find("stage 1, micro-batch 5") != std::string::npos);
            }
        });
    };
    refused("push", [&] { (void)e.push(std::span<const float>(d.x.data(), 4), std::span<const std::int32_t>(d.y.data(), 1), 1); });
    refused("drain", [&] { (void)e.drain(); });
    refused("evaluate", [&] { (void)e.evaluate(std::span<const float>(d.x.data(), 4), std::span<const std::int32_t>(d.y.data(), 1), 1); });
    refused("copy_parameters", [&] { e.copy_parameters(block); });
    refused("copy_velocities", [&] { e.copy_velocities(block); });
    refused("load_parameters", [&] { e.load_parameters(block); });
    refused("restore_counters", [&] { e.restore_counters(0, 0, rates); });
    refused("save_state", [&] {
        pp::checkpoint c;
        pb::save_state(e, c);
    });
    // Refused again: the state does not heal.
    refused("push", [&] { (void)e.push(std::span<const float>(d.x.data(), 4), std::span<const std::int32_t>(d.y.data(), 1), 1); });
}
}  // namespace

TEST_CASE("PB: a layer that throws in forward, backward-p1 or backward-p2 is named, the engine then refuses every "
          "call",
          "[pb][failures]") {
    for (phase ph : {phase::forward, phase::p1, phase::p2}) {
        pb_failure<pb::policy::none>(pb::executor_kind::sequential, 0, ph);
        for (std::size_t lanes : {std::size_t{0}, std::size_t{1}, cut.size()})
            pb_failure<pb::policy::none>(pb::executor_kind::concurrent, lanes, ph);
        pb_failure<pb::policy::sc_lwp<>>(pb::executor_kind::concurrent, cut.size(), ph);
        pb_failure<pb::policy::weight_stashing>(pb::executor_kind::concurrent, 0, ph);
    }
}

TEST_CASE("PB: bad arguments and a failure-free run do not make the engine fail", "[pb][failures]") {
    pb::engine<net, pb::policy::none> e(cut, {});
    const data d(8);
    CHECK_THROWS_AS(e.push(std::span<const float>(d.x.data(), 3), std::span<const std::int32_t>(d.y.data(), 1), 1),
                    std::invalid_argument);
    CHECK_FALSE(e.failed());
    for (std::size_t n = 0; n < 8; ++n)
        (void)e.push(std::span<const float>(d.x.data() + 4 * n, 4), std::span<const std::int32_t>(&d.y[n], 1), 1);
    (void)e.drain();
    CHECK_FALSE(e.failed());
    CHECK(e.evaluate(d.x, d.y, 8).samples == 8);
}

// ---- sync -----------------------------------------------------------------------------------------------------

namespace {
template <ps::schedule_kind Kind, bool TwoBP>
void sync_failure(ps::executor_kind kind, phase ph) {
    using exec = ps::pipeline_executor<net, float, Kind, TwoBP>;
    INFO("sync " << ps::name(kind) << ", schedule " << int(Kind) << ", 2BP " << TwoBP << ", phase " << int(ph));
    ps::executor_options opt;
    opt.micro_batches = 4;
    opt.max_batch = 8;
    opt.seed = 11;
    opt.executor = kind;
    exec a(cut, opt), ref(cut, opt);
    const data d1(8, 1), d2(8, 2), d3(8, 3);
    const pp::optim::hyperparameters<double> lr{.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 0.0};
    (void)a.step(d1.x, d1.y, lr);
    (void)ref.step(d1.x, d1.y, lr);
    const std::vector<float> w = a.parameters(), v = a.velocity();

    // Step 1 (0-based) fails at the 2nd call of the phase at the faulty layer: micro-batch 1 of that step.
    const char* op_text = ph == phase::forward ? "forward"
                          : TwoBP             ? (ph == phase::p1 ? "backward-p1" : "backward-p2")
                                              : "backward (fused)";
    arm(ph, 2);
    std::size_t caught = 0;
    bounded("sync step with a throwing layer", [&] {
        try {
            (void)a.step(d2.x, d2.y, lr);
        } catch (const pp::stage_error& err) {
            ++caught;
            const std::string m = err.what();
            INFO("what(): " << m);
            CHECK(err.stage() == faulty_stage);
            CHECK(err.micro_batch() == 1);
            CHECK(err.phase() == op_text);
            CHECK(m.find("pipeprop::sync::pipeline_executor: stage 1, micro-batch 1 (of step 1), " +
                         std::string(op_text) + ": injected failure in ") != std::string::npos);
        }
    });
    disarm();
    REQUIRE(caught == 1);
    CHECK(throws == 1);
    CHECK(a.steps() == 1);

    // The documented reset: restore parameters and velocity; from then on a == ref bitwise.
    a.set_parameters(w);
    a.set_velocity(v);
    for (const data* d : {&d2, &d3}) {
        ps::step_result ra, rr;
        bounded("sync step after the reset", [&] {
            ra = a.step(d->x, d->y, lr);
            rr = ref.step(d->x, d->y, lr);
        });
        CHECK(ra.loss == rr.loss);
        CHECK(ra.correct == rr.correct);
        const auto pa = a.parameters(), pr = ref.parameters(), va = a.velocity(), vr = ref.velocity();
        CHECK(std::memcmp(pa.data(), pr.data(), pa.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(va.data(), vr.data(), va.size() * sizeof(float)) == 0);
    }
    CHECK(a.steps() == ref.steps());
    for (std::size_t s = 0; s < cut.size(); ++s)
        CHECK(a.stage_at(s).optimizer().step_count() == ref.stage_at(s).optimizer().step_count());
}
}  // namespace

TEST_CASE("sync: a layer that throws in F, B, W or BW is named; after restoring the parameters the executor "
          "continues exactly",
          "[sync][failures]") {
    for (auto kind : {ps::executor_kind::sequential, ps::executor_kind::concurrent})
        for (phase ph : {phase::forward, phase::p1, phase::p2}) {
            sync_failure<ps::schedule_kind::one_f_one_b, true>(kind, ph);
            sync_failure<ps::schedule_kind::zb_h1, true>(kind, ph);
            sync_failure<ps::schedule_kind::gpipe, false>(kind, ph);
        }
}
