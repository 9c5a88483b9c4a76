// An independent oracle for Pipelined Backpropagation: the clocked pipeline of
// docs/pb-semantics.md §1-3 written out by hand in double, with NO library code (no layer_stack, no layers,
// no optimizer kernels, no policy types), compared with pb::engine (sequential and concurrent executors) for every
// mitigation policy after EVERY micro-batch (weights and velocities, 1e-12) and for every micro-batch's loss.
//
// The oracle does not implement "the forward uses w(n - D_s)"; it simulates ticks (§1): micro-batch n enters stage
// 0 at tick tau_n; at tick t every stage runs the forward of the micro-batch that reached it (tau_n + s == t), then
// the backward of the one coming back (tau_n + 2S - 2 - s == t), then that micro-batch's update. The delays follow
// from the clock, and the oracle checks them against §1's formulas (forward after max(n0, n - D_s) updates,
// backward after n). The model: dense and ReLU layers (y = x W^T + bias, W [out, in] row-major then bias [out], as
// the library lays out a dense layer's parameter block) and a 2-class softmax cross-entropy, mean over the b samples.
//
// What the engine's weights after micro-batch n are, tick by tick:
//   - sequential executor: micro-batch n's update applied at every stage, i.e. stage s as after its tick
//     tau_n + 2S - 2 - s;
//   - concurrent executor with push_buffer = 1: every push runs the flow graph until it is idle, at which point
//     every stage has run the ops of the group of micro-batch n (concurrent_executor.hpp, "Driving"), i.e. stage s
//     as after its tick tau_n + s, whatever the lanes.
//   After a drain both hold every update.
#include <catch2/catch.hpp>

#include <cblas.h>

#include <pipeprop/pb/engine.hpp>
#include <pipeprop/pipeprop.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <ratio>
#include <string>
#include <vector>

namespace {

namespace pp = pipeprop;
namespace pb = pipeprop::pb;

// ---- the oracle -----------------------------------------------------------------------------------------------

/// One layer of the oracle's model: dense (out x in, with bias) or ReLU (size in = out).
struct o_layer {
    bool dense = false;
    std::size_t in = 0, out = 0;
    std::size_t offset = 0;  // of its parameters in the stage block
    [[nodiscard]] std::size_t parameters() const { return dense ? out * in + out : 0; }
};

/// What a policy means, written down from docs/pb-semantics.md §2-3 (not read from the library's policy types).
struct o_policy {
    std::string name;
    bool sc = false;                 // v <- m v + g ; w <- w - eta (a v + b g_loss), a = m^D, b = (1 - m^D)/(1 - m)
    bool lwp = false;                // forward uses a prediction
    bool weight_difference = false;  // w_hat = w + T (w(k) - w(k-1)); else w_hat = w - eta_last T v
    double horizon_scale = 1.0;      // T = horizon_scale * D_s ...
    double fixed_horizon = -1.0;     // ... or T = fixed_horizon when >= 0
    bool stash = false;              // backward uses the forward's weights
    bool pipemare = false;           // eta D^-(1 - min(t/Tw, 1)); backward uses w - D delta
    double warmup = 0.0;             // T_w (samples)
    double gamma = 0.0;              // delta <- gamma delta + (1 - gamma) (w(k) - w(k-1))
};

struct o_hyper {
    double lr = 0, m = 0, wd = 0;
};

struct o_stage {
    std::vector<o_layer> layers;
    std::size_t P = 0, D = 0;
    double T = 0;
    std::vector<double> w, v, step, delta;
    double last_lr = 0;
    std::size_t updates = 0;
};

/// Per micro-batch and stage: the activations of the forward (input of each layer, then the stage output), the
/// weights the forward used, the update counts its forward and backward saw.
struct o_record {
    std::vector<std::vector<double>> acts;
    std::vector<double> forward_w;
    std::size_t forward_updates = 0, backward_updates = 0;
    std::vector<double> dx;  // gradient with respect to the stage input (sent upstream)
};

class oracle {
public:
    oracle(const std::vector<std::vector<o_layer>>& stage_layers, const std::vector<double>& block, o_policy p)
        : pol_(std::move(p)) {
        const std::size_t S = stage_layers.size();
        std::size_t off = 0;
        for (std::size_t s = 0; s < S; ++s) {
            o_stage st;
            st.layers = stage_layers[s];
            for (auto& l : st.layers) {
                l.offset = st.P;
                st.P += l.parameters();
            }
            st.D = 2 * (S - 1 - s);
            st.T = pol_.lwp ? (pol_.fixed_horizon >= 0 ? pol_.fixed_horizon : pol_.horizon_scale * double(st.D)) : 0;
            st.w.assign(block.begin() + std::ptrdiff_t(off), block.begin() + std::ptrdiff_t(off + st.P));
            off += st.P;
            st.v.assign(st.P, 0.0);
            st.step.assign(st.P, 0.0);
            st.delta.assign(st.P, 0.0);
            stages_.push_back(std::move(st));
        }
        REQUIRE(off == block.size());
    }

    /// Micro-batch n = number pushed so far: x [b, in], labels [b], hyperparameters h; `after_drain`: the pipeline
    /// was drained before it (it enters once every earlier backward is done).
    void push(std::vector<double> x, std::vector<int> y, std::size_t b, o_hyper h, bool after_drain) {
        const std::size_t S = stages_.size();
        const std::size_t tau = mbs_.empty() ? 0 : mbs_.back().tau + 1 + (after_drain ? 2 * (S - 1) : 0);
        if (after_drain || mbs_.empty()) n0_ = mbs_.size();
        mbs_.push_back({std::move(x), std::move(y), b, h, tau, samples_, n0_, std::vector<o_record>(S), 0.0});
        samples_ += b;
    }

    /// Runs ticks 0 .. last (every micro-batch's backward at every stage) and records each stage's weights and
    /// velocity after every tick.
    void run() {
        const std::size_t S = stages_.size();
        const std::size_t last = mbs_.back().tau + 2 * (S - 1);
        std::map<std::size_t, std::size_t> entering;  // tau -> n
        for (std::size_t n = 0; n < mbs_.size(); ++n) entering[mbs_[n].tau] = n;
        w_after_.assign(S, {});
        v_after_.assign(S, {});
        for (std::size_t t = 0; t <= last; ++t) {
            for (std::size_t s = 0; s < S; ++s) {
                // forward first: the micro-batch with tau + s == t
                if (t >= s && entering.count(t - s)) forward(s, entering[t - s]);
                // then the backward (and update) of the one with tau + 2S - 2 - s == t
                const std::size_t back = 2 * S - 2 - s;
                if (t >= back && entering.count(t - back)) backward_and_update(s, entering[t - back]);
                w_after_[s].push_back(stages_[s].w);
                v_after_[s].push_back(stages_[s].v);
            }
        }
    }

    [[nodiscard]] std::size_t stage_count() const { return stages_.size(); }
    [[nodiscard]] std::size_t tau(std::size_t n) const { return mbs_[n].tau; }
    [[nodiscard]] double loss(std::size_t n) const { return mbs_[n].loss; }
    /// Stage s's weights / velocity after tick t.
    [[nodiscard]] const std::vector<double>& weights_after(std::size_t s, std::size_t t) const {
        return w_after_[s].at(t);
    }
    [[nodiscard]] const std::vector<double>& velocity_after(std::size_t s, std::size_t t) const {
        return v_after_[s].at(t);
    }
    [[nodiscard]] std::size_t parameters(std::size_t s) const { return stages_[s].P; }

private:
    struct o_mb {
        std::vector<double> x;
        std::vector<int> y;
        std::size_t b;
        o_hyper h;
        std::size_t tau, first_sample, n0;
        std::vector<o_record> rec;
        double loss;
    };

    // The weights the forward sees now (§1, §3 LWP): w, or the prediction from the current state.
    std::vector<double> forward_weights(const o_stage& st) const {
        std::vector<double> fw = st.w;
        if (pol_.lwp && st.T != 0)
            for (std::size_t i = 0; i < st.P; ++i)
                fw[i] = pol_.weight_difference ? st.w[i] + st.T * st.step[i] : st.w[i] - st.last_lr * st.T * st.v[i];
        return fw;
    }

    void forward(std::size_t s, std::size_t n) {
        o_stage& st = stages_[s];
        o_mb& mb = mbs_[n];
        o_record& r = mb.rec[s];
        r.forward_updates = st.updates;
        r.forward_w = forward_weights(st);
        const std::size_t b = mb.b;
        std::vector<double> a = s == 0 ? mb.x : mbs_[n].rec[s - 1].acts.back();
        r.acts.push_back(a);
        for (const o_layer& l : st.layers) {
            std::vector<double> out(b * l.out);
            for (std::size_t i = 0; i < b; ++i)
                for (std::size_t o = 0; o < l.out; ++o) {
                    if (l.dense) {
                        double z = r.forward_w[l.offset + l.out * l.in + o];
                        for (std::size_t k = 0; k < l.in; ++k)
                            z += r.forward_w[l.offset + o * l.in + k] * a[i * l.in + k];
                        out[i * l.out + o] = z;
                    } else {
                        out[i * l.out + o] = std::max(a[i * l.in + o], 0.0);
                    }
                }
            a = std::move(out);
            r.acts.push_back(a);
        }
        if (s + 1 == stages_.size()) {  // loss: mean softmax cross-entropy over b, its gradient
            const std::size_t c = st.layers.back().out;
            std::vector<double> dz(b * c);
            double total = 0;
            for (std::size_t i = 0; i < b; ++i) {
                double mx = a[i * c];
                for (std::size_t k = 1; k < c; ++k) mx = std::max(mx, a[i * c + k]);
                double sum = 0;
                for (std::size_t k = 0; k < c; ++k) sum += std::exp(a[i * c + k] - mx);
                total += std::log(sum) + mx - a[i * c + std::size_t(mb.y[i])];
                for (std::size_t k = 0; k < c; ++k)
                    dz[i * c + k] = (std::exp(a[i * c + k] - mx) / sum - (int(k) == mb.y[i] ? 1.0 : 0.0)) / double(b);
            }
            mb.loss = total / double(b);
            loss_gradient_[n] = std::move(dz);
        }
    }

    void backward_and_update(std::size_t s, std::size_t n) {
        o_stage& st = stages_[s];
        o_mb& mb = mbs_[n];
        o_record& r = mb.rec[s];
        r.backward_updates = st.updates;
        // §1: the forward saw max(n0, n - D_s) updates, the backward sees n.
        CHECK(r.forward_updates == std::max(mb.n0, n >= st.D ? n - st.D : 0));
        CHECK(r.backward_updates == n);
        // Backward weights (§3): current w; the forward's (stashing); w - D delta (PipeMare, D > 0).
        std::vector<double> bw = st.w;
        if (pol_.stash) bw = r.forward_w;
        if (pol_.pipemare && st.D > 0)
            for (std::size_t i = 0; i < st.P; ++i) bw[i] = st.w[i] - double(st.D) * st.delta[i];
        const std::size_t b = mb.b;
        std::vector<double> dy = s + 1 == stages_.size() ? loss_gradient_.at(n) : mb.rec[s + 1].dx;
        std::vector<double> g(st.P, 0.0);
        for (std::size_t li = st.layers.size(); li-- > 0;) {
            const o_layer& l = st.layers[li];
            const std::vector<double>& x = r.acts[li];
            const std::vector<double>& y = r.acts[li + 1];
            std::vector<double> dx(b * l.in, 0.0);
            for (std::size_t i = 0; i < b; ++i) {
                if (l.dense) {
                    for (std::size_t o = 0; o < l.out; ++o) {
                        const double d = dy[i * l.out + o];
                        g[l.offset + l.out * l.in + o] += d;
                        for (std::size_t k = 0; k < l.in; ++k) {
                            g[l.offset + o * l.in + k] += d * x[i * l.in + k];
                            dx[i * l.in + k] += d * bw[l.offset + o * l.in + k];
                        }
                    }
                } else {
                    for (std::size_t k = 0; k < l.in; ++k) dx[i * l.in + k] = y[i * l.in + k] > 0 ? dy[i * l.in + k] : 0;
                }
            }
            dy = std::move(dx);
        }
        r.dx = std::move(dy);
        // Update (§2, §3): L2 decay from the current weights, heavy-ball or spike compensation, PipeMare's warm-up.
        const o_hyper& h = mb.h;
        double lr = h.lr;
        if (pol_.pipemare && st.D > 0 && pol_.warmup > 0)
            lr *= std::pow(double(st.D), -(1.0 - std::min(double(mb.first_sample) / pol_.warmup, 1.0)));
        const double a = pol_.sc ? std::pow(h.m, double(st.D)) : 1.0;
        const double bc = pol_.sc ? (h.m == 1.0 ? double(st.D) : (1.0 - std::pow(h.m, double(st.D))) / (1.0 - h.m)) : 0.0;
        for (std::size_t i = 0; i < st.P; ++i) {
            const double old = st.w[i];
            st.v[i] = h.m * st.v[i] + g[i] + h.wd * old;
            st.w[i] = old - lr * (a * st.v[i] + bc * g[i]);
            st.step[i] = st.w[i] - old;
            st.delta[i] = pol_.gamma * st.delta[i] + (1.0 - pol_.gamma) * (st.w[i] - old);
        }
        st.last_lr = lr;
        ++st.updates;
    }

    o_policy pol_;
    std::vector<o_stage> stages_;
    std::vector<o_mb> mbs_;
    std::map<std::size_t, std::vector<double>> loss_gradient_;
    std::size_t samples_ = 0, n0_ = 0;
    std::vector<std::vector<std::vector<double>>> w_after_, v_after_;  // [S][tick][P]
};

// ---- the comparison -------------------------------------------------------------------------------------------

/// 3 inputs -> dense 4 -> relu -> dense 4 -> relu -> dense 2 (5 layers, 3 parametric).
using net = pp::network<pp::shape<3>, pp::dense<4>, pp::relu, pp::dense<4>, pp::relu, pp::dense<2>>;
const std::vector<o_layer> net_layers{{true, 3, 4}, {false, 4, 4}, {true, 4, 4}, {false, 4, 4}, {true, 4, 2}};

constexpr std::size_t micro_batches = 36;
constexpr std::size_t drain_after = 23;  // a drain after micro-batch 23: micro-batch 24 starts a new fill (n0 = 24)
constexpr std::size_t partial = 17;      // micro-batch 17 has b = 1, all others b = 2

o_hyper hyper_of(std::size_t n, bool fixed_momentum) {
    o_hyper h;
    h.lr = n < 12 ? 0.08 : (n < 26 ? 0.05 : 0.03);
    h.m = fixed_momentum ? 0.9 : (n < 20 ? 0.9 : 0.7);
    h.wd = 1e-2;
    return h;
}

struct sample_data {
    std::vector<double> x;
    std::vector<std::int32_t> y;
};
sample_data make_data(std::size_t samples) {
    std::mt19937_64 rng(12);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    sample_data d;
    for (std::size_t i = 0; i < samples * 3; ++i) d.x.push_back(u(rng));
    for (std::size_t i = 0; i < samples; ++i)  // a learnable rule with some noise
        d.y.push_back((d.x[3 * i] + 0.5 * d.x[3 * i + 1] > 0.1) != (rng() % 7 == 0) ? 1 : 0);
    return d;
}

std::size_t batch_of(std::size_t n) { return n == partial ? 1 : 2; }

/// Runs Policy on `cut` (layer ranges) with executor `kind` (lanes for the concurrent one) against the oracle.
template <class Policy>
double compare(const std::vector<pp::layer_range>& cut, const o_policy& op, pb::executor_kind kind, std::size_t lanes,
             typename Policy::parameters params = {}, bool fixed_momentum = false) {
    INFO("policy " << op.name << ", " << cut.size() << " stages, " << pb::to_string(kind) << ", lanes " << lanes);
    pb::options<Policy> opt;
    opt.max_batch = 2;
    opt.executor = kind;
    opt.push_buffer = 1;
    opt.lanes = lanes;
    opt.seed = 7;
    opt.policy = params;
    pb::engine<net, Policy, double> e(cut, opt);
    constexpr std::size_t P = pp::layer_stack<net, double>::parameter_count;
    std::vector<double> block(P), vel(P);
    e.copy_parameters(block);

    std::vector<std::vector<o_layer>> stage_layers;
    for (const auto& r : cut) stage_layers.emplace_back(net_layers.begin() + std::ptrdiff_t(r.begin),
                                                        net_layers.begin() + std::ptrdiff_t(r.end));
    oracle o(stage_layers, block, op);
    const std::size_t S = cut.size();

    std::size_t samples = 0;
    for (std::size_t n = 0; n < micro_batches; ++n) samples += batch_of(n);
    const sample_data data = make_data(samples);
    std::size_t first = 0;
    for (std::size_t n = 0; n < micro_batches; ++n) {
        const std::size_t b = batch_of(n);
        o.push({data.x.begin() + std::ptrdiff_t(3 * first), data.x.begin() + std::ptrdiff_t(3 * (first + b))},
               {data.y.begin() + std::ptrdiff_t(first), data.y.begin() + std::ptrdiff_t(first + b)}, b,
               hyper_of(n, fixed_momentum), n == drain_after + 1);
        first += b;
    }
    o.run();

    std::vector<std::pair<std::size_t, double>> losses;
    double worst = 0;
    auto check_state = [&](std::size_t n, std::vector<std::size_t> ticks, const char* when) {
        e.copy_parameters(block);
        e.copy_velocities(vel);
        std::size_t off = 0;
        for (std::size_t s = 0; s < S; ++s) {
            const auto& ow = o.weights_after(s, ticks[s]);
            const auto& ov = o.velocity_after(s, ticks[s]);
            for (std::size_t i = 0; i < o.parameters(s); ++i) {
                INFO(when << " micro-batch " << n << ", stage " << s << " (oracle after tick " << ticks[s]
                          << "), parameter " << i);
                CHECK(block[off + i] == Approx(ow[i]).margin(1e-12).epsilon(0));
                CHECK(vel[off + i] == Approx(ov[i]).margin(1e-12).epsilon(0));
                worst = std::max({worst, std::abs(block[off + i] - ow[i]), std::abs(vel[off + i] - ov[i])});
            }
            off += o.parameters(s);
        }
    };
    auto drained_ticks = [&](std::size_t n) {  // every backward of micro-batches <= n done
        std::vector<std::size_t> t(S);
        for (std::size_t s = 0; s < S; ++s) t[s] = o.tau(n) + 2 * S - 2 - s;
        return t;
    };

    first = 0;
    for (std::size_t n = 0; n < micro_batches; ++n) {
        const std::size_t b = batch_of(n);
        const o_hyper h = hyper_of(n, fixed_momentum);
        e.set_hyperparameters({h.lr, h.m, h.wd});
        for (const auto& c : e.push(std::span<const double>(data.x.data() + 3 * first, 3 * b),
                                    std::span<const std::int32_t>(data.y.data() + first, b), b))
            losses.emplace_back(c.id, c.loss);
        first += b;
        std::vector<std::size_t> ticks(S);
        if (kind == pb::executor_kind::sequential)
            ticks = drained_ticks(n);
        else
            for (std::size_t s = 0; s < S; ++s) ticks[s] = o.tau(n) + s;
        check_state(n, ticks, "after pushing");
        if (n == drain_after || n + 1 == micro_batches) {
            for (const auto& c : e.drain()) losses.emplace_back(c.id, c.loss);
            check_state(n, drained_ticks(n), "after draining at");
        }
    }
    REQUIRE(losses.size() == micro_batches);
    for (std::size_t n = 0; n < micro_batches; ++n) {
        INFO("loss of micro-batch " << n);
        CHECK(losses[n].first == n);
        CHECK(losses[n].second == Approx(o.loss(n)).margin(1e-12).epsilon(0));
    }
    return worst;
}

/// Both cuts (S = 3: delays 4, 2, 0; S = 2: delays 2, 0), the sequential executor and the concurrent one with the
/// default lanes, one lane and one lane per stage. Reports the largest difference seen.
template <class Policy>
void compare_everywhere(const o_policy& op, typename Policy::parameters params = {}, bool fixed_momentum = false) {
    const std::vector<std::vector<pp::layer_range>> cuts{{{0, 2}, {2, 4}, {4, 5}}, {{0, 3}, {3, 5}}};
    double worst = 0;
    for (const auto& cut : cuts) {
        worst = std::max(worst, compare<Policy>(cut, op, pb::executor_kind::sequential, 0, params, fixed_momentum));
        for (std::size_t lanes : {std::size_t{0}, std::size_t{1}, cut.size()})
            worst = std::max(worst,
                             compare<Policy>(cut, op, pb::executor_kind::concurrent, lanes, params, fixed_momentum));
    }
    WARN("PB oracle, " << op.name << ": largest |engine - oracle| over weights and velocities " << worst);
}

struct blas_single_thread {
    blas_single_thread() { openblas_set_num_threads(1); }
} const blas_once;

}  // namespace

TEST_CASE("PB oracle: plain PB (none)", "[pb][oracle]") {
    compare_everywhere<pb::policy::none>({.name = "none"});
}

TEST_CASE("PB oracle: spike compensation, runtime and compile-time momentum", "[pb][oracle]") {
    compare_everywhere<pb::policy::spike_compensation<>>({.name = "sc", .sc = true});
    compare_everywhere<pb::policy::spike_compensation<std::ratio<9, 10>>>({.name = "sc<9/10>", .sc = true}, {}, true);
}

TEST_CASE("PB oracle: linear weight prediction, both forms and other horizons", "[pb][oracle]") {
    using pb::lwp_form;
    compare_everywhere<pb::policy::linear_weight_prediction<lwp_form::velocity>>({.name = "lwp", .lwp = true});
    compare_everywhere<pb::policy::linear_weight_prediction<lwp_form::weight_difference>>(
        {.name = "lwp weight difference", .lwp = true, .weight_difference = true});
    compare_everywhere<pb::policy::linear_weight_prediction<lwp_form::velocity, pb::scaled_horizon<std::ratio<1, 2>>>>(
        {.name = "lwp T = D/2", .lwp = true, .horizon_scale = 0.5});
    compare_everywhere<pb::policy::linear_weight_prediction<lwp_form::weight_difference, pb::fixed_horizon<3>>>(
        {.name = "lwp weight difference T = 3", .lwp = true, .weight_difference = true, .fixed_horizon = 3});
}

TEST_CASE("PB oracle: SC + LWP, both forms", "[pb][oracle]") {
    using pb::lwp_form;
    compare_everywhere<pb::policy::sc_lwp<>>({.name = "sc_lwp", .sc = true, .lwp = true});
    compare_everywhere<pb::policy::sc_lwp<pb::runtime_momentum, lwp_form::weight_difference>>(
        {.name = "sc_lwp weight difference", .sc = true, .lwp = true, .weight_difference = true});
}

TEST_CASE("PB oracle: weight stashing", "[pb][oracle]") {
    compare_everywhere<pb::policy::weight_stashing>({.name = "stash", .stash = true});
}

TEST_CASE("PB oracle: PipeMare (warm-up and discrepancy correction)", "[pb][oracle]") {
    compare_everywhere<pb::policy::pipemare>({.name = "pipemare", .pipemare = true, .warmup = 40, .gamma = 0.8},
                                             {.warmup_samples = 40, .discrepancy_decay = 0.8});
    compare_everywhere<pb::policy::pipemare>({.name = "pipemare, no warm-up", .pipemare = true, .gamma = 0.5},
                                             {.warmup_samples = 0, .discrepancy_decay = 0.5});
}
