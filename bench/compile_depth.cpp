// bench/compile_depth.cpp: a user program with a PB pipeline of a ResNet of depth
// PIPEPROP_RESNET_DEPTH (default 20; 6N + 2) cut as the PB paper cuts it (every conv a stage with its norm and relu:
// weight_layer_stages), spike compensation + linear weight prediction, run by both executors.
// bench/compile_depth.sh compiles it at two depths and compares the compilers' CPU seconds and peak memory: the
// layer code is generated per layer type, so ResNet-110 should cost about what ResNet-20 costs. Run, it trains
// a few random samples with each executor and prints that both gave the same bits.
#include <pipeprop/models/resnet.hpp>
#include <pipeprop/optim/scaling_rules.hpp>
#include <pipeprop/pb/pipeline.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#ifndef PIPEPROP_RESNET_DEPTH
#define PIPEPROP_RESNET_DEPTH 20
#endif

namespace pp = pipeprop;
using net = pp::models::resnet_of_depth<PIPEPROP_RESNET_DEPTH>;
using pipeline = pp::pb::pipeline<net, pp::weight_layer_stages, pp::pb::policy::sc_lwp<>>;

namespace {
std::vector<float> train(pp::pb::executor_kind kind, const std::vector<float>& x, const std::vector<std::int32_t>& y,
                         std::size_t n) {
    pipeline pipe({.max_batch = 1, .executor = kind});
    const auto h = pp::optim::scale_hyperparameters({.learning_rate = 0.05, .momentum = 0.9}, 32, 1);
    pipe.set_hyperparameters({.learning_rate = float(h.learning_rate), .momentum = float(h.momentum)});
    for (std::size_t i = 0; i < n; ++i) pipe.push({x.data() + i * 784, 784}, {&y[i], 1}, 1);
    pipe.drain();
    std::vector<float> w(pipeline::stack_type::parameter_count);
    pipe.copy_parameters(w);
    return w;
}
}  // namespace

int main() {
    constexpr std::size_t n = 8;
    std::mt19937 rng(1);
    std::vector<float> x(n * 784);
    std::vector<std::int32_t> y(n);
    for (auto& v : x) v = float(rng() % 256) / 255.0f;
    for (auto& v : y) v = std::int32_t(rng() % 10);
    const auto a = train(pp::pb::executor_kind::sequential, x, y, n);
    const auto b = train(pp::pb::executor_kind::concurrent, x, y, n);
    // Bit for bit (a NaN equals a NaN of the same bits).
    const bool same = std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    std::size_t non_finite = 0;
    for (float v : a) non_finite += !std::isfinite(v);
    std::printf("ResNet-%d: %zu stages, %zu nodes, %zu parameters (%zu not finite); concurrent == sequential: %s\n",
                PIPEPROP_RESNET_DEPTH, pipeline::stage_count, pipeline::stack_type::layer_count, a.size(), non_finite,
                same ? "yes" : "NO");
    return same ? 0 : 1;
}
