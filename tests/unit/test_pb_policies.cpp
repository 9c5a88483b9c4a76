// PB mitigation policies (include/pipeprop/pb/policies.hpp, stage_state.hpp): compile-time SC coefficients, the
// SC update against hand-computed values and against its closed form (an impulse's accumulated effect equals
// undelayed momentum's), LWP with zero velocity uses the current weights, weight stashing makes the backward see
// exactly the forward's weights (instrumented layer), PipeMare's warm-up and discrepancy correction.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>

#include "unit/test_pb_support.hpp"

using namespace pb_test;

// ---- compile time --------------------------------------------------------------------------------------------------
namespace {
using sc9 = pb::policy::spike_compensation<std::ratio<9, 10>>;
constexpr auto sc_d4 = sc9::coefficients<double>(4);
static_assert(sc_d4.a == 0.9 * 0.9 * 0.9 * 0.9, "a = m^D");
static_assert(sc_d4.b == (1.0 - 0.9 * 0.9 * 0.9 * 0.9) / (1.0 - 0.9), "b = (1 - m^D) / (1 - m)");
static_assert(sc9::coefficients<double>(0) == pb::sc_coefficients<double>{1.0, 0.0}, "D = 0: plain momentum");
static_assert(sc9::coefficients<double>(1) == pb::sc_coefficients<double>{0.9, 1.0}, "D = 1: Nesterov");
static_assert(pb::policy::spike_compensation<std::ratio<1>>::coefficients<double>(6).b == 6.0, "m = 1: b = D");
static_assert(sc9::fixed_momentum && !pb::policy::spike_compensation<>::fixed_momentum);

using cnn_sc = pb::pipeline<cnn, pp::fine_grained<>, pb::policy::sc_lwp<std::ratio<99, 100>>>;
static_assert(cnn_sc::stage_count == 5 && cnn_sc::delays == std::array<std::size_t, 5>{8, 6, 4, 2, 0});
static_assert(cnn_sc::horizons == std::array<float, 5>{8, 6, 4, 2, 0}, "LWP horizon T = D_s by default");
static_assert(cnn_sc::in_flight_bound[0] == 9);
static_assert(pb::spike_coefficients_of<cnn_sc>[0] == pb::spike_coefficients<float>(0.99f, 8));
static_assert(pb::spike_coefficients_of<cnn_sc>[4] == pb::sc_coefficients<float>{1.0f, 0.0f});
using cnn_fixed_t = pb::pipeline<cnn, pp::fine_grained<>,
                                 pb::policy::linear_weight_prediction<pb::lwp_form::velocity, pb::fixed_horizon<3>>>;
static_assert(cnn_fixed_t::horizons == std::array<float, 5>{3, 3, 3, 3, 3}, "overridden horizon");
using cnn_half_t =
    pb::pipeline<cnn, pp::fine_grained<>,
                 pb::policy::linear_weight_prediction<pb::lwp_form::velocity, pb::scaled_horizon<std::ratio<1, 2>>>>;
static_assert(cnn_half_t::horizons == std::array<float, 5>{4, 3, 2, 1, 0});
static_assert(pb::mitigation_policy<pb::policy::pipemare> && !pb::mitigation_policy<int>);

/// One dense layer 2 -> 1: parameters (w0, w1, bias).
using tiny = pp::network<shape<2>, pp::dense<1>>;

template <class Policy, class T = double>
pb::stage_state<tiny, Policy, T> make_stage(std::size_t index, std::size_t stage_count,
                                            typename Policy::parameters p = {}) {
    std::vector<T> block{T(0.5), T(-0.25), T(0.125)};
    return pb::stage_state<tiny, Policy, T>(index, stage_count, {0, 1}, block, p);
}

template <class T>
pb::micro_batch_info<T> mb_with(T lr, T m, T wd, std::size_t first_sample = 0) {
    pb::micro_batch_info<T> mb;
    mb.batch = 1;
    mb.first_sample = first_sample;
    mb.hyper = {lr, m, wd};
    return mb;
}
}  // namespace

TEST_CASE("SC update matches the hand-computed step", "[pb][policies][sc]") {
    // Stage 0 of 3: D = 4. Hand computation of one SC step (docs/pb-semantics.md §3):
    //   v1 = m v0 + g + lambda w0 ; w1 = w0 - eta (m^4 v1 + (1 - m^4)/(1 - m) g)
    auto st = make_stage<pb::policy::spike_compensation<>>(0, 3);
    REQUIRE(st.delay() == 4);
    const double lr = 0.1, m = 0.5, wd = 0.01;
    const double w0[3] = {0.5, -0.25, 0.125}, v0[3] = {0.2, -0.1, 0.0}, g[3] = {1.0, 2.0, -4.0};
    for (int i = 0; i < 3; ++i) {
        st.velocity()[i] = v0[i];
        st.gradient()[i] = g[i];
    }
    st.update(mb_with(lr, m, wd), nullptr);
    const double a = 0.0625, b = (1 - 0.0625) / 0.5;  // m^4 = 1/16, b = 1.875
    for (int i = 0; i < 3; ++i) {
        const double v1 = m * v0[i] + g[i] + wd * w0[i];
        CHECK(st.velocity()[i] == Approx(v1).epsilon(1e-15));
        CHECK(st.weights()[i] == Approx(w0[i] - lr * (a * v1 + b * g[i])).epsilon(1e-15));
        CHECK(st.gradient()[i] == 0.0);  // the update consumes the gradient
    }
    CHECK(st.updates() == 1);
}

TEST_CASE("SC: an impulse's accumulated effect equals undelayed momentum's (closed form)", "[pb][policies][sc]") {
    // A gradient g applied once, then zero gradients. Undelayed heavy-ball has moved w by eta g sum_{i<=k} m^i after
    // k + 1 updates. With delay D the gradient arrives D updates late; SC's first step moves eta g (m^D + b) =
    // eta g sum_{i<=D} m^i, and every later step eta g m^(D + j): the trajectory from then on is undelayed
    // momentum's, i.e. w0 - w_k = eta g (1 - m^(D + k)) / (1 - m) after k updates.
    const double lr = 0.05, m = 0.9, g = 2.0;
    for (std::size_t stage : {0u, 1u, 2u}) {
        auto st = make_stage<pb::policy::spike_compensation<>>(stage, 3);
        auto plain = make_stage<pb::policy::none>(stage, 3);
        const std::size_t D = st.delay();
        const double w0 = st.weights()[0];
        for (std::size_t k = 1; k <= 12; ++k) {
            st.gradient()[0] = k == 1 ? g : 0.0;
            plain.gradient()[0] = k == 1 ? g : 0.0;
            st.update(mb_with(lr, m, 0.0), nullptr);
            plain.update(mb_with(lr, m, 0.0), nullptr);
            const double closed_sc = lr * g * (1 - std::pow(m, static_cast<double>(D + k))) / (1 - m);
            const double closed_hb = lr * g * (1 - std::pow(m, static_cast<double>(k))) / (1 - m);
            INFO("D = " << D << ", k = " << k);
            CHECK(w0 - st.weights()[0] == Approx(closed_sc).epsilon(1e-12));
            CHECK(w0 - plain.weights()[0] == Approx(closed_hb).epsilon(1e-12));
        }
    }
}

TEST_CASE("SC with a compile-time momentum equals SC with the same runtime momentum, bit for bit", "[pb][sc]") {
    auto fixed = make_stage<pb::policy::spike_compensation<std::ratio<9, 10>>, float>(0, 4);
    auto runtime = make_stage<pb::policy::spike_compensation<>, float>(0, 4);
    for (int k = 0; k < 5; ++k) {
        for (int i = 0; i < 3; ++i) fixed.gradient()[i] = runtime.gradient()[i] = 0.1f * static_cast<float>(i + k);
        fixed.update(mb_with(0.1f, 0.9f, 0.001f), nullptr);
        runtime.update(mb_with(0.1f, 0.9f, 0.001f), nullptr);
    }
    for (int i = 0; i < 3; ++i) CHECK(fixed.weights()[i] == runtime.weights()[i]);
}

TEST_CASE("LWP: zero velocity gives the current weights; otherwise the closed-form prediction", "[pb][policies][lwp]") {
    // A stage of 40 parameters (more than one SIMD vector: body and scalar tail of the kernels both run).
    using wide = pp::network<shape<39>, pp::dense<1>>;
    using velocity_form = pb::policy::linear_weight_prediction<>;
    using difference_form = pb::policy::linear_weight_prediction<pb::lwp_form::weight_difference>;
    std::vector<float> block(40);
    for (std::size_t i = 0; i < block.size(); ++i) block[i] = 0.25f * static_cast<float>(i) - 3.0f;
    pb::stage_state<wide, velocity_form, float> st(0, 3, {0, 1}, block, {});  // D = T = 4
    REQUIRE(st.horizon() == 4.0f);
    REQUIRE(st.predicted_forward());
    std::vector<float> out(40);
    st.forward_weights(out.data());
    for (std::size_t i = 0; i < 40; ++i) CHECK(out[i] == st.weights()[i]);  // v = 0: exactly w
    // Nonzero velocity: w_hat = w - eta T v with eta the learning rate of the most recent update.
    for (std::size_t i = 0; i < 40; ++i) st.velocity()[i] = 0.5f - 0.03f * static_cast<float>(i);
    st.restore(7, 0.01f);
    st.forward_weights(out.data());
    for (std::size_t i = 0; i < 40; ++i) {
        INFO("element " << i);
        CHECK(out[i] == std::fma(-0.04f, st.velocity()[i], block[i]));
        CHECK(st.weights()[i] == block[i]);  // the prediction is transient: w itself is unchanged
    }

    pb::stage_state<wide, difference_form, float> sd(1, 3, {0, 1}, block, {});  // D = T = 2
    sd.forward_weights(out.data());
    for (std::size_t i = 0; i < 40; ++i) CHECK(out[i] == sd.weights()[i]);  // no step yet: exactly w
    for (std::size_t i = 0; i < 40; i += 3) sd.gradient()[i] = 1.0f;
    sd.update(mb_with(0.1f, 0.0f, 0.0f), out.data());  // forward_out = w + 2 (w(1) - w(0))
    for (std::size_t i = 0; i < 40; ++i) {
        INFO("element " << i);
        CHECK(sd.last_step()[i] == sd.weights()[i] - block[i]);
        CHECK(out[i] == std::fma(2.0f, sd.last_step()[i], sd.weights()[i]));
        CHECK((sd.weights()[i] != block[i]) == (i % 3 == 0));
    }

    // The last stage (D = 0) predicts nothing with the default horizon.
    pb::stage_state<wide, velocity_form, float> last(2, 3, {0, 1}, block, {});
    CHECK_FALSE(last.predicted_forward());
}

TEST_CASE("PipeMare: learning-rate warm-up and discrepancy correction", "[pb][policies][pipemare]") {
    pb::policy::pipemare::parameters p;
    p.warmup_samples = 100;
    p.discrepancy_decay = 0.75;
    auto st = make_stage<pb::policy::pipemare>(0, 3, p);  // D = 4
    CHECK(st.learning_rate_for(mb_with(0.2, 0.9, 0.0, 0)) == Approx(0.2 / 4));
    CHECK(st.learning_rate_for(mb_with(0.2, 0.9, 0.0, 50)) == Approx(0.2 / 2));  // 4^-(1/2)
    CHECK(st.learning_rate_for(mb_with(0.2, 0.9, 0.0, 100)) == Approx(0.2));
    CHECK(st.learning_rate_for(mb_with(0.2, 0.9, 0.0, 5000)) == Approx(0.2));
    auto last = make_stage<pb::policy::pipemare>(2, 3, p);  // D = 0: factor 1
    CHECK(last.learning_rate_for(mb_with(0.2, 0.9, 0.0, 0)) == 0.2);
    // Backward weights before any update: w (delta = 0).
    for (int i = 0; i < 3; ++i) CHECK(st.backward_weights()[i] == st.weights()[i]);
    const std::vector<double> w0(st.weights().begin(), st.weights().end());
    st.gradient()[0] = 1.0;
    st.gradient()[2] = -2.0;
    st.update(mb_with(0.2, 0.9, 0.0, 1000), nullptr);
    for (int i = 0; i < 3; ++i) {
        const double step = st.weights()[i] - w0[i];
        CHECK(st.discrepancy()[i] == Approx(0.25 * step).epsilon(1e-15));
        CHECK(st.backward_weights()[i] == Approx(st.weights()[i] - 4 * 0.25 * step).epsilon(1e-15));
    }
    CHECK(st.weights()[0] != w0[0]);
    CHECK_THROWS_AS(make_stage<pb::policy::pipemare>(0, 3, {.warmup_samples = 0, .discrepancy_decay = 1.0}),
                    std::invalid_argument);
}

// ---- instrumented layer: which weights does the backward see? -------------------------------------------------------
namespace {
std::atomic<std::size_t> probe_backwards{0};
std::atomic<std::size_t> probe_mismatches{0};

/// y = x * w element-wise; the stash keeps a copy of the weights the forward used, and backward-p1 counts the
/// backward passes whose weights differ from them.
template <class T, class Shape>
struct probe_layer {
    using value_type = T;
    using input_shape = Shape;
    using output_shape = Shape;
    static constexpr std::size_t parameter_count = Shape::size;
    struct stash_type {
        std::vector<T> w;
    };
    stash_type make_stash(std::size_t) const { return {std::vector<T>(parameter_count)}; }
    void init_parameters(std::span<T> w, std::uint64_t seed) const {
        std::mt19937_64 rng(seed);
        for (auto& v : w) v = T(1) + pp::uniform<T>(rng, T(-0.1), T(0.1));
    }
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, pp::no_workspace&) const {
        std::copy(w.begin(), w.end(), st.w.begin());
        for (std::size_t n = 0; n < b; ++n)
            for (std::size_t i = 0; i < parameter_count; ++i)
                y[n * parameter_count + i] = x[n * parameter_count + i] * w[i];
    }
    void backward_input(std::span<const T> w, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, pp::no_workspace&) const {
        ++probe_backwards;
        if (!std::equal(w.begin(), w.end(), st.w.begin())) ++probe_mismatches;
        for (std::size_t n = 0; n < b; ++n)
            for (std::size_t i = 0; i < parameter_count; ++i)
                dx[n * parameter_count + i] = dy[n * parameter_count + i] * w[i];
    }
    void backward_weight(std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b, const stash_type&,
                         pp::no_workspace&) const {
        for (std::size_t n = 0; n < b; ++n)
            for (std::size_t i = 0; i < parameter_count; ++i)
                dw[i] += dy[n * parameter_count + i] * x[n * parameter_count + i];
    }
};
struct probe {
    template <class T, class In>
    using bind = probe_layer<T, In>;
};
/// Probes in stage 1 (D = 6) and stage 3 (D = 2) of a 5-stage fine-grained pipeline (not in stage 0, whose first
/// layer needs no backward-p1; after dense layers, so their inputs and weight gradients are nonzero).
using probed = pp::network<shape<4>, pp::dense<4>, probe, pp::dense<4>, probe, pp::dense<3>>;

template <class Policy>
std::pair<std::size_t, std::size_t> count_mismatches(pb::executor_kind kind, float lr) {
    using pipe = pb::pipeline<probed, pp::fine_grained<>, Policy>;
    static_assert(pipe::stage_count == 5 && pipe::delays[1] == 6 && pipe::delays[3] == 2);
    pb::options<Policy> o;
    o.executor = kind;
    o.push_buffer = 8;
    pipe p(o);
    probe_backwards = 0;
    probe_mismatches = 0;
    data_stream<probed> data(60, 3);
    for (std::size_t n = 0; n < 60; ++n) {
        p.set_hyperparameters({lr, 0.9f, 0.0f});
        (void)p.push(data.xs(n, 1), data.ys(n, 1), 1);
    }
    (void)p.drain();
    std::vector<float> w(pipe::stack_type::parameter_count);
    p.copy_parameters(w);
    CHECK(std::all_of(w.begin(), w.end(), [](float v) { return std::isfinite(v); }));  // NaN != NaN would count
    return {probe_backwards.load(), probe_mismatches.load()};
}
}  // namespace

TEST_CASE("weight stashing: the backward uses exactly the forward's weights (instrumented layer)", "[pb][stash]") {
    openblas_set_num_threads(1);
    for (auto kind : {pb::executor_kind::sequential, pb::executor_kind::concurrent}) {
        INFO("executor " << pb::to_string(kind));
        const auto [stash_backwards, stash_mismatches] = count_mismatches<pb::policy::weight_stashing>(kind, 0.01f);
        CHECK(stash_backwards == 120);
        CHECK(stash_mismatches == 0);
        // Without stashing the same probe sees different weights (so the probe can fail): the forward of
        // micro-batch n used w(max(0, n - D_s)), its backward w(n); they agree only for n = 0 at each probed stage.
        const auto [plain_backwards, plain_mismatches] = count_mismatches<pb::policy::none>(kind, 0.01f);
        CHECK(plain_backwards == 120);
        CHECK(plain_mismatches == 2 * 59);
        // LWP's forward predicts ahead, so its backward sees other weights too; with a zero learning rate the
        // prediction w - 0 * T * v is w itself, and forward and backward agree again.
        CHECK(count_mismatches<pb::policy::linear_weight_prediction<>>(kind, 0.01f).second > 100);
        CHECK(count_mismatches<pb::policy::linear_weight_prediction<>>(kind, 0.0f).second == 0);
    }
}

TEST_CASE("stats report delays, slots and bytes per stage", "[pb][stats]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::weight_stashing;
    using pipe = pb::pipeline<probed, pp::fine_grained<>, policy>;
    pb::options<policy> o;
    o.max_batch = 2;
    pipe con(o);
    o.executor = pb::executor_kind::sequential;
    pipe seq(o);
    const auto sc = con.stats(), ss = seq.stats();
    for (std::size_t s = 0; s < pipe::stage_count; ++s) {
        const std::size_t P = pp::layer_stack<probed, float>::parameter_count_of(pipe::layout::stage(s));
        CHECK(sc.stages[s].delay == pipe::delays[s]);
        CHECK(sc.stages[s].parameters == P);
        CHECK(sc.stages[s].activation_slots == pipe::delays[s] + 1);
        CHECK(ss.stages[s].activation_slots == 1);
        // D_s + 1 slots of activations, stashes and labels (one per sample: cross-entropy), but one set of
        // gradient buffers per stage (slots 1 .. D_s share slot 0's); the last stage (D = 0) has one slot anyway.
        // A slot holds neither its input (but on stage 0) nor its output (but on the last stage): those are the
        // forward channels' buffers (pb/forward_channel.hpp). The sequential reference's one activations object
        // has no labels.
        const pp::layer_range r = pipe::layout::stage(s);
        const auto one = pp::layer_stack<probed, float>{}.make_activations(r, o.max_batch);
        REQUIRE(one.gradient_bytes() > 0);
        CHECK(ss.stages[s].stash_bytes == one.bytes());
        const std::size_t labels = o.max_batch * sizeof(std::int32_t);
        using stack = pp::layer_stack<probed, float>;
        const std::size_t boundaries =
            o.max_batch * sizeof(float) *
            ((s > 0 ? stack::activation_size[r.begin] : 0) +
             (s + 1 < pipe::stage_count ? stack::activation_size[r.end] : 0));
        CHECK(sc.stages[s].stash_bytes ==
              (pipe::delays[s] + 1) * (one.bytes() - boundaries + labels) - pipe::delays[s] * one.gradient_bytes());
        if (pipe::delays[s] > 0) CHECK(sc.stages[s].stash_bytes < (pipe::delays[s] + 1) * one.bytes());
        // w, v, g plus D_s + 1 stashed weight copies (none needed where D_s = 0); the reference keeps the same
        // number of versions as a history.
        const std::size_t copies = 3 + (pipe::delays[s] > 0 ? pipe::delays[s] + 1 : 0);
        CHECK(sc.stages[s].weight_copies == copies);
        CHECK(ss.stages[s].weight_copies == copies);
        CHECK(sc.stages[s].weight_bytes == copies * P * sizeof(float));
    }
    CHECK(sc.executor == "concurrent");
    CHECK(ss.policy == "stash");
}

TEST_CASE("stats: each stage's weight and velocity norms are those of its slice of the network's blocks",
          "[pb][stats]") {
    openblas_set_num_threads(1);
    using policy = pb::policy::weight_stashing;
    using pipe = pb::pipeline<probed, pp::fine_grained<>, policy>;
    for (auto kind : {pb::executor_kind::sequential, pb::executor_kind::concurrent}) {
        pb::options<policy> o;
        o.executor = kind;
        pipe p(o);
        data_stream<probed> data(40, 3);
        for (std::size_t n = 0; n < 40; ++n) {
            p.set_hyperparameters({0.01f, 0.9f, 0.0f});
            (void)p.push(data.xs(n, 1), data.ys(n, 1), 1);
        }
        (void)p.drain();
        std::vector<float> w(pipe::stack_type::parameter_count), v(pipe::stack_type::parameter_count);
        p.copy_parameters(w);
        p.copy_velocities(v);
        const auto st = p.stats();
        std::size_t offset = 0;
        for (std::size_t s = 0; s < pipe::stage_count; ++s) {
            double ws = 0.0, vs = 0.0;  // the slice's sums of squares, here in the test's own order
            for (std::size_t i = offset; i < offset + st.stages[s].parameters; ++i) {
                ws += static_cast<double>(w[i]) * w[i];
                vs += static_cast<double>(v[i]) * v[i];
            }
            offset += st.stages[s].parameters;
            CHECK(st.stages[s].weight_norm == Approx(std::sqrt(ws)).epsilon(1e-12));
            CHECK(st.stages[s].velocity_norm == Approx(std::sqrt(vs)).epsilon(1e-12));
            if (st.stages[s].parameters > 0) {  // it trained, and stayed in range
                CHECK(st.stages[s].velocity_norm > 0.0);
                CHECK(st.stages[s].weight_norm < 100.0);
            }
        }
        CHECK(offset == pipe::stack_type::parameter_count);
    }
}
