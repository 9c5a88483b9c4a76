// bench/two_stage_bp_7b.cpp: what 2-stage backpropagation (2BP) should gain at the 2BP paper's 7B shapes (Rae et al.,
// arXiv 2405.18047: a LLaMA-like 7B transformer on 4 GPUs; docs/schedules.md), predicted by the
// schedule simulator (sync/simulator.hpp) from op costs measured on this machine.
//
// What it does:
//  1. Times, with pipeprop::measure_op_costs (op_cost_probe.hpp; one micro-batch of b = 1 sequence, float,
//     OpenBLAS on one thread), the ops of ONE LLaMA-7B transformer block (prenorm_transformer_block<32 heads,
//     SwiGLU hidden 11008> on [L, D = 4096], 202.4 M parameters): T_F, T_B (backward-p1), T_W (backward-p2) and
//     T_BW (fused); likewise the token embedding (32000 x 4096) and the final RMSNorm + LM head (token_linear to
//     32000, no bias). They are the three ranges of one network embedding - block - norm - head, so the block's p1
//     computes its input gradient as on any inner stage (only the first range skips it). It also times the token
//     cross-entropy over [L, 32000] (added to the last stage's F, as the executor's last stage computes the loss)
//     and one AdamW update (optim::adamw_update) over each part's real parameter count (memory-bound: w, m, v, g).
//  2. Builds per-stage costs for p = 4 and p = 8 stages of the 32 blocks split evenly (32 / p blocks per stage:
//     every op of a stage costs 32 / p times the block's), once with blocks only and once with the embedding on
//     stage 0 and norm + head + loss on stage p - 1, and simulates every schedule (GPipe, 1F1B, ZB-H1, ZB-H2 on p
//     stages; interleaved 1F1B with 2 chunks per device and ZB-V on 2p stages of 16 / p blocks, on the same p
//     devices) with and without 2BP for m in {p, 2p, 4p}: one step behind a barrier, and the steady state (3 back-to-back steps,
//     no barrier: the last step's time, the ZB paper's accounting).
//  3. Prints markdown tables: the per-op costs, the predictions (samples/s = sequences/s with/without 2BP, their
//     ratio, the 2BP run against 1F1B without 2BP), and the papers' headline numbers beside the closest prediction.
// Assumptions (printed with the tables): communication is a fixed message latency per boundary hop, L x D x 4 bytes
// over --link-gbs GB/s (default 0: no communication cost); activation memory is not limited (every schedule runs
// whatever its op lists keep in flight); the optimizer is AdamW, once per step per stage, no gradient clipping.
// Options: --length 256|512 (L, default 512), --rounds R (timed rounds of the probe, default 3), --link-gbs G.
#include <cblas.h>

#include <CLI/CLI.hpp>

#include <pipeprop/pipeprop.hpp>
#include <pipeprop/graph/transformer_block.hpp>
#include <pipeprop/layers/rms_norm.hpp>
#include <pipeprop/layers/token_embedding.hpp>
#include <pipeprop/layers/token_linear.hpp>
#include <pipeprop/loss/token_cross_entropy.hpp>
#include <pipeprop/op_cost_probe.hpp>
#include <pipeprop/optim/adamw.hpp>
#include <pipeprop/sync/schedule.hpp>
#include <pipeprop/sync/simulator.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace pp = pipeprop;
namespace ps = pipeprop::sync;

namespace {

// LLaMA-7B (Touvron et al. 2023, arXiv 2302.13971, Table 2): D = 4096, 32 heads, 32 blocks, SwiGLU hidden 11008,
// vocabulary 32000.
constexpr std::size_t model_dim = 4096, heads = 32, hidden = 11008, vocabulary = 32000, blocks = 32;

/// Token ids [L] -> embedding [L, D] -> one 7B block -> RMSNorm -> LM head [L, V]. Only the block is timed as a
/// block; the embedding and the head are the first and last parts of the pipeline.
template <std::size_t L>
using probe_network = pp::network<pp::shape<L>, pp::token_embedding<vocabulary, model_dim>,
                                  pp::prenorm_transformer_block<heads, hidden>, pp::rms_norm<>,
                                  pp::token_linear<vocabulary, false>>;

struct options {
    std::size_t length = 512;
    std::size_t rounds = 3;
    double link_gbs = 0;
};

/// Costs of one part (seconds, b = 1 sequence): the probe's ops, the AdamW update of its parameters, their count.
struct part_costs {
    const char* name;
    pp::op_costs op;
    double adamw = 0;
    std::size_t parameters = 0;
};

std::string cpu_line() {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model = "unknown", flags;
    while (std::getline(in, line)) {
        if (model == "unknown" && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
        if (flags.empty() && line.rfind("flags", 0) == 0) flags = line + " ";
    }
    const auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
    return model + "; avx2 " + (has("avx2") ? "yes" : "no") + ", avx512f " + (has("avx512f") ? "yes" : "no");
}

std::string load_average() {
    std::ifstream in("/proc/loadavg");
    std::string a, b, c;
    in >> a >> b >> c;
    return a + " " + b + " " + c;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Median seconds of one AdamW update (optim::adamw_update, lr 0) over n parameters, `reps` times after a warm-up.
double time_adamw(std::size_t n, std::size_t reps) {
    std::vector<float> w(n, 0.01f), m(n, 0.f), v(n, 0.f), g(n, 0.001f);
    const auto c = pp::optim::adamw_step_coefficients<float>(0.0, 0.0, 0.9, 0.999, 1e-8, 1);
    std::vector<double> t;
    for (std::size_t r = 0; r <= reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        pp::optim::adamw_update(n, w.data(), m.data(), v.data(), g.data(), c);
        if (r > 0) t.push_back(seconds_since(t0));
    }
    return pp::detail::median(t);
}

/// Median seconds of token_cross_entropy's loss and gradient over one sequence of L tokens and V logits each.
template <std::size_t L>
double time_token_loss(std::size_t reps) {
    using loss = pp::token_cross_entropy<float, L, vocabulary>;
    std::mt19937_64 rng(5);
    std::vector<float> logits(L * vocabulary), grad(L * vocabulary);
    for (auto& z : logits) z = pp::uniform<float>(rng, -1.f, 1.f);
    std::vector<std::int32_t> y(L);
    for (auto& t : y) t = static_cast<std::int32_t>(rng() % vocabulary);
    std::vector<double> t;
    for (std::size_t r = 0; r <= reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        (void)loss::loss_and_gradient(logits.data(), y.data(), 1, grad.data(), 1.f / L);
        if (r > 0) t.push_back(seconds_since(t0));
    }
    return pp::detail::median(t);
}

/// Adds k times part's op costs and AdamW update to c.
void add_part(ps::stage_costs& c, const part_costs& part, double k) {
    c.forward += k * part.op.forward;
    c.backward_input += k * part.op.backward_input;
    c.backward_weight += k * part.op.backward_weight;
    c.backward_fused += k * part.op.backward_fused;
    c.optimizer += k * part.adamw;
}

/// Stage costs of p stages of blocks / p blocks each; with_ends: the embedding on stage 0, head + loss on p - 1.
std::vector<ps::stage_costs> pipeline_costs(const part_costs& embedding, const part_costs& block,
                                            const part_costs& head, double loss, std::size_t p, bool with_ends) {
    std::vector<ps::stage_costs> c(p, ps::stage_costs{0, 0, 0, 0, 0});
    for (std::size_t s = 0; s < p; ++s) add_part(c[s], block, static_cast<double>(blocks / p));
    if (with_ends) {
        add_part(c[0], embedding, 1);
        add_part(c[p - 1], head, 1);
        c[p - 1].forward += loss;
    }
    return c;
}

// Every schedule; the virtual-stage ones (interleaved 1F1B with 2 chunks per device, ZB-V) on 2p stages of
// blocks / (2p) blocks on the same p devices.
constexpr std::size_t kind_count = std::size(ps::all_schedule_kinds);
constexpr const auto& kinds = ps::all_schedule_kinds;

/// One table row's simulations: one step with barrier, and the steady state.
struct predicted {
    ps::simulation_result step_off, step_on, steady_off, steady_on;
};

predicted predict(ps::schedule_kind k, std::size_t p, std::size_t m, const std::vector<ps::stage_costs>& costs,
                  double latency) {
    const ps::simulation_options one{.steps = 1, .barrier = true, .message_latency = latency};
    const ps::simulation_options steady{.steps = 3, .barrier = false, .message_latency = latency};
    const auto off = ps::make_schedule(k, p, m, false), on = ps::make_schedule(k, p, m, true);
    return {ps::simulate(off, costs, one), ps::simulate(on, costs, one), ps::simulate(off, costs, steady),
            ps::simulate(on, costs, steady)};
}

/// Per p (4, 8), m (p, 2p, 4p) and schedule (kinds order), steady state: 2BP on / off, and 2BP on / 1F1B off.
struct headline {
    double ratio[2][3][kind_count];
    double vs_1f1b[2][3][kind_count];
};

/// Prints to `out` (nothing when null) the prediction table of one cost model (with_ends: embedding on stage 0, head
/// + loss on stage p - 1) and returns its steady-state ratios for the comparison with the papers.
headline print_predictions(std::FILE* out, const char* title, bool with_ends, const part_costs& embedding,
                           const part_costs& block, const part_costs& head, double loss, double latency) {
    if (out)
        std::fprintf(out,
            "\n### %s\n\nsamples/s = sequences/s (b = 1 sequence per micro-batch, m micro-batches per step); ratio = "
            "2BP on / off throughput; \"vs 1F1B\" = this schedule with 2BP against 1F1B without 2BP (steady state).\n\n"
            "| p | m | schedule | one step: samples/s off / on | one step: ratio | steady: samples/s off / on | "
            "steady: ratio | steady: vs 1F1B | steady bubble ratio off / on | peak in-flight off / on |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n",
            title);
    headline h{};
    for (std::size_t pi = 0; pi < 2; ++pi) {
        const std::size_t p = pi == 0 ? 4 : 8;
        const auto costs = pipeline_costs(embedding, block, head, loss, p, with_ends);
        const auto chunk_costs = pipeline_costs(embedding, block, head, loss, 2 * p, with_ends);
        for (std::size_t mi = 0; mi < 3; ++mi) {
            const std::size_t m = p << mi;  // p, 2p, 4p
            const auto sps = [m](const ps::simulation_result& x) { return ps::samples_per_second(x, m); };
            const double base = sps(predict(ps::schedule_kind::one_f_one_b, p, m, costs, latency).steady_off);
            for (std::size_t ki = 0; ki < kind_count; ++ki) {
                const bool virtual_stages = ps::has_virtual_stages(kinds[ki]);
                const auto r = predict(kinds[ki], virtual_stages ? 2 * p : p, m, virtual_stages ? chunk_costs : costs,
                                       latency);
                const double steady_ratio = sps(r.steady_on) / sps(r.steady_off);
                const double against = sps(r.steady_on) / base;
                h.ratio[pi][mi][ki] = steady_ratio;
                h.vs_1f1b[pi][mi][ki] = against;
                // a zero bubble can come out a rounding error below 0
                const auto bubble = [](const ps::simulation_result& x) { return std::max(0.0, x.bubble_ratio); };
                const auto peak = [](const ps::simulation_result& x) {
                    return *std::max_element(x.peak_in_flight.begin(), x.peak_in_flight.end());
                };
                if (!out) continue;
                std::fprintf(out,
                             "| %zu | %zu | %s | %.4g / %.4g | %.3f | %.4g / %.4g | %.3f | %.3f | %.3f / %.3f | "
                             "%zu / %zu |\n",
                            p, m, std::string(ps::name(kinds[ki])).c_str(), sps(r.step_off), sps(r.step_on),
                            sps(r.step_on) / sps(r.step_off), sps(r.steady_off), sps(r.steady_on), steady_ratio,
                            against, bubble(r.steady_off), bubble(r.steady_on), peak(r.steady_off),
                            peak(r.steady_on));
            }
        }
    }
    return h;
}

template <std::size_t L>
int run(const options& o) {
    using net = probe_network<L>;
    using stack_t = pp::layer_stack<net, float>;
    constexpr std::size_t n = stack_t::layer_count;
    std::printf("# 2BP predictions at LLaMA-7B block shapes (L = %zu, D = %zu, %zu heads, SwiGLU hidden %zu, V = %zu, "
                "%zu blocks)\n\nhost: %s; %u hardware threads; OpenBLAS on 1 thread\nload average before: %s\n",
                L, model_dim, heads, hidden, vocabulary, blocks, cpu_line().c_str(),
                std::thread::hardware_concurrency(), load_average().c_str());
    std::fflush(stdout);

    // 1. op costs: ranges embedding [0, 1), block [1, n - 2), norm + head [n - 2, n)
    const std::vector<pp::layer_range> ranges{{0, 1}, {1, n - 2}, {n - 2, n}};
    const auto t0 = std::chrono::steady_clock::now();
    const auto op = pp::measure_op_costs<net>(ranges, 1, {.rounds = o.rounds, .seed = 1, .slots = {}});
    const double probe_seconds = seconds_since(t0);
    part_costs parts[3] = {{"token embedding 32000 x 4096", op[0], 0, stack_t::parameter_count_of(ranges[0])},
                           {"transformer block (7B)", op[1], 0, stack_t::parameter_count_of(ranges[1])},
                           {"RMSNorm + LM head 4096 -> 32000", op[2], 0, stack_t::parameter_count_of(ranges[2])}};
    for (auto& part : parts) part.adamw = time_adamw(part.parameters, o.rounds);
    const double loss = time_token_loss<L>(o.rounds);
    const auto& [embedding, block, head] = parts;

    // forward multiply-adds of the block per sequence (causal_self_attention.hpp, swiglu.hpp): 4 L D^2 + 2 L^2 D
    // (the L x L products in full) + 3 L D H
    const double block_flop =
        2.0 * (4.0 * L * model_dim * model_dim + 2.0 * L * L * model_dim + 3.0 * L * model_dim * hidden);
    std::printf(
        "probe: %zu timed rounds (+1 warm-up) in %.0f s; block nodes [%zu, %zu) (%.*s .. %.*s)\n\n"
        "## Per-op costs, one micro-batch of b = 1 sequence (ms)\n\n"
        "| part | parameters | T_F | T_B (p1) | T_W (p2) | T_BW (fused) | T_B + T_W - T_BW | T_opt (AdamW) |\n"
        "|---|---|---|---|---|---|---|---|\n",
        o.rounds, probe_seconds, ranges[1].begin, ranges[1].end, static_cast<int>(stack_t::node_names[1].size()),
        stack_t::node_names[1].data(), static_cast<int>(stack_t::node_names[n - 3].size()),
        stack_t::node_names[n - 3].data());
    for (const auto& part : parts)
        std::printf("| %s | %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", part.name, part.parameters,
                    part.op.forward * 1e3, part.op.backward_input * 1e3, part.op.backward_weight * 1e3,
                    part.op.backward_fused * 1e3,
                    (part.op.backward_input + part.op.backward_weight - part.op.backward_fused) * 1e3,
                    part.adamw * 1e3);
    std::printf("| token cross-entropy [%zu, %zu] (in the last stage's F) | 0 | %.1f | - | - | - | - | - |\n", L,
                vocabulary, loss * 1e3);
    std::printf("\nblock: T_B / T_F = %.2f, T_W / T_F = %.2f; forward %.0f GFLOP at %.1f GFLOP/s\n",
                block.op.backward_input / block.op.forward, block.op.backward_weight / block.op.forward,
                block_flop * 1e-9, block_flop * 1e-9 / block.op.forward);

    // 2. predictions
    const double message_bytes = static_cast<double>(L * model_dim * sizeof(float));
    const double latency = o.link_gbs > 0 ? message_bytes / (o.link_gbs * 1e9) : 0.0;
    char link[64] = "0 (not modelled)";
    if (o.link_gbs > 0) std::snprintf(link, sizeof link, "= bytes / %g GB/s", o.link_gbs);
    std::printf(
        "\n## Assumptions\n\n"
        "- Stages: the 32 blocks split evenly, 32 / p blocks per stage; every op of a stage costs 32 / p times the "
        "block's (ops of consecutive blocks run back to back on one device). Costs measured on this CPU (one "
        "thread), not on a GPU: only their ratios carry over.\n"
        "- Communication: each boundary message [L, D] = %.1f MiB (float); message latency %s per hop (%.3g ms, "
        "%.2g%% of a 4-stage T_F).\n"
        "- Memory: activation memory not limited (GPipe and 2BP keep up to m micro-batches in flight; the "
        "columns 'peak in-flight' say how many).\n"
        "- Optimizer: AdamW once per step on every stage (%.1f ms per block), no gradient clipping (no global "
        "barrier inside a step); one step: the next step waits for every stage's update.\n",
        message_bytes / (1024.0 * 1024.0), link, latency * 1e3,
        100.0 * latency / (block.op.forward * static_cast<double>(blocks / 4)), block.adamw * 1e3);
    (void)print_predictions(stdout, "Blocks only (32 / p blocks per stage)", false, embedding, block, head, loss,
                            latency);
    const headline h = print_predictions(stdout,
                                         "With the embedding on stage 0 and RMSNorm + LM head + loss on stage p - 1",
                                         true, embedding, block, head, loss, latency);
    // the same with T_BW = T_B + T_W: the fused backward runs p1 then p2 per layer, the same work as the split one,
    // so a measured difference is cache behaviour or noise, and it moves the predicted gain
    part_costs summed[3] = {embedding, block, head};
    for (auto& part : summed) part.op.backward_fused = part.op.backward_input + part.op.backward_weight;
    const headline h_sum = print_predictions(nullptr, "", true, summed[0], summed[1], summed[2], loss, latency);

    // 3. beside the papers: m = p (the largest bubble) and m = 4p
    std::printf(
        "\n## Beside the papers' numbers (prediction: steady state, with embedding and head)\n\n"
        "| source | reported | comparison | p = 4, m = 4 | p = 4, m = 16 | p = 8, m = 8 | p = 8, m = 32 |\n"
        "|---|---|---|---|---|---|---|\n"
        "| 2BP paper (Rae et al. 2024), LLaMA-like 7B, 4 GPUs | 1.70x | the schedule with 2BP against the same "
        "schedule without (T_BW measured) |");
    const auto ratio_cells = [](const headline& x) {
        for (std::size_t pi = 0; pi < 2; ++pi)
            for (const std::size_t mi : {std::size_t(0), std::size_t(2)})
                std::printf(" gpipe %.3f, 1f1b %.3f, zb_h1 %.3f, zb_h2 %.3f, interleaved_1f1b %.3f, zb_v %.3f |",
                            x.ratio[pi][mi][0], x.ratio[pi][mi][1], x.ratio[pi][mi][2], x.ratio[pi][mi][3],
                            x.ratio[pi][mi][4], x.ratio[pi][mi][5]);
    };
    ratio_cells(h);
    std::printf("\n| (same) | | the same, with T_BW = T_B + T_W |");
    ratio_cells(h_sum);
    const char* zb_rows[4] = {
        "\n| Zero Bubble (Qi et al. 2024), ZB-1p (here its handcrafted form ZB-H1 with 2BP) | up to +23% (1F1B's "
        "memory) | against 1F1B without the split |",
        "\n| Zero Bubble, ZB-2p (here ZB-H2 with 2BP) | up to +31% (memory relaxed) | against 1F1B without the "
        "split |",
        "\n| (Megatron-LM's interleaved 1F1B, 2 chunks per device, with 2BP) | bubble / 2 | against 1F1B without the "
        "split |",
        "\n| Zero Bubble, ZB-V (2 chunks per device, V placement, with 2BP) | 1F1B's memory, no bubble when T_F = "
        "T_B = T_W | against 1F1B without the split |"};
    for (std::size_t z = 0; z < 4; ++z) {
        std::printf("%s", zb_rows[z]);
        for (std::size_t pi = 0; pi < 2; ++pi)
            for (const std::size_t mi : {std::size_t(0), std::size_t(2)})
                std::printf(" %.3f |", h.vs_1f1b[pi][mi][2 + z]);
    }
    std::printf("\n");
    std::printf("\nload average after: %s\n", load_average().c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    CLI::App app{
        "two_stage_bp_7b: per-op costs of one LLaMA-7B transformer block, its embedding and LM head, measured here, "
        "and the schedule simulator's 2BP predictions for 4 and 8 stages"};
    app.add_option("--length", o.length, "Sequence length L (compiled: 256 or 512)")
        ->check(CLI::IsMember({std::size_t(256), std::size_t(512)}))
        ->capture_default_str();
    app.add_option("--rounds", o.rounds, "Timed rounds of the probe (medians over them; plus one warm-up)")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    app.add_option("--link-gbs", o.link_gbs,
                   "Link bandwidth in GB/s for the message latency L x D x 4 bytes / bandwidth per boundary hop; 0: "
                   "no communication cost")
        ->check(CLI::Range(0.0, 1e6))
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    openblas_set_num_threads(1);
    try {
        return o.length == 256 ? run<256>(o) : run<512>(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "two_stage_bp_7b: error: %s\n", e.what());
        return 1;
    }
}
