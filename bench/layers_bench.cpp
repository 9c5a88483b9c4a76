// bench/layers_bench.cpp: Google Benchmark of every layer of the small CNN (bench/small_cnn.hpp) at micro-batch sizes
// b = 1 and b = 32, next to OpenBLAS sgemm at the GEMM-equivalent shapes, and of one full training step.
//
// Benchmarks (all single-threaded; OpenBLAS is set to one thread):
//   <pos>_<layer>/b<b>/<fwd|p1|p2>/layer   forward, backward-p1 (input gradient), backward-p2 (weight gradient) of
//                                          the layer at position pos, called exactly as layer_stack calls it.
//   <pos>_<layer>/b<b>/<fwd|p1|p2>/sgemm   for conv2d and dense: cblas_sgemm on the one GEMM that does the same
//                                          multiply-adds for the whole micro-batch (P = C K K, Q = OH OW):
//       conv2d  fwd  [OC x bQ]  = W [OC x P] cols [P x bQ]        p1  [P x bQ] = W^T [P x OC] dy [OC x bQ]
//               p2   [OC x P]  += dy [OC x bQ] cols^T [bQ x P]
//       dense   fwd  [b x Out]  = x [b x In] W^T                  p1  [b x In] = dy [b x Out] W [Out x In]
//               p2   [Out x In] += dy^T [Out x b] x [b x In]
//   step/b<b>                              sequential_trainer::train_batch: forward, loss, fused backward,
//                                          momentum update (what one training step costs).
// Counters: GFLOP/s (2 x multiply-adds, for conv2d, dense and their sgemm twins; for the step, the sum over conv2d
// and dense of forward + p1 + p2) and samples/s (items_per_second).
// bench/side_by_side.sh runs this with repetitions and random interleaving and prints layer / sgemm ratios.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <boost/core/demangle.hpp>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "pipeprop/layer_stack.hpp"
#include "pipeprop/sequential_trainer.hpp"
#include "small_cnn.hpp"

namespace {

using net = pipeprop::bench::small_cnn;
using stack_type = pipeprop::layer_stack<net, float>;
constexpr std::size_t max_b = 32;

/// GEMM shape and flags of one sgemm call (row-major; op(A) [M x K], op(B) [K x N]).
struct gemm_call {
    bool trans_a = false, trans_b = false;
    std::size_t m = 0, n = 0, k = 0;
    float beta = 0.0f;
    [[nodiscard]] double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

template <class L>
constexpr bool is_conv = requires { L::patch; L::pixels; L::out_channels; };
template <class L>
constexpr bool is_dense = requires { L::in; L::out; } && !is_conv<L>;

/// The sgemm equivalents of forward, p1 and p2 of layer L for a micro-batch of b samples (index 0, 1, 2).
template <class L>
std::array<gemm_call, 3> equivalent_gemms(std::size_t b) {
    if constexpr (is_conv<L>) {
        const std::size_t oc = L::out_channels, p = L::patch, q = L::pixels * b;
        return {gemm_call{false, false, oc, q, p, 0.0f}, gemm_call{true, false, p, q, oc, 0.0f},
                gemm_call{false, true, oc, p, q, 1.0f}};
    } else {
        return {gemm_call{false, true, b, L::out, L::in, 0.0f}, gemm_call{false, false, b, L::in, L::out, 0.0f},
                gemm_call{true, false, L::out, L::in, b, 1.0f}};
    }
}

/// Short name of the layer at position I, e.g. "04_conv2d": conv2d and dense by their members (the network wraps them
/// in an initialization adapter), other layers by their class template name without namespace and "_layer".
template <std::size_t I>
std::string layer_name() {
    using L = typename stack_type::template layer_type<I>;
    std::string s = boost::core::demangle(typeid(L).name());
    s = s.substr(0, s.find('<'));
    if (const auto colon = s.rfind("::"); colon != std::string::npos) s = s.substr(colon + 2);
    if (s.size() > 6 && s.compare(s.size() - 6, 6, "_layer") == 0) s.resize(s.size() - 6);
    if constexpr (is_conv<L>) s = "conv2d";
    if constexpr (is_dense<L>) s = "dense";
    char pos[8];
    std::snprintf(pos, sizeof pos, "%02zu_", I);
    return pos + s;
}

/// Parameters, activations (with stashes after one forward) and workspaces of the whole network for b samples.
struct network_state {
    stack_type stack;
    std::vector<float> w, dw;
    stack_type::activations act;
    stack_type::workspaces ws;
    std::size_t b;
    explicit network_state(std::size_t b_) : w(stack_type::parameter_count), dw(stack_type::parameter_count), b(b_) {
        act = stack.make_activations(stack_type::all(), b);
        ws = stack.make_workspaces(stack_type::all(), b);
        stack.init_parameters(std::span<float>(w), 1);
        std::mt19937 rng(3);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (std::size_t i = 0; i < b * stack_type::activation_size[0]; ++i) act.input()[i] = u(rng);
        // Forward once so every stash holds this micro-batch; random output gradient for the backward passes.
        stack.forward(std::span<const float>(w), act, b, ws);
        for (std::size_t i = 0; i < b * stack_type::activation_size[stack_type::layer_count]; ++i)
            act.output_gradient()[i] = u(rng);
        stack.backward(std::span<const float>(w), std::span<float>(dw), act, b, ws);
    }
};

template <std::size_t I>
void register_layer(network_state& s) {
    using L = typename stack_type::template layer_type<I>;
    const auto& layer = std::get<I>(s.stack.layers());
    const std::string base = layer_name<I>() + "/b" + std::to_string(s.b) + "/";
    const auto w = std::span<const float>(s.w).subspan(stack_type::parameter_offset[I], L::parameter_count);
    const auto dw = std::span<float>(s.dw).subspan(stack_type::parameter_offset[I], L::parameter_count);
    constexpr bool gemm_like = is_conv<L> || is_dense<L>;
    const auto gemms = [&] {
        if constexpr (gemm_like) return equivalent_gemms<L>(s.b);
        else return std::array<gemm_call, 3>{};
    }();
    const auto counters = [](benchmark::State& st, double flops, std::size_t b) {
        st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * b));
        if (flops > 0)
            st.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
    };
    benchmark::RegisterBenchmark((base + "fwd/layer").c_str(), [&s, &layer, w, g = gemms[0], counters](auto& st) {
        for (auto _ : st) {
            layer.forward(w, s.act.a(I), s.act.a(I + 1), s.b, s.act.template stash<I>(), s.ws.template get<I>());
            benchmark::ClobberMemory();
        }
        counters(st, g.flops(), s.b);
    });
    benchmark::RegisterBenchmark((base + "p1/layer").c_str(), [&s, &layer, w, g = gemms[1], counters](auto& st) {
        for (auto _ : st) {
            layer.backward_input(w, s.act.a(I), s.act.a(I + 1), s.act.g(I + 1), s.act.g(I), s.b,
                                 s.act.template stash<I>(), s.ws.template get<I>());
            benchmark::ClobberMemory();
        }
        counters(st, g.flops(), s.b);
    });
    if constexpr (L::parameter_count > 0) {
        benchmark::RegisterBenchmark((base + "p2/layer").c_str(), [&s, &layer, dw, g = gemms[2], counters](auto& st) {
            for (auto _ : st) {
                layer.backward_weight(dw, s.act.a(I), s.act.a(I + 1), s.act.g(I + 1), s.b, s.act.template stash<I>(),
                                      s.ws.template get<I>());
                benchmark::ClobberMemory();
            }
            counters(st, g.flops(), s.b);
        });
    }
    if constexpr (gemm_like) {
        const char* pass[3] = {"fwd", "p1", "p2"};
        for (std::size_t p = 0; p < 3; ++p) {
            const gemm_call g = gemms[p];
            benchmark::RegisterBenchmark((base + pass[p] + "/sgemm").c_str(), [g, counters, b = s.b](auto& st) {
                const std::size_t a_size = g.m * g.k, b_size = g.k * g.n;
                pipeprop::aligned_vector<float> a(a_size, 0.5f), bm(b_size, 0.25f), c(g.m * g.n, 0.0f);
                const std::size_t lda = g.trans_a ? g.m : g.k, ldb = g.trans_b ? g.k : g.n;
                for (auto _ : st) {
                    cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
                                g.trans_b ? CblasTrans : CblasNoTrans, int(g.m), int(g.n), int(g.k), 1.0f, a.data(),
                                int(lda), bm.data(), int(ldb), g.beta, c.data(), int(g.n));
                    benchmark::ClobberMemory();
                }
                counters(st, g.flops(), b);
            });
        }
    }
}

/// Multiply-adds x 2 of forward + p1 + p2 of the conv2d and dense layers for one sample.
double step_flops_per_sample() {
    double f = 0;
    boost::mp11::mp_for_each<boost::mp11::mp_iota_c<stack_type::layer_count>>([&](auto I) {
        using L = typename stack_type::template layer_type<I>;
        if constexpr (is_conv<L> || is_dense<L>)
            for (const auto& g : equivalent_gemms<L>(1)) f += g.flops();
    });
    return f;
}

void register_step(std::size_t b) {
    benchmark::RegisterBenchmark(("step/b" + std::to_string(b)).c_str(), [b](benchmark::State& st) {
        pipeprop::sequential_trainer_config cfg;
        cfg.max_batch = b;
        cfg.schedule = pipeprop::optim::lr_schedule::constant(1e-4);
        pipeprop::sequential_trainer<net, float> trainer(cfg);
        std::vector<float> x(b * stack_type::activation_size[0]);
        std::vector<std::int32_t> labels(b);
        std::mt19937 rng(5);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (auto& v : x) v = u(rng);
        for (std::size_t i = 0; i < b; ++i) labels[i] = std::int32_t(i % 10);
        for (auto _ : st) benchmark::DoNotOptimize(trainer.train_batch(x.data(), labels.data(), b));
        st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * b));
        st.counters["GFLOP/s"] = benchmark::Counter(step_flops_per_sample() * double(b) / 1e9,
                                                    benchmark::Counter::kIsIterationInvariantRate);
    });
}

}  // namespace

int main(int argc, char** argv) {
    openblas_set_num_threads(1);
    std::vector<std::unique_ptr<network_state>> states;
    for (std::size_t b : {std::size_t(1), max_b}) {
        states.push_back(std::make_unique<network_state>(b));
        network_state& s = *states.back();
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<stack_type::layer_count>>(
            [&](auto I) { register_layer<I>(s); });
        register_step(b);
    }
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
