// PB executors (include/pipeprop/pb/): the concurrent flow-graph executor is bit-identical to the sequential
// reference for every mitigation policy (>= 200 micro-batches, S = 10, b = 1 and b = 2 with a final partial
// micro-batch, a drain in the middle); fewer micro-batches than stages; same seed same run; the delays, measured
// from outside by a probe layer that logs the weights each pass was given, equal the constexpr D_s; S = 1 PB
// equals the sequential SGD trainer bitwise; with subnormals flushed (pb::options::flush_subnormals) both executors
// still agree bitwise, and the flush guard flushes and restores.
#include <catch2/catch.hpp>

#include <pipeprop/flush_subnormals.hpp>
#include <pipeprop/sequential_trainer.hpp>

#include "unit/test_pb_support.hpp"

#include <boost/mp11/algorithm.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <type_traits>

using namespace pb_test;

namespace {

template <class Policy>
using fine_cnn = pb::pipeline<cnn, pp::fine_grained<pp::parameter_free::own_stage>, Policy>;

template <class Policy>
pb::options<Policy> opts(pb::executor_kind k, std::size_t max_b, std::size_t push_buffer = 16) {
    pb::options<Policy> o;
    o.max_batch = max_b;
    o.executor = k;
    o.push_buffer = push_buffer;
    o.seed = 11;
    if constexpr (Policy::corrects_discrepancy) o.policy.warmup_samples = 150;
    return o;
}

/// Runs the same training with both executors and requires identical bits everywhere.
template <class Policy>
void check_executors_agree(std::size_t b, std::size_t partial_last) {
    openblas_set_num_threads(1);
    using pipe = fine_cnn<Policy>;
    static_assert(pipe::stage_count == 10 && pipe::delays[0] == 18 && pipe::delays[9] == 0);
    const std::size_t count = 210, drain_at = 97;
    pipe seq(opts<Policy>(pb::executor_kind::sequential, b));
    pipe con(opts<Policy>(pb::executor_kind::concurrent, b, 16));
    const bool fixed = Policy::fixed_momentum;
    const run_record rs = drive(seq, count, b, partial_last, drain_at, fixed);
    const run_record rc = drive(con, count, b, partial_last, drain_at, fixed);
    INFO("policy " << Policy::name << ", b = " << b);
    REQUIRE(rs.ids.size() == count);  // the engines throw on a non-finite loss: every loss here is finite
    CHECK(rc.ids == rs.ids);
    CHECK(bitwise_equal(rc.losses, rs.losses));
    CHECK(rc.correct == rs.correct);
    CHECK(bitwise_equal(rc.weights, rs.weights));
    CHECK(bitwise_equal(rc.velocities, rs.velocities));
    // The run did train (a test that cannot fail is no test): the weights moved from their initial values.
    pipe fresh(opts<Policy>(pb::executor_kind::sequential, b));
    std::vector<float> w0(pipe::stack_type::parameter_count);
    fresh.copy_parameters(w0);
    CHECK_FALSE(bitwise_equal(w0, rs.weights));
    // Both executors observed the compile-time delays; the concurrent one held D_s + 1 micro-batches per stage.
    const auto ss = seq.stats(), sc = con.stats();
    for (std::size_t s = 0; s < pipe::stage_count; ++s) {
        CHECK(ss.stages[s].observed_delay_max == pipe::delays[s]);
        CHECK(sc.stages[s].observed_delay_max == pipe::delays[s]);
        CHECK(sc.stages[s].full_delay_count == ss.stages[s].full_delay_count);
        CHECK(sc.stages[s].in_flight_max == pipe::delays[s] + 1);
        CHECK(sc.stages[s].activation_slots == pipe::delays[s] + 1);
    }
}

}  // namespace

TEST_CASE("concurrent == sequential bitwise: none, sc, lwp", "[pb][executors]") {
    for (auto [b, last] : {std::pair<std::size_t, std::size_t>{1, 0}, {2, 1}}) {
        check_executors_agree<pb::policy::none>(b, last);
        check_executors_agree<pb::policy::spike_compensation<>>(b, last);
        check_executors_agree<pb::policy::spike_compensation<std::ratio<9, 10>>>(b, last);
        check_executors_agree<pb::policy::linear_weight_prediction<>>(b, last);
        check_executors_agree<pb::policy::linear_weight_prediction<pb::lwp_form::weight_difference>>(b, last);
        check_executors_agree<pb::policy::linear_weight_prediction<pb::lwp_form::velocity, pb::fixed_horizon<3>>>(b,
                                                                                                                  last);
    }
}

TEST_CASE("concurrent == sequential bitwise: sc_lwp, stash, pipemare", "[pb][executors]") {
    for (auto [b, last] : {std::pair<std::size_t, std::size_t>{1, 0}, {2, 1}}) {
        check_executors_agree<pb::policy::sc_lwp<>>(b, last);
        check_executors_agree<pb::policy::sc_lwp<pb::runtime_momentum, pb::lwp_form::weight_difference>>(b, last);
        check_executors_agree<pb::policy::weight_stashing>(b, last);
        check_executors_agree<pb::policy::pipemare>(b, last);
    }
}

TEST_CASE("per-stage activation bytes follow the layer types; a concurrent stage keeps one set of gradients and "
          "no copy of its boundaries", "[pb][executors][memory]") {
    // Per stage [begin, end) and micro-batch capacity b: values A = sum over k in [begin, end] of
    // activation_size[k] b floats (inputs of its layers and its output), as many gradient floats, and the layers'
    // stashes L. The sequential executor holds one micro-batch (2 A + L); the concurrent one D_s + 1 activation slots
    // (A' + L + b int32 targets each, A' = A without the input, unless stage 0, and without the output, unless the
    // last stage: those are the forward channels' buffers, pb/forward_channel.hpp) and one set of gradients A.
    openblas_set_num_threads(1);
    using policy = pb::policy::sc_lwp<>;
    using pipe = fine_cnn<policy>;
    using stack = pipe::stack_type;
    const std::size_t b = 3;
    pipe seq(opts<policy>(pb::executor_kind::sequential, b));
    pipe con(opts<policy>(pb::executor_kind::concurrent, b, 4));
    (void)drive(seq, 30, b, 0, 30, false);
    (void)drive(con, 30, b, 0, 30, false);
    const auto ss = seq.stats(), sc = con.stats();
    const stack net{};
    std::size_t slot_total = 0, shared_total = 0;
    for (std::size_t s = 0; s < pipe::stage_count; ++s) {
        const pp::layer_range r = sc.stages[s].layers;
        std::size_t values = 0;
        for (std::size_t k = r.begin; k <= r.end; ++k) values += stack::activation_size[k] * b * sizeof(float);
        std::size_t stashes = 0;
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<stack::layer_count>>([&](auto I) {
            if (I >= r.begin && I < r.end) {
                const auto& layer = net.template layer<I>();
                stashes += pp::stash_bytes(layer, pp::make_stash(layer, b));
            }
        });
        const std::size_t slots = pipe::delays[s] + 1, targets = b * sizeof(std::int32_t);
        const std::size_t boundaries = (s > 0 ? stack::activation_size[r.begin] * b * sizeof(float) : 0) +
                                       (s + 1 < pipe::stage_count ? stack::activation_size[r.end] * b * sizeof(float)
                                                                  : 0);
        INFO("stage " << s << ", layers [" << r.begin << ", " << r.end << "), D = " << pipe::delays[s]);
        CHECK(ss.stages[s].stash_bytes == 2 * values + stashes);
        CHECK(sc.stages[s].activation_slots == slots);
        CHECK(sc.stages[s].stash_bytes == slots * (values - boundaries + stashes + targets) + values);
        slot_total += slots * (2 * values + stashes + targets);
        shared_total += sc.stages[s].stash_bytes;
    }
    // This pipeline's stashes are small (max-pool indices, group-norm statistics): sharing the gradients brings the
    // concurrent executor's activation memory close to half of one gradient set per slot.
    CHECK(2 * shared_total < slot_total * 11 / 10);
    CHECK(shared_total < slot_total);
}

TEST_CASE("load adaptation: probes the other mode, switches to the faster, backs off while one wins clearly",
          "[pb][executors][load]") {
    pb::load_adapter off;  // probe period 0: always the lanes
    off.measured(0, 16, 1.0);
    CHECK_FALSE(off.enabled());
    CHECK_FALSE(off.next_inline());
    CHECK(off.stats().lane_runs == 0);

    pb::load_adapter a(4);
    std::size_t id = 0;
    const auto run = [&](double micro_batches_per_second) {  // one measured run of 16 micro-batches
        a.measured(id, 16, 16.0 / micro_batches_per_second);
        id += 16;
    };
    for (int i = 0; i < 4; ++i) {
        CHECK_FALSE(a.next_inline());
        run(100.0);  // lanes
    }
    CHECK(a.next_inline());  // the probe
    run(200.0);              // inline twice as fast (a competing process on one core): switch
    REQUIRE(a.stats().switch_count == 1);
    CHECK(a.stats().switches[0].to_inline);
    CHECK(a.stats().switches[0].micro_batch == 80);
    CHECK(a.stats().switches[0].lanes_rate == 100.0);
    CHECK(a.stats().switches[0].inline_rate == 200.0);
    // After a switch the next probe comes after 4 runs; won clearly (2x > 1.15x), after 8, 16, 32 (8 periods at
    // most).
    for (const std::size_t wait : {4, 8, 16, 32, 32}) {
        for (std::size_t i = 0; i < wait; ++i) {
            CHECK(a.next_inline());
            run(200.0);
        }
        CHECK_FALSE(a.next_inline());  // probe the lanes
        run(100.0);
    }
    CHECK(a.stats().switch_count == 1);
    // The load is gone: the next probe finds the lanes faster and switches back; a close call resets the period.
    for (std::size_t i = 0; i < 32; ++i) run(200.0);
    CHECK_FALSE(a.next_inline());
    run(330.0);
    CHECK(a.stats().switch_count == 2);
    CHECK_FALSE(a.stats().switches[1].to_inline);
    for (std::size_t i = 0; i < 4; ++i) {  // a switch: the next probe after 4 runs
        CHECK_FALSE(a.next_inline());
        run(330.0);
    }
    CHECK(a.next_inline());
    run(333.0);  // inline 1% faster: within the margin, no switch; close call: back to 4 runs
    CHECK(a.stats().switch_count == 2);
    for (std::size_t i = 0; i < 4; ++i) {
        CHECK_FALSE(a.next_inline());
        run(330.0);
    }
    CHECK(a.next_inline());
    CHECK(a.stats().probes == 8);
    CHECK(a.stats().lane_runs + a.stats().inline_runs == id / 16);
}

TEST_CASE("load adaptation: runs that alternate between lanes and inline give the sequential reference's bits",
          "[pb][executors][load]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::sc_lwp<>;
    using pipe = fine_cnn<policy>;
    const std::size_t b = 1, count = 200, drain_at = 92;
    pipe seq(opts<policy>(pb::executor_kind::sequential, b));
    auto o = opts<policy>(pb::executor_kind::concurrent, b, 4);
    o.lane_starts = {0, 4, 7};   // three lanes on any machine
    o.load_probe_period = 1;     // a probe after every measured run: both modes run, whatever they measure
    pipe con(o);
    const run_record rs = drive(seq, count, b, 0, drain_at, false);
    const run_record rc = drive(con, count, b, 0, drain_at, false);
    REQUIRE(rs.ids.size() == count);
    CHECK(rc.ids == rs.ids);
    CHECK(bitwise_equal(rc.losses, rs.losses));
    CHECK(bitwise_equal(rc.weights, rs.weights));
    CHECK(bitwise_equal(rc.velocities, rs.velocities));
    const pb::load_adaptation_stats load = con.stats().load;
    CHECK(load.enabled);
    CHECK(load.inline_runs > 5);
    CHECK(load.lane_runs > 5);
    CHECK(load.probes > 5);
    CHECK(load.lane_runs + load.inline_runs == count / 4 + 2);  // the runs of 4 pushes and the two drains
    CHECK_FALSE(seq.stats().load.enabled);
    // One lane, or adaptation off: nothing to adapt.
    o.lane_starts = {0};
    CHECK_FALSE(pipe(o).stats().load.enabled);
    o.lane_starts = {0, 4, 7};
    o.load_probe_period = 0;
    CHECK_FALSE(pipe(o).stats().load.enabled);
}

TEST_CASE("the lane count does not change the results", "[pb][executors][lanes]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::sc_lwp<>;
    using pipe = fine_cnn<policy>;
    pipe seq(opts<policy>(pb::executor_kind::sequential, 2));
    const run_record rs = drive(seq, 150, 2, 1, 61);
    for (const std::size_t lanes : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{10}, std::size_t{0}}) {
        CAPTURE(lanes);
        auto o = opts<policy>(pb::executor_kind::concurrent, 2, 8);
        o.lanes = lanes;
        pipe con(o);
        const run_record rc = drive(con, 150, 2, 1, 61);
        CHECK(rc.ids == rs.ids);
        CHECK(bitwise_equal(rc.losses, rs.losses));
        CHECK(bitwise_equal(rc.weights, rs.weights));
        CHECK(bitwise_equal(rc.velocities, rs.velocities));
        const auto st = con.stats();
        const std::size_t expected = lanes == 0 ? st.stages.back().lane + 1 : std::min<std::size_t>(lanes, 10);
        CHECK(st.stages.front().lane == 0);
        CHECK(st.stages.back().lane + 1 == expected);
        for (std::size_t s = 1; s < st.stages.size(); ++s) {  // consecutive stages, lanes in order, none empty
            CHECK(st.stages[s].lane >= st.stages[s - 1].lane);
            CHECK(st.stages[s].lane <= st.stages[s - 1].lane + 1);
        }
        for (std::size_t s = 0; s < pipe::stage_count; ++s) CHECK(st.stages[s].in_flight_max == pipe::delays[s] + 1);
    }
}

TEST_CASE("the push buffer size does not change the results", "[pb][executors]") {
    openblas_set_num_threads(1);
    using pipe = pb::pipeline<mlp, pp::fine_grained<pp::parameter_free::own_stage>, pb::policy::sc_lwp<>>;
    pipe a(opts<pb::policy::sc_lwp<>>(pb::executor_kind::concurrent, 1, 1));
    pipe b(opts<pb::policy::sc_lwp<>>(pb::executor_kind::concurrent, 1, 37));
    const run_record ra = drive(a, 120, 1, 0, 50);
    const run_record rb = drive(b, 120, 1, 0, 50);
    CHECK(bitwise_equal(ra.weights, rb.weights));
    CHECK(bitwise_equal(ra.losses, rb.losses));
}

TEST_CASE("flush_subnormals: the guard flushes and restores; both executors stay bit-identical with it",
          "[pb][executors][subnormals]") {
    if (!pp::scoped_flush_subnormals::supported) {
        WARN("this target cannot flush subnormals (no SSE): nothing to check");
        return;
    }
    volatile float tiny = std::numeric_limits<float>::min() / 8.0f;  // subnormal
    volatile float half = 0.5f;
    const auto product = [&] { return tiny * half; };
    REQUIRE(std::fpclassify(product()) == FP_SUBNORMAL);
    {
        const pp::scoped_flush_subnormals flush(true);
        CHECK(product() == 0.0f);
        {
            const pp::scoped_flush_subnormals off(false);  // "off" leaves the setting as it is
            CHECK(product() == 0.0f);
        }
    }
    CHECK(std::fpclassify(product()) == FP_SUBNORMAL);  // restored

    openblas_set_num_threads(1);
    using policy = pb::policy::sc_lwp<>;
    using pipe = pb::pipeline<mlp, pp::fine_grained<pp::parameter_free::own_stage>, policy>;
    auto o = [](pb::executor_kind k) {
        pb::options<policy> x = opts<policy>(k, 2);
        x.flush_subnormals = true;
        return x;
    };
    pipe seq(o(pb::executor_kind::sequential)), con(o(pb::executor_kind::concurrent));
    const run_record rs = drive(seq, 150, 2, 1, 60);
    const run_record rc = drive(con, 150, 2, 1, 60);
    CHECK(bitwise_equal(rc.weights, rs.weights));
    CHECK(bitwise_equal(rc.velocities, rs.velocities));
    CHECK(bitwise_equal(rc.losses, rs.losses));
    pipe fresh(opts<policy>(pb::executor_kind::sequential, 2));
    std::vector<float> w0(pipe::stack_type::parameter_count);
    fresh.copy_parameters(w0);
    CHECK_FALSE(bitwise_equal(w0, rs.weights));  // it trained
    CHECK(std::fpclassify(product()) == FP_SUBNORMAL);  // the caller's thread is left as it was
}

TEST_CASE("fewer micro-batches than stages: no hang, identical results", "[pb][executors]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::sc_lwp<>;
    using pipe = fine_cnn<policy>;
    for (std::size_t count : {1u, 3u, 7u}) {
        pipe seq(opts<policy>(pb::executor_kind::sequential, 2));
        pipe con(opts<policy>(pb::executor_kind::concurrent, 2, 64));
        const run_record rs = drive(seq, count, 2, 0, 0);
        const run_record rc = drive(con, count, 2, 0, 0);
        CHECK(rc.ids.size() == count);
        CHECK(rc.ids == rs.ids);
        CHECK(bitwise_equal(rc.weights, rs.weights));
        CHECK(con.in_flight() == 0);
    }
}

TEST_CASE("same seed, same run; another seed, another run", "[pb][executors]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::none;
    using pipe = fine_cnn<policy>;
    pipe a(opts<policy>(pb::executor_kind::concurrent, 1)), b(opts<policy>(pb::executor_kind::concurrent, 1));
    auto o = opts<policy>(pb::executor_kind::concurrent, 1);
    o.seed = 12;
    pipe c(o);
    const run_record ra = drive(a, 80, 1, 0, 0), rb = drive(b, 80, 1, 0, 0), rc = drive(c, 80, 1, 0, 0);
    CHECK(bitwise_equal(ra.weights, rb.weights));
    CHECK(bitwise_equal(ra.losses, rb.losses));
    CHECK_FALSE(bitwise_equal(ra.weights, rc.weights));
}

namespace {

// ---- a probe layer: what weights did each pass really get? ------------------------------------------------------
// y = x * w element-wise (w [n], one weight per feature). Every call appends the weights it was given to the log of
// its Id: forward (the weights of the forward of micro-batch n, in micro-batch order), backward-p2 in the weighted
// form (the weights the backward of micro-batch n used: docs/pb-semantics.md §1 says w after n updates), backward-p1
// when it runs, and the gradient p2 added. The test reads the delay off these logs instead of the executor's own
// bookkeeping (stage_state::record_delay gets n - k from the same formula the executor uses to pick k).
struct probe_log {
    std::vector<std::vector<float>> forward, p1, p2, gradient;
    void clear() { forward.clear(), p1.clear(), p2.clear(), gradient.clear(); }
};
template <std::size_t Id>
probe_log& log_of() {
    static probe_log log;
    return log;
}

template <class T, class Shape, std::size_t Id>
struct probe_layer {
    static_assert(std::is_same_v<T, float>, "the probe logs float weights");
    using value_type = T;
    using input_shape = Shape;
    using output_shape = Shape;
    static constexpr std::size_t n = Shape::size;
    static constexpr std::size_t parameter_count = n;
    void init_parameters(std::span<T> w, std::uint64_t seed) const {
        std::mt19937_64 rng(seed);
        for (auto& v : w) v = T(1) + pp::uniform<T>(rng, T(-0.3), T(0.3));
    }
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, pp::no_stash&, pp::no_workspace&) const {
        log_of<Id>().forward.emplace_back(w.begin(), w.end());
        for (std::size_t k = 0; k < b; ++k)
            for (std::size_t i = 0; i < n; ++i) y[k * n + i] = x[k * n + i] * w[i];
    }
    void backward_input(std::span<const T> w, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const pp::no_stash&, pp::no_workspace&) const {
        log_of<Id>().p1.emplace_back(w.begin(), w.end());
        for (std::size_t k = 0; k < b; ++k)
            for (std::size_t i = 0; i < n; ++i) dx[k * n + i] = dy[k * n + i] * w[i];
    }
    void backward_weight(std::span<const T> w, std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b,
                         const pp::no_stash&, pp::no_workspace&) const {
        std::vector<T> g(n, T(0));
        for (std::size_t k = 0; k < b; ++k)
            for (std::size_t i = 0; i < n; ++i) g[i] += dy[k * n + i] * x[k * n + i];
        for (std::size_t i = 0; i < n; ++i) dw[i] += g[i];
        log_of<Id>().p2.emplace_back(w.begin(), w.end());
        log_of<Id>().gradient.push_back(std::move(g));
    }
};
template <std::size_t Id>
struct probe {
    template <class T, class In>
    using bind = probe_layer<T, In, Id>;
};

/// 9 nodes: 0 probe0 | 1 dense 2 relu | 3 probe1 | 4 dense 5 relu | 6 probe2 | 7 dense | 8 probe3.
using probed = pp::network<shape<4>, probe<0>, pp::dense<6>, pp::relu, probe<1>, pp::dense<5>, pp::relu, probe<2>,
                           pp::dense<3>, probe<3>>;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) { return bitwise_equal(a, b); }

/// Checks the log of probe Id, which sits in a stage of delay D, for `count` micro-batches with a drain after
/// micro-batch `drain_at`; lr: the constant learning rate (momentum 0, no decay); w0: the probe's initial weights;
/// w_end: its weights after the run. Returns the delays measured for every micro-batch.
template <std::size_t Id>
std::vector<std::size_t> measured_delays(std::size_t D, std::size_t count, std::size_t drain_at, float lr,
                                         const std::vector<float>& w0, const std::vector<float>& w_end,
                                         bool p1_runs) {
    const probe_log& log = log_of<Id>();
    INFO("probe " << Id << " (D = " << D << ")");
    REQUIRE(log.forward.size() == count);
    REQUIRE(log.p2.size() == count);
    REQUIRE(log.p1.size() == (p1_runs ? count : 0));
    // bw[k] = the weights the backward of micro-batch k got. It must be w after k updates: w(0) the initial weights,
    // w(k+1) = w(k) - lr g(k) (momentum 0, no decay), w(count) the final weights.
    const auto& bw = log.p2;
    CHECK(same_bits(bw[0], w0));
    for (std::size_t k = 0; k < count; ++k) {
        const std::vector<float>& next = k + 1 < count ? bw[k + 1] : w_end;
        for (std::size_t i = 0; i < w0.size(); ++i) {
            const float expected = bw[k][i] - lr * log.gradient[k][i];
            INFO("update " << k + 1 << ", weight " << i);
            REQUIRE(std::abs(next[i] - expected) <= 1e-6f * std::max(1.0f, std::abs(expected)));
        }
        if (p1_runs) CHECK(same_bits(log.p1[k], bw[k]));  // p1 and p2 of one micro-batch use the same weights
    }
    // Every version is distinct (the run moves the weights on every update), so a forward's weights name one k.
    for (std::size_t j = 0; j < count; ++j)
        for (std::size_t k = j + 1; k < count; ++k) REQUIRE_FALSE(same_bits(bw[j], bw[k]));
    std::vector<std::size_t> delays;
    for (std::size_t n = 0; n < count; ++n) {
        std::size_t k = count;  // none
        for (std::size_t j = 0; j < count; ++j)
            if (same_bits(log.forward[n], bw[j])) k = j;
        INFO("micro-batch " << n);
        REQUIRE(k < count);   // the forward's weights are a version the stage really had ...
        REQUIRE(k <= n);      // ... and not one from the future
        delays.push_back(n - k);
    }
    // The delay PB prescribes (docs/pb-semantics.md §1): D after a fill; in the fill after a (re)start at n0 the
    // forward of micro-batch n sees the n0 updates done so far, i.e. the delay is min(n - n0, D).
    for (std::size_t n = 0; n < count; ++n) {
        const std::size_t n0 = n < drain_at ? 0 : drain_at;
        INFO("micro-batch " << n);
        CHECK(delays[n] == std::min(n - n0, D));
    }
    return delays;
}

}  // namespace

TEST_CASE("observed delays, measured by a probe layer, equal the constexpr D_s", "[pb][delays]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::none;
    using pipe = pb::pipeline<probed, pp::fine_grained<>, policy>;
    // Hand-listed: every parametric node starts a stage (relu attaches to the dense before it).
    static_assert(pipe::boundaries == std::array<std::size_t, 8>{0, 1, 3, 4, 6, 7, 8, 9});
    static_assert(pipe::delays == std::array<std::size_t, 7>{12, 10, 8, 6, 4, 2, 0});
    const std::size_t count = 60, drain_at = 25;
    const float lr = 0.05f;
    data_stream<probed> data(count, 3, 17);
    for (auto kind : {pb::executor_kind::sequential, pb::executor_kind::concurrent}) {
        pipe p(opts<policy>(kind, 1, 4));
        // From here on (the concurrent executor's constructor runs the stages once to measure their costs for the
        // lane cut: those calls are not training).
        log_of<0>().clear(), log_of<1>().clear(), log_of<2>().clear(), log_of<3>().clear();
        std::vector<float> w0(pipe::stack_type::parameter_count), w_end(w0.size());
        p.copy_parameters(w0);
        std::size_t completed = 0;
        for (std::size_t n = 0; n < count; ++n) {
            p.set_hyperparameters({lr, 0.0f, 0.0f});
            completed += p.push(data.xs(n, 1), data.ys(n, 1), 1).size();
            if (n + 1 == drain_at) completed += p.drain().size();
        }
        completed += p.drain().size();
        REQUIRE(completed == count);
        p.copy_parameters(w_end);
        using stack = pipe::stack_type;
        auto block = [&](const std::vector<float>& w, std::size_t node) {
            const auto first = w.begin() + static_cast<std::ptrdiff_t>(stack::parameter_offset[node]);
            return std::vector<float>(first, first + static_cast<std::ptrdiff_t>(stack::parameter_count_of({node, node + 1})));
        };
        INFO("executor " << (kind == pb::executor_kind::sequential ? "sequential" : "concurrent"));
        // Probes at nodes 0, 3, 6, 8 = stages 0, 2, 4, 6 (D = 12, 8, 4, 0); the first node of stage 0 runs no p1.
        const std::vector<std::vector<std::size_t>> measured{
            measured_delays<0>(12, count, drain_at, lr, block(w0, 0), block(w_end, 0), false),
            measured_delays<1>(8, count, drain_at, lr, block(w0, 3), block(w_end, 3), true),
            measured_delays<2>(4, count, drain_at, lr, block(w0, 6), block(w_end, 6), true),
            measured_delays<3>(0, count, drain_at, lr, block(w0, 8), block(w_end, 8), true)};
        // The executor's statistics agree with what the probes measured.
        const auto st = p.stats();
        const std::size_t stage_of_probe[4] = {0, 2, 4, 6};
        for (std::size_t q = 0; q < 4; ++q) {
            const auto& m = measured[q];
            const auto& s = st.stages[stage_of_probe[q]];
            INFO("probe " << q);
            CHECK(s.backward_count == count);
            CHECK(s.observed_delay_max == *std::max_element(m.begin(), m.end()));
            CHECK(s.observed_delay_min == *std::min_element(m.begin(), m.end()));
            CHECK(s.full_delay_count == static_cast<std::size_t>(std::count(m.begin(), m.end(), s.delay)));
        }
        CHECK(st.micro_batches == count);
    }
}

TEST_CASE("S = 1 PB equals the sequential SGD trainer bitwise", "[pb][sgd]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::none;
    using pipe = pb::pipeline<cnn, pp::split_at<>, policy>;
    static_assert(pipe::stage_count == 1 && pipe::delays[0] == 0);
    const std::size_t b = 4, count = 25, partial = 3;
    for (auto kind : {pb::executor_kind::sequential, pb::executor_kind::concurrent}) {
        pipe p(opts<policy>(kind, b));
        pp::sequential_trainer<cnn> sgd({.max_batch = b,
                                         .schedule = pp::optim::lr_schedule::constant(0.05),
                                         .momentum = 0.9,
                                         .weight_decay = 1e-3,
                                         .seed = 11});
        data_stream<cnn> data(count * b, 3);
        std::size_t first = 0;
        std::vector<float> pb_losses, sgd_losses;
        for (std::size_t n = 0; n < count; ++n) {
            const std::size_t bn = n + 1 == count ? partial : b;
            p.set_hyperparameters({0.05f, 0.9f, 1e-3f});
            for (const auto& c : p.push(data.xs(first, bn), data.ys(first, bn), bn)) pb_losses.push_back(c.loss);
            sgd_losses.push_back(sgd.train_batch(data.xs(first, bn).data(), data.ys(first, bn).data(), bn,
                                                 {.learning_rate = 0.05, .momentum = 0.9, .weight_decay = 1e-3}));
            first += bn;
        }
        for (const auto& c : p.drain()) pb_losses.push_back(c.loss);
        std::vector<float> w(pipe::stack_type::parameter_count);
        p.copy_parameters(w);
        CHECK(bitwise_equal(pb_losses, sgd_losses));
        CHECK(bitwise_equal(w, std::vector<float>(sgd.parameters().begin(), sgd.parameters().end())));
        std::vector<float> v(pipe::stack_type::parameter_count);
        p.copy_velocities(v);
        const auto sv = sgd.optimizer().velocity();
        CHECK(bitwise_equal(v, std::vector<float>(sv.begin(), sv.end())));
    }
}

TEST_CASE("evaluation sees the current weights and requires a drained pipeline", "[pb][evaluate]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::sc_lwp<>;
    using pipe = pb::pipeline<cnn, pp::fine_grained<>, policy>;
    pipe p(opts<policy>(pb::executor_kind::concurrent, 2, 4));
    pp::sequential_trainer<cnn> ref({.max_batch = 7, .seed = 11});
    data_stream<cnn> data(50, 3, 9);
    // Before any training: PB evaluation equals a plain forward with the initial weights.
    const auto e0 = p.evaluate(data.xs(0, 50), data.ys(0, 50), 50);
    const auto r0 = ref.evaluate(data.x.data(), data.labels.data(), 50);
    CHECK(e0.accuracy == r0.accuracy);
    CHECK(e0.loss == Approx(r0.loss).epsilon(1e-6));
    // With micro-batches in flight, evaluation refuses to run.
    p.set_hyperparameters({0.05f, 0.9f, 0.0f});
    for (std::size_t i = 0; i < 5; ++i) (void)p.push(data.xs(2 * i, 2), data.ys(2 * i, 2), 2);
    CHECK(p.in_flight() == 5);
    CHECK_THROWS_AS(p.evaluate(data.xs(0, 50), data.ys(0, 50), 50), std::logic_error);
    CHECK(p.drain().size() == 5);
    // After the drain: equals a plain forward with the pipeline's current weights.
    std::vector<float> w(pipe::stack_type::parameter_count);
    p.copy_parameters(w);
    std::copy(w.begin(), w.end(), ref.parameters().begin());
    const auto e1 = p.evaluate(data.xs(0, 50), data.ys(0, 50), 50);
    const auto r1 = ref.evaluate(data.x.data(), data.labels.data(), 50);
    CHECK(e1.accuracy == r1.accuracy);
    CHECK(e1.loss == Approx(r1.loss).epsilon(1e-6));
    CHECK(e1.loss != e0.loss);
}

TEST_CASE("bad input to push is rejected before anything changes", "[pb][errors]") {
    using policy = pb::policy::none;
    using pipe = pb::pipeline<mlp, pp::fine_grained<>, policy>;
    pipe p(opts<policy>(pb::executor_kind::concurrent, 2));
    std::vector<float> x(25, 0.5f);  // one value more than 2 samples of 12
    std::vector<std::int32_t> y{0, 1};
    CHECK_THROWS_AS(p.push(std::span<const float>(x).first(12), std::span<const std::int32_t>(y).first(1), 0),
                    std::invalid_argument);
    CHECK_THROWS_AS(p.push(x, std::span<const std::int32_t>(y).first(2), 2), std::invalid_argument);  // x too long
    std::vector<std::int32_t> bad{0, 3};
    CHECK_THROWS_WITH(p.push(std::span<const float>(x).first(24), bad, 2),
                      Catch::Contains("label 3 of sample 1") && Catch::Contains("micro-batch 0"));
    std::vector<float> x3(36, 0.5f);
    std::vector<std::int32_t> y3{0, 1, 2};
    CHECK_THROWS_WITH(p.push(x3, y3, 3), Catch::Contains("b = 3 is outside [1, max_batch = 2]"));
    CHECK(p.micro_batches_pushed() == 0);
    CHECK_THROWS_AS(p.set_hyperparameters({-1.0f, 0.9f, 0.0f}), std::invalid_argument);
    CHECK_THROWS_WITH(p.set_hyperparameters({0.1f, 1.5f, 0.0f}),
                      Catch::Contains("pipeprop::pb::engine::set_hyperparameters: momentum = 1.500000 must be in [0, 1]"));
    CHECK_THROWS_WITH(p.set_hyperparameters({0.1f, 0.9f, -1.0f}), Catch::Contains("weight_decay = -1.000000"));
    CHECK_THROWS_WITH(p.set_hyperparameters({0.1f, 1.0f, 0.0f}), Catch::Contains("must be in [0, 1) for momentum SGD"));
    using fixed = pb::pipeline<mlp, pp::fine_grained<>, pb::policy::spike_compensation<std::ratio<9, 10>>>;
    fixed f;
    CHECK_THROWS_WITH(f.set_hyperparameters({0.1f, 0.8f, 0.0f}), Catch::Contains("compile-time momentum"));
    CHECK_NOTHROW(f.set_hyperparameters({0.1f, 0.9f, 0.0f}));
}

TEST_CASE("a NaN or infinite loss stops the engine with non_finite_loss_error", "[pb][errors]") {
    using policy = pb::policy::sc_lwp<>;
    using pipe = pb::pipeline<mlp, pp::fine_grained<>, policy>;
    for (const auto kind : {pb::executor_kind::sequential, pb::executor_kind::concurrent}) {
        CAPTURE(pb::to_string(kind));
        data_stream<mlp> data(200);
        {  // the same data and learning rate without the bad sample train without a throw
            pipe p(opts<policy>(kind, 1));
            p.set_hyperparameters({0.01f, 0.9f, 0.0f});
            for (std::size_t n = 0; n < 200; ++n) CHECK_NOTHROW(p.push(data.xs(n, 1), data.ys(n, 1), 1));
            CHECK_NOTHROW(p.drain());
        }
        data.x[37 * data_stream<mlp>::input_size + 3] = std::numeric_limits<float>::quiet_NaN();  // sample 37
        pipe p(opts<policy>(kind, 1));
        p.set_hyperparameters({0.01f, 0.9f, 0.0f});
        bool thrown = false;
        try {
            for (std::size_t n = 0; n < 200; ++n) p.push(data.xs(n, 1), data.ys(n, 1), 1);
            p.drain();
        } catch (const pp::non_finite_loss_error& e) {
            thrown = true;
            CHECK(e.step() == 37);  // micro-batches complete in order: 37 is the first non-finite one
            CHECK_THAT(e.what(), Catch::Contains("the loss of micro-batch 37 became NaN"));
            CHECK(e.samples_seen() == p.samples_pushed());
        }
        CHECK(thrown);
    }
}

TEST_CASE("concurrent == sequential bitwise on the main job's small CNN (28x28, fine-grained)", "[pb][executors]") {
    openblas_set_num_threads(1);
    using main_cnn = pp::network<shape<1, 28, 28>,                                                         //
                                 pp::conv2d<16, 3, 1, 1>, pp::group_norm<4>, pp::relu, pp::max_pool2d<2>,  //
                                 pp::conv2d<32, 3, 1, 1>, pp::group_norm<4>, pp::relu, pp::max_pool2d<2>,  //
                                 pp::flatten, pp::dense<128>, pp::relu, pp::dense<10>>;
    using policy = pb::policy::sc_lwp<>;
    using pipe = pb::pipeline<main_cnn, pp::fine_grained<>, policy>;
    static_assert(pipe::stage_count == 6 && pipe::delays[0] == 10);
    for (auto [b, last] : {std::pair<std::size_t, std::size_t>{1, 0}, {3, 2}}) {
        pipe seq(opts<policy>(pb::executor_kind::sequential, b));
        pipe con(opts<policy>(pb::executor_kind::concurrent, b, 8));
        const run_record rs = drive(seq, 40, b, last, 17);
        const run_record rc = drive(con, 40, b, last, 17);
        CHECK(rc.ids == rs.ids);
        CHECK(bitwise_equal(rc.losses, rs.losses));
        CHECK(bitwise_equal(rc.weights, rs.weights));
        CHECK(bitwise_equal(rc.velocities, rs.velocities));
    }
}
