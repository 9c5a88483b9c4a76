// bench/roofline.cpp: where one b = 1 training step stands against one core's roofline.
//
// Measures, on one thread:
//   - the fp32 peak of one core for the compiled architecture (bench/fp32_peak.hpp: an FMA loop, best of runs);
//   - the bandwidth of a read-modify-write stream y = y + s x (12 bytes per element) over a buffer the size of the
//     step's working set (parameters, gradient, velocity, activations and their gradients), and over 128 MiB (memory);
//   - the b = 1 step of the small CNN (bench/small_cnn.hpp) and of ResNet-20 (examples/train/networks.hpp), timed
//     as bench/layers_bench.cpp's step/b1 does: sequential_trainer::train_batch (forward, loss, fused backward into
//     a zeroed gradient, momentum-SGD update), median of rounds, thread CPU time and wall clock;
//   - per node, the op costs of pipeprop::measure_op_costs (forward + fused backward + update, one node per range),
//     to see which layers lose most.
// The FLOP and bytes of a step come from the layer types (bench/step_cost.hpp, where the formulas are written down).
// Prints: peak GFLOP/s, the step's GFLOP/s and % of peak (FLOP as the layers run them: a Winograd convolution's
// own arithmetic; also the direct-equivalent rate, the direct convolutions' FLOP over the same time), arithmetic
// intensity, bytes per step, the roofline bound min(peak, intensity x bandwidth), and per node GFLOP/s and the time
// lost against the peak.
//
// Usage: roofline [--network cnn|resnet20|all] [--rounds R] [--quick]
// Built twice by bench/CMakeLists.txt: roofline (-march=native) and roofline_x86_64_v3 (-march=x86-64-v3, AVX2 + FMA).
#include <cblas.h>

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "pipeprop/kernels/fma.hpp"
#include "pipeprop/op_cost_probe.hpp"
#include "pipeprop/sequential_trainer.hpp"
#include "fp32_peak.hpp"
#include "small_cnn.hpp"
#include "step_cost.hpp"
#include "train/networks.hpp"

#ifndef PIPEPROP_BENCH_MARCH
#define PIPEPROP_BENCH_MARCH "unknown"
#endif

namespace {

using clock_type = std::chrono::steady_clock;

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// Bandwidth (GB/s) of y = y + s x over two float buffers of `bytes` in all (reads x and y, writes y: 12 bytes
/// per element), best of `runs` sweeps after one warm-up sweep.
double measure_bandwidth_gbs(std::size_t bytes, int runs) {
    using batch = xsimd::batch<float>;
    const std::size_t n = std::max<std::size_t>(bytes / 8 / batch::size * batch::size, batch::size);
    pipeprop::aligned_vector<float> x(n, 1e-3f), y(n, 0.0f);
    const batch s(0.5f);
    const std::size_t sweeps = std::max<std::size_t>(1, (std::size_t(64) << 20) / (n * 12));
    double best = 0;
    for (int r = 0; r <= runs; ++r) {
        const auto t0 = clock_type::now();
        for (std::size_t k = 0; k < sweeps; ++k)
            for (std::size_t i = 0; i < n; i += batch::size)
                pipeprop::kernels::fma(s, batch::load_aligned(x.data() + i), batch::load_aligned(y.data() + i))
                    .store_aligned(y.data() + i);
        const double t = std::chrono::duration<double>(clock_type::now() - t0).count();
        if (r > 0) best = std::max(best, 12.0 * double(n) * double(sweeps) / t / 1e9);
    }
    volatile float sink = y[n / 2];
    (void)sink;
    return best;
}

std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return "unknown";
}

std::string cpu_flags_of_interest() {
    std::ifstream in("/proc/cpuinfo");
    std::string flags;
    for (std::string line; std::getline(in, line);)
        if (line.rfind("flags", 0) == 0) {
            flags = " " + line.substr(line.find(':') + 1) + " ";
            break;
        }
    std::string out;
    for (const char* f : {"avx2", "fma", "avx512f", "avx512bw", "avx512vl"})
        if (flags.find(std::string(" ") + f + " ") != std::string::npos) out += std::string(out.empty() ? "" : " ") + f;
    return out;
}

std::string load_average() {
    std::ifstream in("/proc/loadavg");
    std::string a, b, c;
    in >> a >> b >> c;
    return a + " " + b + " " + c;
}

double median(std::vector<double> v) { return pipeprop::detail::median(std::move(v)); }

struct step_timing {
    double cpu = 0, wall = 0;  // seconds per step, medians over rounds
};

/// Median seconds per b = 1 step of Net's sequential trainer: `rounds` rounds of `steps` steps after a warm-up.
template <class Net>
step_timing time_step(std::size_t steps, int rounds) {
    using stack_type = pipeprop::layer_stack<Net, float>;
    pipeprop::sequential_trainer_config cfg;
    cfg.max_batch = 1;
    cfg.schedule = pipeprop::optim::lr_schedule::constant(1e-4);
    pipeprop::sequential_trainer<Net, float> trainer(cfg);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    constexpr std::size_t samples = 64;
    std::vector<float> x(samples * stack_type::input_shape::size);
    std::vector<std::int32_t> labels(samples);
    for (auto& v : x) v = u(rng);
    for (std::size_t i = 0; i < samples; ++i) labels[i] = std::int32_t(i % stack_type::output_shape::size);
    const auto step = [&](std::size_t i) {
        const std::size_t k = i % samples;
        volatile float loss = trainer.train_batch(x.data() + k * stack_type::input_shape::size, &labels[k], 1);
        (void)loss;
    };
    for (std::size_t i = 0; i < steps / 4 + 1; ++i) step(i);
    std::vector<double> cpu, wall;
    for (int r = 0; r < rounds; ++r) {
        const double c0 = thread_cpu_seconds();
        const auto t0 = clock_type::now();
        for (std::size_t i = 0; i < steps; ++i) step(i);
        wall.push_back(std::chrono::duration<double>(clock_type::now() - t0).count() / double(steps));
        cpu.push_back((thread_cpu_seconds() - c0) / double(steps));
    }
    return {median(cpu), median(wall)};
}

/// Per-sample working set of a b = 1 step: parameters, gradient and velocity, activations and their gradients.
template <class Net>
double working_set_bytes() {
    using stack_type = pipeprop::layer_stack<Net, float>;
    double act = 0;
    for (std::size_t a : stack_type::activation_size) act += double(a);
    return 4.0 * (3.0 * double(stack_type::parameter_count) + 2.0 * act);
}

template <class Net>
void report(const char* name, double peak, double bw_memory, std::size_t steps, int rounds, int probe_rounds) {
    using stack_type = pipeprop::layer_stack<Net, float>;
    // FLOP as the layers run them (Winograd convolutions do fewer multiply-adds than the direct formula credits)
    constexpr pipeprop::bench::step_cost cost = pipeprop::bench::step_cost_of<Net, float>(1, true);
    const auto total = cost.total();
    const double credited = pipeprop::bench::step_cost_of<Net, float>(1).total().flops;
    const double ws = working_set_bytes<Net>();
    const double bw_ws = measure_bandwidth_gbs(std::size_t(ws), 5);
    const step_timing t = time_step<Net>(steps, rounds);
    const double ai = total.flops / total.bytes;
    const double gflops = total.flops / t.cpu / 1e9;
    const double bound = std::min(peak, ai * bw_ws);
    std::printf("\n## %s, b = 1: %zu nodes, %zu parameters\n\n", name, stack_type::layer_count,
                stack_type::parameter_count);
    std::printf("FLOP per step as run: %.4g (forward %.4g, p1 %.4g, p2 %.4g, loss %.3g, update %.4g); with direct "
                "convolutions: %.4g\n",
                total.flops, cost.forward.flops, cost.backward_input.flops, cost.backward_weight.flops,
                cost.loss.flops, cost.update.flops, credited);
    std::printf("bytes per step: %.4g (forward %.4g, p1 %.4g, p2 %.4g, update %.4g); working set %.2f MB\n",
                total.bytes, cost.forward.bytes, cost.backward_input.bytes, cost.backward_weight.bytes,
                cost.update.bytes, ws / 1e6);
    std::printf("arithmetic intensity: %.2f FLOP/byte\n", ai);
    std::printf("bandwidth (y += s x): %.1f GB/s at the working set, %.1f GB/s at 128 MiB\n", bw_ws, bw_memory);
    std::printf("roofline bound: min(peak %.1f, %.2f x %.1f) = %.1f GFLOP/s (memory-level bound: %.1f)\n", peak, ai,
                bw_ws, bound, std::min(peak, ai * bw_memory));
    std::printf("step: %.1f us CPU time (%.1f us wall), %.0f samples/s\n", 1e6 * t.cpu, 1e6 * t.wall, 1.0 / t.cpu);
    const double direct_gflops = credited / t.cpu / 1e9;
    std::printf("step GFLOP/s as run: %.1f = %.1f%% of peak, %.1f%% of the roofline bound; direct-equivalent "
                "(the direct convolutions' FLOP over the same time): %.1f = %.1f%% of peak\n",
                gflops, 100.0 * gflops / peak, 100.0 * gflops / bound, direct_gflops, 100.0 * direct_gflops / peak);
    std::printf("result network=%s peak_gflops=%.1f step_us=%.2f step_gflops=%.2f pct_peak=%.1f ai=%.3f "
                "bytes=%.0f bound_gflops=%.1f direct_gflops=%.2f pct_peak_direct=%.1f\n",
                name, peak, 1e6 * t.cpu, gflops, 100.0 * gflops / peak, ai, total.bytes, bound, direct_gflops,
                100.0 * direct_gflops / peak);

    // Per node: forward + fused backward (+ p1 skipped on node 0, as the trainer does) + update, one node per range.
    std::vector<pipeprop::layer_range> ranges;
    for (std::size_t i = 0; i < stack_type::layer_count; ++i) ranges.push_back({i, i + 1});
    pipeprop::op_cost_probe_options opt;
    opt.rounds = std::size_t(probe_rounds);
    const auto costs = pipeprop::measure_op_costs<Net, float>(ranges, 1, opt);
    struct row {
        std::size_t i;
        std::string_view node, kind;
        double flops, seconds;
    };
    std::vector<row> rows;
    double probe_total = 0;
    boost::mp11::mp_for_each<boost::mp11::mp_iota_c<stack_type::layer_count>>([&](auto I) {
        constexpr pipeprop::bench::node_cost c =
            pipeprop::bench::node_cost_of<typename stack_type::template layer_type<I>>;
        constexpr double p = double(stack_type::template layer_type<I>::parameter_count);
        const double flops = c.run(0, c.forward.flops) + (I > 0 ? c.run(1, c.backward_input.flops) : 0.0) +
                             c.run(2, c.backward_weight.flops) + 4 * p;
        const auto& oc = costs[I];
        const double s = oc.forward + oc.backward_fused + oc.update;
        probe_total += s;
        rows.push_back({I, stack_type::node_names[I], c.kind, flops, s});
    });
    std::printf("\nper node (measure_op_costs, median of %d rounds; forward + fused backward + update, with the "
                "probe's boundary copies): sum %.1f us against the step's %.1f us\n\n",
                probe_rounds, 1e6 * probe_total, 1e6 * t.cpu);
    std::printf("| node | name | kind | MFLOP | us | GFLOP/s | %% of peak | us lost vs peak | share of lost |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    double lost_total = 0;
    for (const auto& r : rows) lost_total += std::max(0.0, r.seconds - r.flops / (peak * 1e9));
    for (const auto& r : rows) {
        const double lost = std::max(0.0, r.seconds - r.flops / (peak * 1e9));
        const double g = r.seconds > 0 ? r.flops / r.seconds / 1e9 : 0.0;
        std::printf("| %zu | %.*s | %.*s | %.3f | %.1f | %.1f | %.1f | %.1f | %.1f%% |\n", r.i, int(r.node.size()),
                    r.node.data(), int(r.kind.size()), r.kind.data(), r.flops / 1e6, 1e6 * r.seconds, g,
                    100.0 * g / peak, 1e6 * lost, 100.0 * lost / lost_total);
    }
    std::vector<row> by_kind;
    for (const auto& r : rows) {
        auto it = std::find_if(by_kind.begin(), by_kind.end(), [&](const row& k) { return k.kind == r.kind; });
        if (it == by_kind.end())
            by_kind.push_back({0, "", r.kind, r.flops, r.seconds});
        else
            it->flops += r.flops, it->seconds += r.seconds;
    }
    std::sort(by_kind.begin(), by_kind.end(), [&](const row& a, const row& b) {
        return a.seconds - a.flops / (peak * 1e9) > b.seconds - b.flops / (peak * 1e9);
    });
    std::printf("\nby kind, most time lost first:");
    for (const auto& k : by_kind)
        std::printf(" %.*s %.1f us (%.1f GFLOP/s, %.0f%% of lost);", int(k.kind.size()), k.kind.data(),
                    1e6 * k.seconds, k.seconds > 0 ? k.flops / k.seconds / 1e9 : 0.0,
                    100.0 * std::max(0.0, k.seconds - k.flops / (peak * 1e9)) / lost_total);
    std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    std::string network = "all";
    int rounds = 7;
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--network" && i + 1 < argc) {
            network = argv[++i];
        } else if (a == "--rounds" && i + 1 < argc) {
            rounds = std::atoi(argv[++i]);
        } else if (a == "--quick") {
            quick = true;
        } else {
            std::fprintf(stderr, "roofline: unknown argument '%s' (usage: roofline [--network cnn|resnet20|all] "
                                 "[--rounds R] [--quick])\n",
                         argv[i]);
            return 2;
        }
    }
    if (network != "cnn" && network != "resnet20" && network != "all") {
        std::fprintf(stderr, "roofline: --network must be cnn, resnet20 or all, got '%s'\n", network.c_str());
        return 2;
    }
    if (rounds < 1) {
        std::fprintf(stderr, "roofline: --rounds must be >= 1\n");
        return 2;
    }
    if (quick) rounds = std::min(rounds, 3);
    openblas_set_num_threads(1);
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    const std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&now));
    std::printf("# roofline of one b = 1 training step, one thread\n\n");
    std::printf("date: %s\n", date);
    std::printf("cpu: %s; flags: %s\n", cpu_model().c_str(), cpu_flags_of_interest().c_str());
    std::printf("compiled: -march=%s, xsimd architecture %s (%zu floats per batch)\n", PIPEPROP_BENCH_MARCH,
                xsimd::default_arch::name(), xsimd::batch<float>::size);
    std::printf("OPENBLAS_CORETYPE=%s (OpenBLAS core: %s; not used by the step, whose GEMMs are pipeprop's)\n",
                coretype ? coretype : "unset", openblas_get_corename());
    std::printf("load average at start: %s\n", load_average().c_str());
    const double peak = pipeprop::bench::measure_peak_gflops(quick ? 3 : 9);
    const double bw_memory = measure_bandwidth_gbs(std::size_t(128) << 20, quick ? 1 : 3);
    std::printf("peak (FMA loop): %.1f GFLOP/s\n", peak);
    if (network == "cnn" || network == "all")
        report<pipeprop::bench::small_cnn>("small CNN", peak, bw_memory, quick ? 200 : 500, rounds, quick ? 5 : 15);
    if (network == "resnet20" || network == "all")
        report<train::resnet20>("ResNet-20", peak, bw_memory, quick ? 20 : 50, rounds, quick ? 5 : 15);
    std::printf("\nload average at end: %s\n", load_average().c_str());
    return 0;
}
