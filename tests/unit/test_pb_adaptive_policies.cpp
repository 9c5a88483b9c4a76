// The PB mitigation policies for adaptive optimizers (pb/policy_optimizer_prediction.hpp: optimizer-aware LWP;
// pb/policy_nesterov.hpp: Nesterov / NAdam look-ahead; pb/policy_pipedream_2bw.hpp: PipeDream-2BW's one-step delay;
// docs/pb-semantics.md §3), each with momentum SGD and AdamW:
//   - golden: losses and weights after each of 50 micro-batches against an independent numpy implementation of the
//     sequential equivalent (tests/golden/make_pb_policies.py), in double (1e-12) and in float
//     (5e-6: float32 rounding over 50 updates; about 1e-6 seen);
//   - the concurrent executor gives the sequential executor's bits (losses, weights, optimizer state);
//   - save at a drained point, load into a fresh engine, continue == the run that did not stop, bit for bit;
//   - with momentum SGD, optimizer-aware LWP is LWP's velocity form, bit for bit.
#include <catch2/catch.hpp>

#include <cblas.h>
#include <unistd.h>

#include <pipeprop/pb/checkpoint.hpp>
#include <pipeprop/pb/engine.hpp>
#include <pipeprop/pb/policy_nesterov.hpp>
#include <pipeprop/pb/policy_optimizer_prediction.hpp>
#include <pipeprop/pb/policy_pipedream_2bw.hpp>
#include <pipeprop/pipeprop.hpp>

#include <xtensor/xnpy.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace {

namespace pp = pipeprop;
namespace pb = pipeprop::pb;

/// 3 inputs -> dense 4 -> relu -> dense 4 -> relu -> dense 2 (the network of make_pb_policies.py), 3 stages.
using net = pp::network<pp::shape<3>, pp::dense<4>, pp::relu, pp::dense<4>, pp::relu, pp::dense<2>>;
const std::vector<pp::layer_range> cut{{0, 2}, {2, 4}, {4, 5}};
constexpr std::size_t micro_batches = 50, b = 2, P = 46;
const std::string dir = std::string(PIPEPROP_GOLDEN_DIR) + "/pb_policies/";

template <class T>
using loss_of = pp::detail::default_loss_t<net, T>;

template <class Policy, class Optimizer>
using engine_t = pb::engine<net, Policy, typename Optimizer::value_type, loss_of<typename Optimizer::value_type>,
                            Optimizer>;

/// The golden inputs (make_pb_policies.py), as T.
template <class T>
struct inputs {
    std::vector<T> w0, x, hyper;
    std::vector<std::int32_t> y;
    explicit inputs(bool adaptive) {
        auto cast = [](const auto& a) { return std::vector<T>(a.begin(), a.end()); };
        w0 = cast(xt::load_npy<double>(dir + "w0.npy"));
        x = cast(xt::load_npy<double>(dir + "x.npy"));
        hyper = cast(xt::load_npy<double>(dir + (adaptive ? "hyper_adamw.npy" : "hyper_sgd.npy")));
        const auto ys = xt::load_npy<std::int32_t>(dir + "y.npy");
        y.assign(ys.begin(), ys.end());
    }
};

/// Options of the golden runs: AdamW's betas (NAdam: beta1 = 0.99, the paper's), executor, push buffer.
template <class Policy>
pb::options<Policy> options_for(pb::executor_kind kind, bool nadam) {
    pb::options<Policy> o;
    o.max_batch = b;
    o.executor = kind;
    o.push_buffer = 3;
    o.lanes = 2;
    o.adamw = {.beta1 = nadam ? 0.99 : 0.9, .beta2 = 0.999, .eps = 1e-8};
    if constexpr (Policy::double_buffered) o.policy.accumulation = 4;  // make_pb_policies.py's ACCUMULATION
    return o;
}

/// What a run leaves: the losses in order, the weights after each push (sequential executor: after update n), and
/// at the end (drained) the weights and every optimizer state buffer.
template <class T>
struct run_record {
    std::vector<T> losses;
    std::vector<std::vector<T>> weights;
    std::vector<T> final_state;
};

template <class Engine, class T = typename Engine::value_type>
void push_span(Engine& e, const inputs<T>& in, std::size_t from, std::size_t to, run_record<T>& r) {
    for (std::size_t n = from; n < to; ++n) {
        e.set_hyperparameters({in.hyper[3 * n], in.hyper[3 * n + 1], in.hyper[3 * n + 2]});
        for (const auto& c : e.push(std::span<const T>(in.x.data() + 3 * b * n, 3 * b),
                                    std::span<const std::int32_t>(in.y.data() + b * n, b), b))
            r.losses.push_back(c.loss);
        std::vector<T> w(P);
        e.copy_parameters(w);
        r.weights.push_back(w);
    }
    for (const auto& c : e.drain()) r.losses.push_back(c.loss);
}

template <class Engine, class T = typename Engine::value_type>
std::vector<T> final_state_of(const Engine& e, std::size_t buffers) {
    std::vector<T> out(P), part(P);
    e.copy_parameters(out);
    for (std::size_t k = 0; k < buffers; ++k) {
        e.copy_optimizer_state(k, part);
        out.insert(out.end(), part.begin(), part.end());
    }
    return out;
}

template <class Policy, class Optimizer, class T = typename Optimizer::value_type>
run_record<T> run(pb::executor_kind kind) {
    openblas_set_num_threads(1);
    constexpr bool adaptive = pb::is_adamw<Optimizer, T>;
    const inputs<T> in(adaptive);
    engine_t<Policy, Optimizer> e(cut, options_for<Policy>(kind, adaptive && Policy::nesterov_update));
    e.load_parameters(in.w0);
    run_record<T> r;
    push_span(e, in, 0, micro_batches, r);
    r.final_state = final_state_of(e, Optimizer::state_buffer_names.size());
    return r;
}

/// Golden check of case `name` (make_pb_policies.py) with the sequential executor in T: losses and the weights after
/// every update within `tolerance` (absolute, on values of order 1). Reports the largest difference seen.
template <class Policy, class Optimizer, class T = typename Optimizer::value_type>
void check_golden(const std::string& name, double tolerance) {
    const run_record<T> r = run<Policy, Optimizer>(pb::executor_kind::sequential);
    const auto losses = xt::load_npy<double>(dir + name + "_losses.npy");
    const auto weights = xt::load_npy<double>(dir + name + "_weights.npy");
    REQUIRE(r.losses.size() == micro_batches);
    double worst = 0;
    for (std::size_t n = 0; n < micro_batches; ++n) {
        INFO(name << ", micro-batch " << n);
        CHECK(std::abs(static_cast<double>(r.losses[n]) - losses(n)) <= tolerance);
        worst = std::max(worst, std::abs(static_cast<double>(r.losses[n]) - losses(n)));
        for (std::size_t i = 0; i < P; ++i) {
            INFO("parameter " << i);
            const double d = std::abs(static_cast<double>(r.weights[n][i]) - weights(n, i));
            CHECK(d <= tolerance);
            worst = std::max(worst, d);
        }
    }
    WARN(name << " (" << (sizeof(T) == 4 ? "float" : "double") << "): largest |engine - numpy| " << worst);
}

/// The concurrent executor's losses, final weights and optimizer state are the sequential executor's bits.
template <class Policy, class Optimizer>
void check_executors() {
    const auto seq = run<Policy, Optimizer>(pb::executor_kind::sequential);
    const auto con = run<Policy, Optimizer>(pb::executor_kind::concurrent);
    CHECK(seq.losses == con.losses);
    CHECK(seq.final_state == con.final_state);
}

/// Save after 22 micro-batches (drained; PipeDream-2BW: in the middle of a batch, with an accumulated gradient), load
/// into a fresh engine (another seed), continue to 50: the same bits as
/// the run that did not stop (losses of the continuation, weights and optimizer state at the end).
template <class Policy, class Optimizer, class T = typename Optimizer::value_type>
void check_checkpoint(pb::executor_kind kind) {
    openblas_set_num_threads(1);
    constexpr bool adaptive = pb::is_adamw<Optimizer, T>;
    const inputs<T> in(adaptive);
    const auto path = std::filesystem::temp_directory_path() /
                      ("pipeprop_pb_adaptive_" + std::string(Policy::name) + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    auto o = options_for<Policy>(kind, adaptive && Policy::nesterov_update);
    engine_t<Policy, Optimizer> whole(cut, o), first(cut, o);
    whole.load_parameters(in.w0);
    first.load_parameters(in.w0);
    run_record<T> rw, rf, rr;
    push_span(whole, in, 0, 22, rw);
    push_span(whole, in, 22, micro_batches, rw);
    push_span(first, in, 0, 22, rf);
    pb::save_checkpoint(first, path);
    o.seed = 99;
    engine_t<Policy, Optimizer> resumed(cut, o);
    pb::load_checkpoint(resumed, path);
    std::filesystem::remove_all(path);
    push_span(resumed, in, 22, micro_batches, rr);
    REQUIRE(rw.losses.size() == micro_batches);
    CHECK(std::vector<T>(rw.losses.begin() + 22, rw.losses.end()) == rr.losses);
    CHECK(final_state_of(whole, Optimizer::state_buffer_names.size()) ==
          final_state_of(resumed, Optimizer::state_buffer_names.size()));
}

using lwp_opt = pb::policy::optimizer_weight_prediction<>;
using nesterov = pb::policy::nesterov;
using two_bw = pb::policy::pipedream_2bw;
template <class T>
using adamw = pp::optim::adamw<T>;
template <class T>
using sgd = pp::optim::sgd<T>;

}  // namespace

TEST_CASE("optimizer-aware LWP matches the numpy reference over 50 micro-batches", "[pb][policy][golden]") {
    check_golden<lwp_opt, adamw<double>>("lwp_opt_adamw", 1e-12);
    check_golden<lwp_opt, sgd<double>>("lwp_opt_sgd", 1e-12);
    check_golden<lwp_opt, adamw<float>>("lwp_opt_adamw", 5e-6);
    check_golden<lwp_opt, sgd<float>>("lwp_opt_sgd", 5e-6);
}

TEST_CASE("the Nesterov look-ahead policy matches the numpy reference over 50 micro-batches", "[pb][policy][golden]") {
    check_golden<nesterov, adamw<double>>("nesterov_adamw", 1e-12);
    check_golden<nesterov, sgd<double>>("nesterov_sgd", 1e-12);
    check_golden<nesterov, adamw<float>>("nesterov_adamw", 5e-6);
    check_golden<nesterov, sgd<float>>("nesterov_sgd", 5e-6);
}

TEST_CASE("PipeDream-2BW matches the numpy reference over 50 micro-batches", "[pb][policy][golden]") {
    check_golden<two_bw, adamw<double>>("pipedream_2bw_adamw", 1e-12);
    check_golden<two_bw, sgd<double>>("pipedream_2bw_sgd", 1e-12);
    check_golden<two_bw, adamw<float>>("pipedream_2bw_adamw", 5e-6);
    check_golden<two_bw, sgd<float>>("pipedream_2bw_sgd", 5e-6);
}

TEST_CASE("with momentum SGD, optimizer-aware LWP is LWP's velocity form bit for bit", "[pb][policy]") {
    using velocity = pb::policy::linear_weight_prediction<pb::lwp_form::velocity>;
    for (auto kind : {pb::executor_kind::sequential, pb::executor_kind::concurrent}) {
        const auto a = run<lwp_opt, sgd<float>>(kind);
        const auto v = run<velocity, sgd<float>>(kind);
        CHECK(a.losses == v.losses);
        CHECK(a.weights == v.weights);
        CHECK(a.final_state == v.final_state);
    }
}

TEST_CASE("adaptive-optimizer policies: the concurrent executor gives the sequential bits", "[pb][policy]") {
    check_executors<lwp_opt, adamw<float>>();
    check_executors<lwp_opt, sgd<float>>();
    check_executors<nesterov, adamw<float>>();
    check_executors<nesterov, sgd<float>>();
    check_executors<two_bw, adamw<float>>();
    check_executors<two_bw, sgd<float>>();
}

TEST_CASE("adaptive-optimizer policies: a checkpoint round trip continues bit for bit", "[pb][policy][checkpoint]") {
    for (auto kind : {pb::executor_kind::sequential, pb::executor_kind::concurrent}) {
        check_checkpoint<lwp_opt, adamw<float>>(kind);
        check_checkpoint<lwp_opt, sgd<float>>(kind);
        check_checkpoint<nesterov, adamw<float>>(kind);
        check_checkpoint<nesterov, sgd<float>>(kind);
        check_checkpoint<two_bw, adamw<float>>(kind);
        check_checkpoint<two_bw, sgd<float>>(kind);
    }
}

TEST_CASE("the Nesterov policy refuses a negative momentum decay", "[pb][policy]") {
    pb::options<nesterov> o;
    o.policy.momentum_decay = -1.0;
    CHECK_THROWS_WITH((engine_t<nesterov, adamw<float>>(cut, o)), Catch::Contains("momentum_decay"));
}

TEST_CASE("PipeDream-2BW refuses fewer micro-batches per update than a stage's delay", "[pb][policy]") {
    pb::options<two_bw> o;
    o.policy.accumulation = 3;  // stage 0 has D = 4
    CHECK_THROWS_WITH((engine_t<two_bw, sgd<float>>(cut, o)), Catch::Contains("accumulation = 3"));
    o.policy.accumulation = 0;  // D_0 = 4
    CHECK_NOTHROW((engine_t<two_bw, sgd<float>>(cut, o)));
}
