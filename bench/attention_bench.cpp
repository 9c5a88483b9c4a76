// bench/attention_bench.cpp: Google Benchmark of causal_self_attention (include/pipeprop/layers/
// causal_self_attention.hpp) at one LLaMA-like shape, float32, one thread: L = 128 tokens, D = 256 features, 4 heads of
// 64, RoPE base 10000, micro-batch b = 1 and b = 8.
//
// Benchmarks: attention/b<b>/<fwd|p1|p2|p1+p2> - forward, backward-p1 (input gradient), backward-p2 (weight
// gradients; it recomputes the attention backward from the stash, see the layer's comment) and both backward passes
// one after the other (what a fused backward costs). Counters: GFLOP/s (2 x the multiply-adds the layer's comment
// states for that pass, the zeros above the causal diagonal included) and samples/s.
// bench/attention_side_by_side.py runs this next to the same passes in PyTorch and prints the ratios.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "pipeprop/layers/causal_self_attention.hpp"

namespace {

constexpr std::size_t seq = 128, model = 256, heads = 4;
using layer_type = pipeprop::causal_self_attention<heads>::bind<float, pipeprop::shape<seq, model>>;

/// Multiply-adds per sample of each pass (the layer's comment): forward, p1, p2.
constexpr double l = seq, d = model;
constexpr double fwd_madds = 4 * l * d * d + 2 * l * l * d;
constexpr double p1_madds = 4 * l * d * d + 4 * l * l * d;
constexpr double p2_madds = 5 * l * d * d + 4 * l * l * d;

/// Parameters, input, output gradient, stash (after one forward) and workspace for b samples.
struct state {
    layer_type layer;
    std::size_t b;
    std::vector<float> w, dw, x, y, dy, dx;
    layer_type::stash_type st;
    layer_type::workspace_type ws;
    explicit state(std::size_t b_)
        : b(b_), w(layer_type::parameter_count), dw(layer_type::parameter_count, 0.0f), x(b * seq * model),
          y(x.size()), dy(x.size()), dx(x.size()), st(layer.make_stash(b)), ws(layer.make_workspace(b)) {
        layer.init_parameters(std::span<float>(w), 1);
        std::mt19937 rng(3);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (auto& v : x) v = u(rng);
        for (auto& v : dy) v = u(rng);
        forward();
    }
    void forward() { layer.forward(std::span<const float>(w), x.data(), y.data(), b, st, ws); }
    void p1() { layer.backward_input(std::span<const float>(w), x.data(), y.data(), dy.data(), dx.data(), b, st, ws); }
    void p2() {
        layer.backward_weight(std::span<const float>(w), std::span<float>(dw), x.data(), y.data(), dy.data(), b, st, ws);
    }
};

void register_pass(state& s, const char* pass, double madds, void (*run)(state&)) {
    const std::string name = "attention/b" + std::to_string(s.b) + "/" + pass;
    benchmark::RegisterBenchmark(name.c_str(), [&s, madds, run](benchmark::State& bst) {
        for (auto _ : bst) {
            run(s);
            benchmark::ClobberMemory();
        }
        bst.SetItemsProcessed(static_cast<std::int64_t>(bst.iterations() * s.b));
        bst.counters["GFLOP/s"] =
            benchmark::Counter(2 * madds * double(s.b) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
    });
}

}  // namespace

int main(int argc, char** argv) {
    openblas_set_num_threads(1);
    std::vector<std::unique_ptr<state>> states;
    for (std::size_t b : {1u, 8u}) {
        states.push_back(std::make_unique<state>(b));
        state& s = *states.back();
        register_pass(s, "fwd", fwd_madds, [](state& t) { t.forward(); });
        register_pass(s, "p1", p1_madds, [](state& t) { t.p1(); });
        register_pass(s, "p2", p2_madds, [](state& t) { t.p2(); });
        register_pass(s, "p1+p2", p1_madds + p2_madds, [](state& t) {
            t.p1();
            t.p2();
        });
    }
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
