// bench/two_stage_bp.cpp: 2-stage backpropagation (2BP) on and off, measured side by side, next to the schedule
// simulator's prediction (docs/schedules.md).
//
// What it does:
//  1. Measures every layer's T_F, T_B, T_W at the middle micro-batch size and cuts the network into p = --stages
//     balanced stages (pipeprop::balanced_partition).
//  2. For each m in --micro-batches: measures each stage's T_F, T_B, T_W, T_BW, T_opt as the single-threaded
//     executor runs them (stage_costs_as_run, with the network's own loss and optimizer) and simulates every
//     schedule with and without 2BP: the predicted step time, samples/s and with/without ratio.
//  3. Runs the concurrent executor (oneTBB flow graph, one node per stage) for every schedule with and without 2BP,
//     interleaved: in each of --rounds rounds every schedule runs --steps steps without 2BP and --steps with, back
//     to back (pair order alternating, schedule order rotated per round); reports medians over rounds of samples/s
//     and of the per-round (paired) with/without ratio. It also predicts from the op durations recorded inside
//     these concurrent runs (the same load and contention), next to the prediction from costs measured alone.
//     The virtual-stage schedules (interleaved 1F1B with 2 chunks per device, ZB-V) run the same way on a second
//     balanced cut into 2p stages, on p lanes (each lane a device holding 2 stages), against their own
//     predictions from that cut's costs.
//  3b. Consecutive steps (schedule_executor::consecutive_steps): every schedule with 2BP runs --consecutive steps
//     back to back without a barrier, paired in each round with the same number of step() calls; the measured
//     speed-up next to the simulator's (barrier off against on, from the in-run costs).
//  4. Prints markdown tables: measured vs predicted, and the predictions for p = 4 and p = 8 with the same per-stage
//     costs (a network p/2 times deeper with identical stages).
// Options: --network mlp|cnn|llama-tiny, --batch B, --micro-batches 2,4,8, --stages p, --rounds, --steps,
// --consecutive k, --trace-dir DIR (Chrome traces of one measured step and its prediction per variant at each m;
// with --consecutive, of k consecutive ZB-H2 + 2BP steps and the simulator's steady state).
// Each network trains with the loss and optimizer of the main program's --mode sync: the image networks softmax
// cross-entropy and momentum SGD; llama-tiny (examples/train/networks.hpp, per-token logits) token_cross_entropy
// (mean over the B x 64 tokens) and AdamW, on random byte tokens (timing only: no op's cost depends on the token
// values, so no corpus is read). Learning rate 0 everywhere: the weights stay, every op and update still runs.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include <pipeprop/pipeprop.hpp>
#include <pipeprop/balanced_partition.hpp>
#include <pipeprop/sync/cost_measurement.hpp>
#include <pipeprop/sync/executor.hpp>
#include <pipeprop/sync/simulator.hpp>
#include <pipeprop/sync/trace.hpp>
#include <pipeprop/loss/token_cross_entropy.hpp>
#include <pipeprop/optim/adamw.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "train/networks.hpp"

namespace pp = pipeprop;
namespace ps = pipeprop::sync;
namespace mp = boost::mp11;

namespace {

/// A wide MLP whose dense layers cost about the same in F, p1 and p2 (three GEMMs of equal size).
using wide_mlp = pp::network<pp::shape<1024>, pp::dense<1024>, pp::relu, pp::dense<1024>, pp::relu, pp::dense<1024>,
                             pp::relu, pp::dense<1024>, pp::relu, pp::dense<10>>;

struct bench_options {
    std::string network = "mlp";
    std::size_t batch = 256;
    std::vector<std::size_t> micro_batches{2, 4, 8};
    std::size_t stages = 2;
    std::size_t rounds = 15;
    std::size_t steps = 1;
    std::size_t consecutive = 4;
    std::string trace_dir;
};

/// The loss and optimizer policies Net trains with in the main program's --mode sync (examples/train/mode_sync.hpp):
/// softmax cross-entropy and momentum SGD for a classifier; token_cross_entropy<float, L, V> and AdamW (its default
/// betas and eps) for a sequence model (output [L, V]).
template <class Net, bool Sequence = train::is_sequence_model<Net>>
struct training_policies {
    using loss = pp::detail::default_loss_t<Net, float>;
    using optimizer = pp::optim::sgd<float>;
};
template <class Net>
struct training_policies<Net, true> {
    using output = typename pp::layer_stack<Net, float>::output_shape;
    using loss = pp::token_cross_entropy<float, output::dims[0], output::dims[1]>;
    using optimizer = pp::optim::adamw<float>;
};

/// Hyperparameters of every benchmark step: learning rate 0 (the weights stay; the update's work is still done),
/// the optimizer's default momentum (momentum SGD 0.9; AdamW requires 0), no weight decay.
template <class Optimizer>
constexpr pp::optim::hyperparameters<double> frozen_step{
    .learning_rate = 0.0, .momentum = Optimizer::config_type::default_momentum, .weight_decay = 0.0};

/// Per-stage T_F, T_B, T_W, T_BW and T_opt of the cut `ranges` as the single-threaded executor with Net's own loss
/// and optimizer runs them on the batch (x, y) in m micro-batches: GPipe with 2BP on and off, `steps` steps each,
/// the first a warm-up; medians of the spans (sync::costs_from_spans). sync::measure_stage_costs does the same with
/// the default loss and momentum SGD only, on zero inputs.
template <class Net, class Loss, class Optimizer>
std::vector<ps::stage_costs> stage_costs_as_run(const std::vector<pp::layer_range>& ranges, std::size_t m,
                                                const std::vector<float>& x, const std::vector<std::int32_t>& y,
                                                std::size_t steps = 3) {
    using options = ps::basic_executor_options<typename Optimizer::config_type>;
    const options eo{.micro_batches = m,
                     .max_batch = y.size() / Loss::targets_per_sample,
                     .seed = 1,
                     .executor = ps::executor_kind::sequential};
    std::vector<ps::op_span> spans;
    for (const bool two : {true, false}) {
        ps::schedule_executor<Net, float, Loss, Optimizer> ex(ps::schedule_kind::gpipe, two, ranges, eo);
        for (std::size_t k = 0; k < steps; ++k) {
            ex.step(x, y, frozen_step<Optimizer>);
            if (k == 0) continue;
            const auto sp = ex.spans();
            spans.insert(spans.end(), sp.begin(), sp.end());
        }
    }
    return ps::costs_from_spans(spans, ranges.size());
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One variant under measurement: its step function, its schedule, its spans of the last step.
struct runner {
    std::string label;
    ps::schedule_kind kind;
    bool two_stage_bp;
    std::function<void()> step;
    std::function<const ps::schedule&()> schedule;
    std::function<std::vector<ps::op_span>()> spans;
    std::vector<double> step_seconds;     // per round
    std::vector<ps::op_span> spans_seen;  // spans of the last step of every round
    std::vector<double> latencies;        // message latency of the last step of every round
};

struct row {
    std::size_t m;
    ps::schedule_kind kind;
    double predicted_off, predicted_on;  // step seconds, costs measured alone (sequential executor)
    double in_run_off, in_run_on;        // step seconds, costs = median op durations of the concurrent runs
    double measured_off, measured_on;    // median step seconds
    double measured_ratio;               // median of paired off/on
};

// 2BP on, one step at a time against k consecutive steps (seconds per step).
struct consecutive_row {
    std::size_t m;
    ps::schedule_kind kind;
    double measured_single, measured_consecutive, measured_ratio;  // ratio: median of paired single / consecutive
    double predicted_single, predicted_consecutive;                // simulator, in-run costs: barrier on / off
};

template <class Net>
int run(const bench_options& o) {
    using stack_t = pp::layer_stack<Net, float>;
    using loss_t = typename training_policies<Net>::loss;
    using optimizer_t = typename training_policies<Net>::optimizer;
    constexpr bool token_input = pp::first_layer_reads_token_ids<stack_t>();
    const std::size_t B = o.batch, p = o.stages;
    std::printf("# 2BP benchmark: network %s (%zu layers, %zu parameters), batch B = %zu, p = %zu stages\n",
                o.network.c_str(), stack_t::layer_count, stack_t::parameter_count, B, p);
    std::printf("loss %s, optimizer %s (learning rate 0); inputs: %s\n",
                train::is_sequence_model<Net> ? "token cross-entropy (mean over the batch's tokens)"
                                              : "softmax cross-entropy",
                optimizer_t::name,
                token_input ? "random byte tokens and next-token targets (timing only; costs do not depend on them)"
                            : "uniform [-1, 1] values, random labels");

    // 1. balanced cut from per-layer costs at the middle micro-batch size
    const std::size_t m_mid = o.micro_batches[o.micro_batches.size() / 2];
    const auto layer_costs = ps::measure_layer_costs<Net>((B + m_mid - 1) / m_mid, 7);
    std::vector<double> totals;
    for (const auto& c : layer_costs) totals.push_back(c.total());
    // only where the network allows a cut (a projection shortcut shares its add's stage)
    const auto points = pipeprop::balanced_partition(totals, p, stack_t::cut_allowed_before);
    const auto ranges = pp::partition_at(stack_t::layer_count, points);
    std::printf("\nPer-layer costs at b = %zu (ms, F / p1 / p2):", (B + m_mid - 1) / m_mid);
    for (std::size_t i = 0; i < layer_costs.size(); ++i)
        std::printf("%s L%zu %.3f/%.3f/%.3f", i % 4 == 0 ? "\n " : "", i, layer_costs[i].forward * 1e3,
                    layer_costs[i].backward_input * 1e3, layer_costs[i].backward_weight * 1e3);
    std::printf("\nBalanced cut:");
    for (const auto r : ranges) {
        double c = 0;
        for (std::size_t k = r.begin; k < r.end; ++k) c += totals[k];
        std::printf(" [%zu,%zu) %.3f ms", r.begin, r.end, c * 1e3);
    }
    for (std::size_t s = 1; s < ranges.size(); ++s)
        std::printf("%s %.*s", s == 1 ? "\nStage boundaries before:" : ",",
                    static_cast<int>(stack_t::node_names[ranges[s].begin].size()),
                    stack_t::node_names[ranges[s].begin].data());
    std::printf("\n");

    // the virtual-stage schedules' cut: 2p balanced stages, 2 per device
    const auto points_v = pipeprop::balanced_partition(totals, 2 * p, stack_t::cut_allowed_before);
    const auto ranges_v = pp::partition_at(stack_t::layer_count, points_v);
    std::printf("Virtual-stage cut (2 stages per device):");
    for (const auto r : ranges_v) std::printf(" [%zu,%zu)", r.begin, r.end);
    std::printf("\n");

    std::vector<row> rows;
    std::vector<consecutive_row> consecutive_rows;
    std::vector<std::pair<std::size_t, std::vector<ps::stage_costs>>> costs_per_m;
    std::mt19937_64 rng(7);
    constexpr std::size_t targets = loss_t::targets_per_sample;
    constexpr std::size_t classes = stack_t::output_shape::size / targets;  // per target (the vocabulary V)
    std::vector<float> x(B * stack_t::input_shape::size);
    for (auto& v : x) {
        if constexpr (token_input)
            v = static_cast<float>(rng() % stack_t::template layer_type<0>::vocab_size);
        else
            v = pp::uniform<float>(rng, -1.f, 1.f);
    }
    std::vector<std::int32_t> y(B * targets);
    for (auto& v : y) v = static_cast<std::int32_t>(rng() % classes);
    using executor_t = ps::schedule_executor<Net, float, loss_t, optimizer_t>;
    const std::size_t k_steps = o.consecutive;
    const std::vector<typename executor_t::batch_view> batches(k_steps, {x, y, frozen_step<optimizer_t>});

    const auto print_costs = [](const char* what, const std::vector<ps::stage_costs>& c) {
        std::printf("%s", what);
        for (std::size_t s = 0; s < c.size(); ++s)
            std::printf(" | s%zu %.3f/%.3f/%.3f/%.3f/%.3f", s, c[s].forward * 1e3, c[s].backward_input * 1e3,
                        c[s].backward_weight * 1e3, c[s].fused() * 1e3, c[s].optimizer * 1e3);
        std::printf("\n");
    };
    for (const std::size_t m : o.micro_batches)
        for (const bool virtual_group : {false, true}) {
            const auto& cut = virtual_group ? ranges_v : ranges;
            std::vector<ps::schedule_kind> kinds;
            for (const auto k : ps::all_schedule_kinds)
                if (ps::has_virtual_stages(k) == virtual_group && ps::schedule_accepts(k, cut.size(), m))
                    kinds.push_back(k);
            if (kinds.empty()) continue;
            const std::size_t b = (B + m - 1) / m;
            // 2. costs as the executor runs the ops, and the predictions
            const auto costs = stage_costs_as_run<Net, loss_t, optimizer_t>(cut, m, x, y);
            if (!virtual_group) costs_per_m.push_back({m, costs});
            std::printf("\nm = %zu (b = %zu)%s: stage costs (ms) F / p1 / p2 / p1+p2 / opt:", m, b,
                        virtual_group ? ", virtual-stage cut" : "");
            print_costs("", costs);

            // 3. measured, interleaved: per schedule 2BP off, 2BP on, and 2BP on with consecutive steps
            typename executor_t::options_type eo;
            eo.micro_batches = m;
            eo.max_batch = B;
            eo.seed = 1;
            eo.executor = ps::executor_kind::concurrent;
            eo.max_consecutive_steps = std::max<std::size_t>(1, k_steps);
            std::vector<std::shared_ptr<void>> owners;
            std::vector<runner> runners;  // per schedule: off, on, on consecutive
            for (const auto k : kinds)
                for (std::size_t variant = 0; variant < 3; ++variant) {
                    const bool two = variant > 0;
                    auto ex = std::make_shared<executor_t>(k, two, cut, eo);
                    owners.push_back(ex);
                    runner r;
                    r.kind = k;
                    r.two_stage_bp = two;
                    r.label = ex->current_schedule().label() + (variant == 2 ? " consecutive" : "");
                    if (variant < 2)
                        r.step = [ex, &x, &y] { ex->step(x, y, frozen_step<optimizer_t>); };
                    else  // k_steps steps per call; its times are divided by k_steps below
                        r.step = [ex, &batches] { ex->consecutive_steps(batches); };
                    r.schedule = [ex]() -> const ps::schedule& { return ex->current_schedule(); };
                    r.spans = [ex] { return ex->spans(); };
                    runners.push_back(std::move(r));
                }
            for (auto& r : runners) r.step();  // warm-up
            // Each round runs every schedule's variants back to back (so they share the machine's momentary load;
            // the order within the triple rotates), schedules in a rotated order.
            const std::size_t schedules = runners.size() / 3;
            for (std::size_t round = 0; round < o.rounds; ++round)
                for (std::size_t i = 0; i < schedules; ++i)
                    for (std::size_t j = 0; j < 3; ++j) {
                        const std::size_t variant = (j + round) % 3;
                        auto& r = runners[3 * ((i + round) % schedules) + variant];
                        const auto t0 = std::chrono::steady_clock::now();
                        for (std::size_t k = 0; k < o.steps; ++k) r.step();
                        const double per_step = variant == 2 ? static_cast<double>(o.steps * k_steps)
                                                             : static_cast<double>(o.steps);
                        r.step_seconds.push_back(
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / per_step);
                        if (variant == 2) continue;  // its spans cover k steps: not one step's op costs
                        const auto sp = r.spans();
                        r.spans_seen.insert(r.spans_seen.end(), sp.begin(), sp.end());
                        r.latencies.push_back(ps::message_latency_from_spans(r.schedule(), sp));
                    }
            // Op costs as they were in the concurrent runs (stages busy at once, same machine load): medians over
            // all variants' spans of every round.
            std::vector<ps::op_span> all_spans;
            for (const auto& r : runners) all_spans.insert(all_spans.end(), r.spans_seen.begin(), r.spans_seen.end());
            const auto in_run = ps::costs_from_spans(all_spans, cut.size());
            std::vector<double> lat;
            for (const auto& r : runners) lat.insert(lat.end(), r.latencies.begin(), r.latencies.end());
            const ps::simulation_options in_run_model{.message_latency = median(lat)};
            std::printf("       costs inside the concurrent runs (ms), message latency %.1f us:",
                        in_run_model.message_latency * 1e6);
            print_costs("", in_run);
            const auto paired = [&](const runner& a, const runner& b2) {
                std::vector<double> v;
                for (std::size_t round = 0; round < o.rounds; ++round)
                    v.push_back(a.step_seconds[round] / b2.step_seconds[round]);
                return median(v);
            };
            for (std::size_t i = 0; i + 2 < runners.size(); i += 3) {
                const auto& off = runners[i];
                const auto& on = runners[i + 1];
                const auto& cons = runners[i + 2];
                row rw;
                rw.m = m;
                rw.kind = off.kind;
                rw.predicted_off = ps::simulate(off.schedule(), costs).makespan;
                rw.predicted_on = ps::simulate(on.schedule(), costs).makespan;
                rw.in_run_off = ps::simulate(off.schedule(), in_run, in_run_model).makespan;
                rw.in_run_on = ps::simulate(on.schedule(), in_run, in_run_model).makespan;
                rw.measured_off = median(off.step_seconds);
                rw.measured_on = median(on.step_seconds);
                rw.measured_ratio = paired(off, on);
                rows.push_back(rw);
                if (k_steps < 2) continue;
                ps::simulation_options barrier = in_run_model, steady = in_run_model;
                barrier.steps = steady.steps = k_steps;
                steady.barrier = false;
                consecutive_row cr;
                cr.m = m;
                cr.kind = on.kind;
                cr.measured_single = median(on.step_seconds);
                cr.measured_consecutive = median(cons.step_seconds);
                cr.measured_ratio = paired(on, cons);
                cr.predicted_single = ps::simulate(on.schedule(), in_run, barrier).makespan / double(k_steps);
                cr.predicted_consecutive = ps::simulate(on.schedule(), in_run, steady).makespan / double(k_steps);
                consecutive_rows.push_back(cr);
            }
            if (!o.trace_dir.empty())
                for (auto& r : runners) {
                    r.step();
                    const auto spans = r.spans();
                    ps::simulation_options so{};
                    if (r.label.ends_with(" consecutive")) {
                        so.steps = k_steps;
                        so.barrier = false;
                    }
                    const auto sim = ps::simulate(r.schedule(), costs, so);
                    std::string name = r.label;
                    std::replace(name.begin(), name.end(), ' ', '_');
                    const std::string base = o.trace_dir + "/" + name + "_m" + std::to_string(m);
                    ps::write_chrome_trace_file(
                        base + ".json", {{r.label + " measured", spans, 1}, {r.label + " predicted", sim.spans, 1}});
                    ps::write_svg_gantt_file(base + ".svg",
                                             {r.label + " predicted, m = " + std::to_string(m), sim.spans, 1});
                }
        }

    // 4. tables
    std::printf(
        "\nsamples/s: 2BP off / on; ratio = on / off throughput (= off / on step time). Predicted A: costs "
        "measured alone (single thread); predicted B: costs = median op durations inside the concurrent "
        "runs plus their median message latency.\n\n| m | schedule | measured samples/s | measured ratio | predicted A "
        "samples/s | predicted A ratio "
        "| predicted B samples/s | predicted B ratio | measured / predicted B |\n"
        "|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : rows) {
        const double pa = r.predicted_off / r.predicted_on, pb = r.in_run_off / r.in_run_on;
        const auto sps = [&](double t) { return static_cast<double>(B) / t; };
        const std::string name = std::string(ps::name(r.kind)) +
                                 (ps::has_virtual_stages(r.kind) ? " (" + std::to_string(2 * p) + " stages)" : "");
        std::printf("| %zu | %s | %.0f / %.0f | %.3f | %.0f / %.0f | %.3f | %.0f / %.0f | %.3f | %.3f |\n", r.m,
                    name.c_str(), sps(r.measured_off), sps(r.measured_on), r.measured_ratio,
                    sps(r.predicted_off), sps(r.predicted_on), pa, sps(r.in_run_off), sps(r.in_run_on), pb,
                    r.measured_ratio / pb);
    }
    if (!consecutive_rows.empty()) {
        std::printf(
            "\n%zu consecutive steps without a barrier (schedule_executor::consecutive_steps) against %zu step() calls, "
            "2BP on; ratio = consecutive / one-at-a-time throughput; predicted: the simulator with the in-run costs, "
            "%zu steps with the barrier off / on.\n\n"
            "| m | schedule | measured samples/s one at a time / consecutive | measured ratio | predicted ratio | "
            "measured / predicted |\n|---|---|---|---|---|---|\n",
            k_steps, k_steps, k_steps);
        for (const auto& r : consecutive_rows) {
            const double pr = r.predicted_single / r.predicted_consecutive;
            std::printf("| %zu | %s+2bp | %.0f / %.0f | %.3f | %.3f | %.3f |\n", r.m,
                        std::string(ps::name(r.kind)).c_str(), static_cast<double>(B) / r.measured_single,
                        static_cast<double>(B) / r.measured_consecutive, r.measured_ratio, pr, r.measured_ratio / pr);
        }
    }

    // The bar: 2BP faster than without for GPipe and 1F1B at m = 2 and 4; every measured ratio within 10% of
    // the prediction (B: the model fed with the op durations of the concurrent runs).
    bool faster = true, within = true, within_a = true;
    for (const auto& r : rows) {
        if ((r.kind == ps::schedule_kind::gpipe || r.kind == ps::schedule_kind::one_f_one_b) && (r.m == 2 || r.m == 4))
            faster = faster && r.measured_ratio > 1.0;
        within = within && std::abs(r.measured_ratio / (r.in_run_off / r.in_run_on) - 1.0) <= 0.10;
        within_a = within_a && std::abs(r.measured_ratio / (r.predicted_off / r.predicted_on) - 1.0) <= 0.10;
    }
    std::printf(
        "\n2BP faster than without for GPipe and 1F1B at m = 2 and 4 (where measured): %s\n"
        "every measured ratio within 10%% of predicted B: %s; of predicted A: %s\n",
        faster ? "yes" : "NO", within ? "yes" : "NO", within_a ? "yes" : "NO");

    std::printf(
        "\nPredictions for deeper pipelines (every stage costs the mean of the measured stages at that m):\n"
        "\n| p | m | schedule | bubble ratio 2BP off / on | peak in-flight off / on | predicted ratio |\n"
        "|---|---|---|---|---|---|\n");
    for (const std::size_t pp_ : {std::size_t(4), std::size_t(8)})
        for (const auto& [m, costs] : costs_per_m) {
            ps::stage_costs mean{0, 0, 0, 0, 0};
            for (const auto& c : costs) {
                mean.forward += c.forward / static_cast<double>(costs.size());
                mean.backward_input += c.backward_input / static_cast<double>(costs.size());
                mean.backward_weight += c.backward_weight / static_cast<double>(costs.size());
                mean.backward_fused += c.fused() / static_cast<double>(costs.size());
                mean.optimizer += c.optimizer / static_cast<double>(costs.size());
            }
            for (auto k : {ps::schedule_kind::gpipe, ps::schedule_kind::one_f_one_b, ps::schedule_kind::zb_h1,
                           ps::schedule_kind::zb_h2}) {
                const auto off = ps::simulate(ps::make_schedule(k, pp_, m, false), {mean});
                const auto on = ps::simulate(ps::make_schedule(k, pp_, m, true), {mean});
                std::printf("| %zu | %zu | %s | %.3f / %.3f | %zu / %zu | %.3f |\n", pp_, m,
                            std::string(ps::name(k)).c_str(), off.bubble_ratio, on.bubble_ratio,
                            *std::max_element(off.peak_in_flight.begin(), off.peak_in_flight.end()),
                            *std::max_element(on.peak_in_flight.begin(), on.peak_in_flight.end()),
                            off.makespan / on.makespan);
            }
        }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    bench_options o;
    CLI::App app{
        "two_stage_bp: samples/s of synchronous pipeline schedules with and without 2-stage "
        "backpropagation, measured side by side, next to the schedule simulator's prediction"};
    app.add_option("--network", o.network,
                   "mlp (4 x dense 1024, relu), cnn (the main program's small CNN) or llama-tiny (its 2-block "
                   "LLaMA-like byte-level decoder, L = 64: token cross-entropy, AdamW)")
        ->check(CLI::IsMember({"mlp", "cnn", "llama-tiny"}))
        ->capture_default_str();
    app.add_option("--batch", o.batch, "Optimizer batch B")->check(CLI::Range(1, 1 << 20))->capture_default_str();
    app.add_option("--micro-batches", o.micro_batches, "Micro-batch counts m")->delimiter(',')->capture_default_str();
    app.add_option("--stages", o.stages, "Pipeline stages p (measured)")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    app.add_option("--rounds", o.rounds, "Interleaved rounds (medians over them)")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    app.add_option("--steps", o.steps, "Steps per variant per round")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    app.add_option("--consecutive", o.consecutive,
                   "Steps run back to back without a barrier (consecutive_steps) against as many step() calls; 1: off")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    app.add_option("--trace-dir", o.trace_dir, "Write Chrome traces and SVG charts of every variant here");
    CLI11_PARSE(app, argc, argv);
    for (const std::size_t m : o.micro_batches)
        if (m == 0 || m > o.batch) {
            std::fprintf(stderr, "two_stage_bp: --micro-batches %zu must be in [1, --batch]\n", m);
            return 2;
        }
    if (o.micro_batches.empty()) {
        std::fprintf(stderr, "two_stage_bp: --micro-batches needs at least one value\n");
        return 2;
    }
    openblas_set_num_threads(1);
    try {
        if (o.network == "llama-tiny") return run<train::llama_tiny>(o);
        return o.network == "mlp" ? run<wide_mlp>(o) : run<train::small_cnn>(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "two_stage_bp: error: %s\n", e.what());
        return 1;
    }
}
