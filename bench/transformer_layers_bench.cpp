// bench/transformer_layers_bench.cpp: Google Benchmark of token_linear and rms_norm (float, one thread) at the shapes
// bench/torch_transformer_layers.py times in PyTorch; bench/transformer_layers.sh runs both and prints the ratios.
//
// Benchmarks: <layer>/b<b>/<fwd|p1|p2>, the layer's forward, backward-p1 (input gradient) and backward-p2 (weight
// gradient, added) called as layer_stack calls them, on per-sample tensors [L, D] = [64, 256]:
//   token_linear  token_linear<768, false> (a fused q/k/v-sized projection, LLaMA style without bias)
//   lm_head       token_linear<1000, false> (the LM head of a 1000-token vocabulary)
//   rms_norm      rms_norm<> over D = 256
// at b = 1 and b = 8. Counter: tokens/s (items_per_second, b L tokens per call).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "pipeprop/layers/rms_norm.hpp"
#include "pipeprop/layers/token_linear.hpp"
#include "pipeprop/seed.hpp"

namespace {

constexpr std::size_t seq = 64, dim = 256;
using in_shape = pipeprop::shape<seq, dim>;

template <class Layer>
struct fixture {
    Layer l;
    std::size_t b;
    std::vector<float> w, dw, x, y, dy, dx;
    pipeprop::stash_t<Layer> st;
    pipeprop::workspace_t<Layer> ws;
    explicit fixture(std::size_t b_)
        : b(b_),
          w(Layer::parameter_count),
          dw(Layer::parameter_count, 0.0f),
          x(b_ * Layer::input_shape::size),
          y(b_ * Layer::output_shape::size),
          dy(b_ * Layer::output_shape::size),
          dx(b_ * Layer::input_shape::size),
          st(pipeprop::make_stash(l, b_)),
          ws(pipeprop::make_workspace(l, b_)) {
        l.init_parameters(w, 1);
        std::mt19937_64 rng(2);
        for (auto& v : x) v = pipeprop::uniform<float>(rng, -1, 1);
        for (auto& v : dy) v = pipeprop::uniform<float>(rng, -1, 1);
        l.forward(w, x.data(), y.data(), b, st, ws);
    }
};

template <class Layer>
void run(benchmark::State& state, std::size_t b, int pass) {
    fixture<Layer> f(b);
    for (auto _ : state) {
        if (pass == 0)
            f.l.forward(f.w, f.x.data(), f.y.data(), f.b, f.st, f.ws);
        else if (pass == 1)
            f.l.backward_input(f.w, f.x.data(), f.y.data(), f.dy.data(), f.dx.data(), f.b, f.st, f.ws);
        else
            f.l.backward_weight(f.dw, f.x.data(), f.y.data(), f.dy.data(), f.b, f.st, f.ws);
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * f.b * seq));
}

template <class Layer>
void register_layer(const std::string& name) {
    static const char* passes[] = {"fwd", "p1", "p2"};
    for (std::size_t b : {1u, 8u})
        for (int p = 0; p < 3; ++p)
            benchmark::RegisterBenchmark((name + "/b" + std::to_string(b) + "/" + passes[p]).c_str(),
                                         [b, p](benchmark::State& s) { run<Layer>(s, b, p); });
}

const int registered = [] {
    register_layer<pipeprop::token_linear<768, false>::bind<float, in_shape>>("token_linear");
    register_layer<pipeprop::token_linear<1000, false>::bind<float, in_shape>>("lm_head");
    register_layer<pipeprop::rms_norm<>::bind<float, in_shape>>("rms_norm");
    return 0;
}();

}  // namespace

BENCHMARK_MAIN();
