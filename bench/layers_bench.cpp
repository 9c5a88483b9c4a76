// bench/layers_bench.cpp: Google Benchmark of every layer of the small CNN (bench/small_cnn.hpp) at micro-batch sizes
// b = 1 and b = 32, and of ResNet-20's conv2d and dense layers (examples/train/networks.hpp, train::resnet20) at
// b = 1, next to OpenBLAS at the GEMM-equivalent shapes, and of one full training step.
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
//   <pos>_dense/b1/<fwd|p1|p2>/blas2       for dense at b = 1: the level-2 BLAS call with the same multiply-adds
//                                          (forward y = W x: cblas_sgemv; p1 dx = W^T dy: cblas_sgemv transposed;
//                                          p2 dW += dy x^T: cblas_sger), which is what these products are.
//   resnet20_<layer>/b1/<pass>/<layer|sgemm|blas2>  the same for each distinct conv2d / dense layer of ResNet-20
//                                          (conv<C>-<OC>_k<K>s<S>_<OH>x<OW>, dense<In>-<Out>), each layer alone on
//                                          its own buffers.
//   step/b<b>                              sequential_trainer::train_batch: forward, loss, fused backward,
//                                          momentum update (what one training step costs).
// Counters: GFLOP/s (2 x multiply-adds, for conv2d, dense and their BLAS twins; for the step, the sum over conv2d
// and dense of forward + p1 + p2) and samples/s (items_per_second).
// bench/side_by_side.sh runs this with repetitions and random interleaving and prints layer / sgemm ratios;
// bench/kernels_b1.sh prints the b = 1 tables (layer / sgemm, layer / blas2).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <boost/core/demangle.hpp>
#include <boost/mp11/algorithm.hpp>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "pipeprop/layer_stack.hpp"
#include "pipeprop/sequential_trainer.hpp"
#include "small_cnn.hpp"
#include "train/networks.hpp"

#ifndef PIPEPROP_BENCH_MARCH
#define PIPEPROP_BENCH_MARCH "unknown"
#endif

namespace {

using net = pipeprop::bench::small_cnn;
using stack_type = pipeprop::layer_stack<net, float>;
constexpr std::size_t max_b = 32;

/// GEMM shape and flags of one sgemm call (row-major; op(A) [M x K], op(B) [K x N]), and the level-2 BLAS call with
/// the same multiply-adds where there is one (dense at b = 1).
struct gemm_call {
    bool trans_a = false, trans_b = false;
    std::size_t m = 0, n = 0, k = 0;
    float beta = 0.0f;
    enum class level2 { none, gemv_n, gemv_t, ger } blas2 = level2::none;
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
        using l2 = gemm_call::level2;
        return {gemm_call{false, true, b, L::out, L::in, 0.0f, b == 1 ? l2::gemv_n : l2::none},
                gemm_call{false, false, b, L::in, L::out, 0.0f, b == 1 ? l2::gemv_t : l2::none},
                gemm_call{true, false, L::out, L::in, b, 1.0f, b == 1 ? l2::ger : l2::none}};
    }
}

/// Registers <base><pass>/sgemm (and <base><pass>/blas2 where the call has a level-2 twin) for the three passes.
void register_blas_twins(const std::string& base, const std::array<gemm_call, 3>& gemms, std::size_t b) {
    const auto counters = [](benchmark::State& st, double flops, std::size_t b) {
        st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * b));
        st.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
    };
    const char* pass[3] = {"fwd", "p1", "p2"};
    for (std::size_t p = 0; p < 3; ++p) {
        const gemm_call g = gemms[p];
        benchmark::RegisterBenchmark((base + pass[p] + "/sgemm").c_str(), [g, counters, b](auto& st) {
            const std::size_t a_size = g.m * g.k, b_size = g.k * g.n;
            pipeprop::aligned_vector<float> a(a_size, 0.5f), bm(b_size, 0.25f), c(g.m * g.n, 0.0f);
            const std::size_t lda = g.trans_a ? g.m : g.k, ldb = g.trans_b ? g.k : g.n;
            for (auto _ : st) {
                cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
                            int(g.m), int(g.n), int(g.k), 1.0f, a.data(), int(lda), bm.data(), int(ldb), g.beta,
                            c.data(), int(g.n));
                benchmark::ClobberMemory();
            }
            counters(st, g.flops(), b);
        });
        if (g.blas2 == gemm_call::level2::none) continue;
        // Dense at b = 1, W [Out x In]: forward M = 1, N = Out, K = In; p1 M = 1, N = In, K = Out; p2 M = Out,
        // N = In, K = 1.
        benchmark::RegisterBenchmark((base + pass[p] + "/blas2").c_str(), [g, counters, b](auto& st) {
            using l2 = gemm_call::level2;
            const std::size_t out = g.blas2 == l2::gemv_n ? g.n : g.blas2 == l2::gemv_t ? g.k : g.m;
            const std::size_t in = g.blas2 == l2::gemv_n ? g.k : g.n;
            pipeprop::aligned_vector<float> w(out * in, 0.25f), x(in, 0.5f), y(out, 0.5f);
            for (auto _ : st) {
                if (g.blas2 == l2::gemv_n)
                    cblas_sgemv(CblasRowMajor, CblasNoTrans, int(out), int(in), 1.0f, w.data(), int(in), x.data(), 1,
                                0.0f, y.data(), 1);
                else if (g.blas2 == l2::gemv_t)
                    cblas_sgemv(CblasRowMajor, CblasTrans, int(out), int(in), 1.0f, w.data(), int(in), y.data(), 1,
                                0.0f, x.data(), 1);
                else
                    cblas_sger(CblasRowMajor, int(out), int(in), 1.0f, y.data(), 1, x.data(), 1, w.data(), int(in));
                benchmark::ClobberMemory();
            }
            counters(st, g.flops(), b);
        });
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
    pipeprop::aligned_vector<float> w, dw;  // vector-aligned, as the BLAS twins' operands
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
    const auto& layer = s.stack.template layer<I>();
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
            layer.forward(w, s.act.a(I), s.act.a(I + 1), s.b, s.stack.template stash<I>(s.act),
                          s.stack.template workspace<I>(s.ws));
            benchmark::ClobberMemory();
        }
        counters(st, g.flops(), s.b);
    });
    benchmark::RegisterBenchmark((base + "p1/layer").c_str(), [&s, &layer, w, g = gemms[1], counters](auto& st) {
        for (auto _ : st) {
            layer.backward_input(w, s.act.a(I), s.act.a(I + 1), s.act.g(I + 1), s.act.g(I), s.b,
                                 s.stack.template stash<I>(s.act), s.stack.template workspace<I>(s.ws));
            benchmark::ClobberMemory();
        }
        counters(st, g.flops(), s.b);
    });
    if constexpr (L::parameter_count > 0) {
        benchmark::RegisterBenchmark((base + "p2/layer").c_str(), [&s, &layer, dw, g = gemms[2], counters](auto& st) {
            for (auto _ : st) {
                layer.backward_weight(dw, s.act.a(I), s.act.a(I + 1), s.act.g(I + 1), s.b,
                                      s.stack.template stash<I>(s.act), s.stack.template workspace<I>(s.ws));
                benchmark::ClobberMemory();
            }
            counters(st, g.flops(), s.b);
        });
    }
    if constexpr (gemm_like) register_blas_twins(base, gemms, s.b);
}

/// The layer a node of a flattened network runs (carried<L, C> and on_shortcut<L, F, C> wrap L), or the node itself.
template <class N>
struct node_layer {
    using type = N;
};
template <class N>
    requires requires { typename N::layer_type; }
struct node_layer<N> {
    using type = typename N::layer_type;
};
template <class N>
using node_layer_t = typename node_layer<N>::type;
template <class L>
using is_gemm_layer = boost::mp11::mp_bool<is_conv<L> || is_dense<L>>;

/// The distinct conv2d and dense layer types of ResNet-20 (19 convs and 2 projections give 8 shapes; dense 64->10).
using resnet_stack = pipeprop::layer_stack<train::resnet20, float>;
using resnet_gemm_layers = boost::mp11::mp_unique<
    boost::mp11::mp_copy_if<boost::mp11::mp_transform<node_layer_t, resnet_stack::layer_list>, is_gemm_layer>>;

/// Name of a standalone layer: conv<C>-<OC>_k<K>s<S>_<OH>x<OW> or dense<In>-<Out>.
template <class L>
std::string shape_name() {
    const auto str = [](std::size_t v) { return std::to_string(v); };
    if constexpr (is_conv<L>)
        return "conv" + str(L::channels) + "-" + str(L::out_channels) + "_k" + str(L::kernel) + "s" + str(L::stride) +
               "_" + str(L::out_height) + "x" + str(L::out_width);
    else
        return "dense" + str(L::in) + "-" + str(L::out);
}

/// One layer on its own buffers at micro-batch size b: parameters, gradient, input, output, gradients, stash and
/// workspace, with one forward run so the stash holds the input's data.
template <class L>
struct standalone_layer {
    L layer{};
    std::size_t b;
    pipeprop::aligned_vector<float> w, dw;  // vector-aligned, as the BLAS twins' operands
    pipeprop::aligned_vector<float> x, y, dy, dx;
    pipeprop::stash_t<L> stash;
    pipeprop::workspace_t<L> ws;
    explicit standalone_layer(std::size_t b_)
        : b(b_), w(L::parameter_count), dw(L::parameter_count), x(b_ * L::input_shape::size),
          y(b_ * L::output_shape::size), dy(b_ * L::output_shape::size), dx(b_ * L::input_shape::size),
          stash(pipeprop::make_stash(layer, b_)), ws(pipeprop::make_workspace(layer, b_)) {
        layer.init_parameters(std::span<float>(w), 1);
        std::mt19937 rng(3);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (auto& v : x) v = u(rng);
        for (auto& v : dy) v = u(rng);
        layer.forward(std::span<const float>(w), x.data(), y.data(), b, stash, ws);
    }
};

/// resnet20_<shape>/b1/<pass>/<layer|sgemm|blas2> for one layer type of ResNet-20.
template <class L>
void register_resnet_layer(std::vector<std::shared_ptr<void>>& keep) {
    constexpr std::size_t b = 1;
    auto s = std::make_shared<standalone_layer<L>>(b);
    keep.push_back(s);
    const std::string base = "resnet20_" + shape_name<L>() + "/b1/";
    const auto gemms = equivalent_gemms<L>(b);
    const auto counters = [](benchmark::State& st, double flops) {
        st.SetItemsProcessed(st.iterations());
        st.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
    };
    standalone_layer<L>* l = s.get();
    benchmark::RegisterBenchmark((base + "fwd/layer").c_str(), [l, g = gemms[0], counters](auto& st) {
        for (auto _ : st) {
            l->layer.forward(std::span<const float>(l->w), l->x.data(), l->y.data(), l->b, l->stash, l->ws);
            benchmark::ClobberMemory();
        }
        counters(st, g.flops());
    });
    benchmark::RegisterBenchmark((base + "p1/layer").c_str(), [l, g = gemms[1], counters](auto& st) {
        for (auto _ : st) {
            l->layer.backward_input(std::span<const float>(l->w), l->x.data(), l->y.data(), l->dy.data(), l->dx.data(),
                                    l->b, l->stash, l->ws);
            benchmark::ClobberMemory();
        }
        counters(st, g.flops());
    });
    benchmark::RegisterBenchmark((base + "p2/layer").c_str(), [l, g = gemms[2], counters](auto& st) {
        for (auto _ : st) {
            l->layer.backward_weight(std::span<float>(l->dw), l->x.data(), l->y.data(), l->dy.data(), l->b, l->stash,
                                     l->ws);
            benchmark::ClobberMemory();
        }
        counters(st, g.flops());
    });
    register_blas_twins(base, gemms, b);
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
    std::vector<std::shared_ptr<void>> resnet_layers;
    boost::mp11::mp_for_each<boost::mp11::mp_transform<boost::mp11::mp_identity, resnet_gemm_layers>>(
        [&](auto t) { register_resnet_layer<typename decltype(t)::type>(resnet_layers); });
    // Which OpenBLAS kernels the BLAS rows measure (OPENBLAS_CORETYPE or what OpenBLAS detected), and this program's
    // -march (bench/CMakeLists.txt): both are in the console header and in the JSON context.
    benchmark::AddCustomContext("openblas_core", openblas_get_corename());
    benchmark::AddCustomContext("pipeprop_march", PIPEPROP_BENCH_MARCH);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
