// bench/pb_stage_costs.cpp: per-stage cost of the PB engine on the main job's network (examples/train/networks.hpp:
// small CNN, fine-grained stages, b = 1) with synthetic data (no dataset I/O), for both executors: samples/s, the
// ratio concurrent / sequential, and every stage's busy time per micro-batch. A measurement tool for tuning the
// executors, not a test.
//
//   pb_stage_costs [samples = 3000] [mitigation = sc_lwp|none|lwp|sc|stash|pipemare] [stages = fine|fine-own|2,5,8]
//                  [executor = both|sequential|concurrent]
#include <cblas.h>

#include <pipeprop/pb/pipeline.hpp>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "train/mode_pb.hpp"
#include "train/networks.hpp"

namespace {

using net = train::small_cnn;
namespace pb = pipeprop::pb;

template <class Policy>
pb::run_stats measure(pb::executor_kind kind, std::size_t samples, const std::string& stages) {
    pb::options<Policy> o;
    o.executor = kind;
    o.push_buffer = 64;
    pb::pipeline<net, pb::runtime_partition, Policy> p(train::parse_stages<net>(stages), o);
    p.set_hyperparameters({.learning_rate = 5.1e-5f, .momentum = 0.9967f, .weight_decay = 0.0f});
    constexpr std::size_t in = net::input_shape::size;
    std::vector<float> x(512 * in);
    std::vector<std::int32_t> y(512);
    std::mt19937_64 rng(3);
    for (auto& v : x) v = pipeprop::uniform<float>(rng, 0.0f, 1.0f);
    for (auto& v : y) v = static_cast<std::int32_t>(rng() % 10);
    for (std::size_t i = 0; i < samples; ++i) {
        const std::size_t k = i % 512;
        (void)p.push({x.data() + k * in, in}, {y.data() + k, 1}, 1);
    }
    (void)p.drain();
    return p.stats();
}

template <class Policy>
int run(std::size_t samples, const std::string& stages, const std::string& which) {
    if (which != "both") {  // one executor only (e.g. under perf stat)
        const auto r = measure<Policy>(pb::parse_executor(which), samples, stages);
        std::printf("%s: %.1f samples/s\n", which.c_str(), r.samples_per_second);
        return 0;
    }
    const auto seq = measure<Policy>(pb::executor_kind::sequential, samples, stages);
    const auto con = measure<Policy>(pb::executor_kind::concurrent, samples, stages);
    std::printf("policy %s, %zu stages, %zu samples at b = 1\n", seq.policy.c_str(), seq.stages.size(), samples);
    std::printf("stage  layers    D   params   seq us/sample  con us/sample  con utilization\n");
    double total_seq = 0, total_con = 0;
    for (std::size_t s = 0; s < seq.stages.size(); ++s) {
        const double a = 1e6 * seq.stages[s].busy_seconds / static_cast<double>(samples);
        const double b = 1e6 * con.stages[s].busy_seconds / static_cast<double>(samples);
        total_seq += a;
        total_con += b;
        std::printf("%5zu  [%2zu,%2zu)  %3zu  %7zu  %13.1f  %13.1f  %15.3f\n", s, seq.stages[s].layers.begin,
                    seq.stages[s].layers.end, seq.stages[s].delay, seq.stages[s].parameters, a, b, con.utilization(s));
    }
    std::printf("total busy us/sample: sequential %.1f, concurrent %.1f\n", total_seq, total_con);
    std::printf("sequential %.1f samples/s, concurrent %.1f samples/s, ratio %.3f\n", seq.samples_per_second,
                con.samples_per_second, con.samples_per_second / seq.samples_per_second);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    openblas_set_num_threads(1);
    const std::size_t samples = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 3000;
    const std::string mitigation = argc > 2 ? argv[2] : "sc_lwp";
    const std::string stages = argc > 3 ? argv[3] : "fine";
    const std::string which = argc > 4 ? argv[4] : "both";
    namespace pol = pb::policy;
    if (mitigation == "none") return run<pol::none>(samples, stages, which);
    if (mitigation == "sc") return run<pol::spike_compensation<>>(samples, stages, which);
    if (mitigation == "lwp") return run<pol::linear_weight_prediction<>>(samples, stages, which);
    if (mitigation == "stash") return run<pol::weight_stashing>(samples, stages, which);
    if (mitigation == "pipemare") return run<pol::pipemare>(samples, stages, which);
    return run<pol::sc_lwp<>>(samples, stages, which);
}
