// examples/train/mode_sync.hpp: --mode sync, synchronous pipeline-parallel training (GPipe, 1F1B, ZB-H1, ZB-H2;
// 2-stage backpropagation on or off) on pipeprop::sync::pipeline_executor. --batch is the optimizer batch B; each
// step splits it into --micro-batches m micro-batches (sizes differ by at most one; a last batch of an epoch with
// fewer than m samples runs with one micro-batch per sample) and gives the update of the mean loss over B, the same
// as --mode sgd up to float summation order.
//
// Options of the mode:
//   --schedule gpipe|1f1b|zb_h1|zb_h2|interleaved_1f1b|zb_v (default 1f1b; the last two with 2 stages per device:
//            the stage count must be even, and for interleaved_1f1b m a multiple of the S / 2 devices or below it)
//   --two-stage-bp on|off (default on)
//   --micro-batches m                   (default 4)          --executor concurrent|sequential (default concurrent)
//   --stages balanced | balanced:P | comma-separated split points, e.g. 4,9   (default balanced = balanced:2;
//            balanced cuts by per-layer costs measured at the micro-batch size, at most cost_probe_batch samples)
//   --trace PATH   Chrome trace-event JSON of the last full step (measured) and of the simulator's prediction from
//                  that step's own op durations, and an SVG Gantt chart of the prediction (trace_paths: PATH's
//                  extension names the file it is; the other one is PATH with extension .json or .svg).
// Networks: the image networks (softmax cross-entropy, momentum SGD) and the text network llama-tiny (next-token
// sequences, token cross-entropy, AdamW by default or --optimizer sgd; --optimizer, --beta1, --beta2, --eps and
// their defaults are --mode sgd's). A batch is B sequences; its loss is the mean over its B x L tokens.
#pragma once

#include <pipeprop/checkpoint.hpp>
#include <pipeprop/layer_stack.hpp>
#include <pipeprop/loss/token_cross_entropy.hpp>
#include <pipeprop/optim/adamw.hpp>
#include <pipeprop/optim/hyperparameters.hpp>
#include <pipeprop/optim/lr_schedule.hpp>
#include <pipeprop/pipeline_layout.hpp>
#include <pipeprop/sequential_trainer.hpp>
#include <pipeprop/sync/any_executor.hpp>
#include <pipeprop/sync/trainer.hpp>
#include <pipeprop/balanced_partition.hpp>
#include <pipeprop/sync/cost_measurement.hpp>
#include <pipeprop/sync/checkpoint.hpp>
#include <pipeprop/sync/executor.hpp>
#include <pipeprop/sync/memory_estimate.hpp>
#include <pipeprop/sync/schedule.hpp>
#include <pipeprop/sync/simulator.hpp>
#include <pipeprop/sync/trace.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "train/cluster.hpp"
#include "train/memory_check.hpp"
#include "train/mode.hpp"
#include "train/mode_sgd.hpp"
#include "train/networks.hpp"
#include "train/output_paths.hpp"
#include "train/rank_evaluation.hpp"
#include "train/sync_engine.hpp"
#include "train/sync_options.hpp"
#include "train/training_loop.hpp"

namespace train {

namespace ps = pipeprop::sync;

/// --mode sync (see the file comment).
class mode_sync final : public mode {
public:
    ~mode_sync() override;  // pipeprop_train.cpp (the key function: see mode::~mode)
    static constexpr const char* mode_name = "sync";

    [[nodiscard]] std::string name() const override { return mode_name; }
    [[nodiscard]] std::string description() const override {
        return "synchronous pipeline (GPipe / 1F1B / ZB-H1 / ZB-H2, 2-stage backpropagation on or off), one update "
               "per batch --batch of --micro-batches micro-batches";
    }

    void add_options(CLI::Option_group& g) override {
        g.add_option("--schedule", schedule_,
                     "Pipeline schedule: gpipe, 1f1b, zb_h1, zb_h2, interleaved_1f1b (2 stages per device) or zb_v "
                     "(2 stages per device, V placement)")
            ->check(CLI::IsMember({"gpipe", "1f1b", "zb_h1", "zb_h2", "interleaved_1f1b", "zb_v"}))
            ->capture_default_str();
        g.add_option("--two-stage-bp", two_stage_bp_,
                     "2-stage backpropagation: on (backward-p2 deferred as the schedule says) or off (fused)")
            ->check(CLI::IsMember({"on", "off"}))
            ->capture_default_str();
        g.add_option("--micro-batches", micro_batches_, "Micro-batches m per optimizer step (batch --batch)")
            ->check(CLI::Range(std::size_t(1), std::size_t(1) << 16))
            ->capture_default_str();
        // --stages and --executor are shared with other pipelined modes: registered here unless another mode's
        // group already did (then that option is read: see shared_option in mode.hpp).
        stages_opt_ = shared_option(g, "--stages", stages_,
                                    "Stage cut: balanced, balanced:P (P stages of equal measured cost) or "
                                    "comma-separated split points (layer positions)");
        executor_opt_ = shared_option(g, "--executor", executor_, "Executor: concurrent (TBB flow graph, one node "
                                                                  "per stage) or sequential (one thread)");
        // The optimizer options of --mode sgd (text networks: AdamW by default), read here too.
        optimizer_opt_ = shared_option(g, "--optimizer", optimizer_, "Optimizer: sgd, adamw or auto");
        beta1_opt_ = shared_option(g, "--beta1", beta1_, "AdamW: decay of the first moment");
        beta2_opt_ = shared_option(g, "--beta2", beta2_, "AdamW: decay of the second moment");
        eps_opt_ = shared_option(g, "--eps", eps_, "AdamW: added to sqrt(v_hat)");
        g.add_option("--trace", trace_,
                     "Write a Chrome trace (Perfetto) of the last full step and of its simulated prediction, and an "
                     "SVG Gantt chart of the prediction: PATH is the JSON and PATH with extension .svg the chart; a "
                     "PATH ending in .svg is the chart and PATH with extension .json the JSON")
            ->check(not_empty("a file path"));
    }

    [[nodiscard]] bool shares_option(const std::string& option_name) const override {
        for (const char* n : {"--stages", "--executor", "--optimizer", "--beta1", "--beta2", "--eps"})
            if (option_name == n) return true;
        return false;
    }
    [[nodiscard]] bool supports_text_networks() const override { return true; }

    void validate(const common_options& o) const override {
        const std::string ex = value_of(executor_opt_, executor_);
        if (ex != "concurrent" && ex != "sequential")
            throw CLI::ValidationError("--executor", "must be concurrent or sequential, got " + ex);
        if (!sync_mode_trains(o.network_type))
            throw CLI::ValidationError("--network", o.network + (o.norm == "on" ? " with --norm on" : "") +
                                                        (holds_cifar10(o.data) ? " on CIFAR-10" : "") +
                                                        " trains in --mode sgd and --mode pb (--mode sync: resnet20 "
                                                        "with group norm on 1x28x28 images)");
        const auto count = []<class Net>() { return Net::layer_count; };
        const std::size_t layers =
            is_text_network(o.network) ? with_text_network(o.network, count) : with_network(o.network_type, count);
        if (value_of(optimizer_opt_, optimizer_) == "adamw" && !is_text_network(o.network))
            throw CLI::ValidationError("--optimizer", "adamw is not available for the image networks yet (only for "
                                                      "the text networks); use --optimizer sgd");
        if (is_text_network(o.network) && value_of(optimizer_opt_, optimizer_) != "sgd")
            reject_sgd_options_with_adamw(o);
        const stage_spec spec = parse_stages(value_of(stages_opt_, stages_), layers);
        const std::size_t stages = spec.balanced_stages > 0 ? spec.balanced_stages : spec.split_points.size() + 1;
        const auto kind = ps::parse_schedule_kind(schedule_);
        if (ps::has_virtual_stages(kind) && stages % 2 != 0)
            throw CLI::ValidationError("--stages", schedule_ + " puts 2 stages on each device: it needs an even " +
                                                       "number of stages, got " + std::to_string(stages));
        if (kind == ps::schedule_kind::interleaved_1f1b && micro_batches_ > stages / 2 &&
            micro_batches_ % (stages / 2) != 0)
            throw CLI::ValidationError("--micro-batches", "interleaved_1f1b on " + std::to_string(stages / 2) +
                                                              " devices needs m a multiple of " +
                                                              std::to_string(stages / 2) + " (or below it), got " +
                                                              std::to_string(micro_batches_));
        if (o.transport == "mpi" && ex != "concurrent")
            throw CLI::ValidationError("--executor", "sequential runs every stage in this process; --transport mpi "
                                                     "needs the concurrent executor");
        if (o.transport == "mpi" && !trace_.empty())
            throw CLI::ValidationError("--trace", "is not available with --transport mpi (each rank times only its "
                                                  "own stages)");
        if (o.batch > 0 && micro_batches_ > o.batch)
            throw CLI::ValidationError("--micro-batches", std::to_string(micro_batches_) +
                                                              " micro-batches cannot split a batch of " +
                                                              std::to_string(o.batch) + " samples (need m <= B)");
    }

    void check_outputs(const common_options& o) const override {
        (void)o;
        if (trace_.empty()) return;
        const trace_files files = trace_paths(trace_);
        check_writable_file("--trace", files.json);
        check_writable_file("--trace", files.svg);
    }

    json_line run(const common_options& o) override;  // in pipeprop_train.cpp (per-network code: see there)

    /// Training on network Net (instantiated per network in its own unit: run_on_network). Image networks: softmax
    /// cross-entropy, momentum SGD. Text networks: next-token sequences of the text corpus, token cross-entropy,
    /// AdamW (default; --optimizer sgd for momentum SGD), the options and defaults of --mode sgd.
    template <class Net>
    json_line run_network(const common_options& o) {
        const pipeprop::optim::sgd_config sgd{.nesterov = o.nesterov};
        if constexpr (is_sequence_model<Net>) {
            using out = typename pipeprop::layer_stack<Net, float>::output_shape;
            constexpr std::size_t length = out::dims[0], vocabulary = out::dims[1];
            using loss = pipeprop::token_cross_entropy<float, length, vocabulary>;
            const pipeprop::data::text_dataset data = load_text_data(o, length, vocabulary);
            if (value_of(optimizer_opt_, optimizer_) == "sgd") {
                json_line j = run_with<Net, loss, pipeprop::optim::sgd<float>>(o, data, sgd, o.momentum);
                return j.add("optimizer", "sgd");
            }
            common_options oa = o;  // AdamW's own learning-rate default, as in --mode sgd
            if (!o.lr_given) oa.lr = mode_sgd::default_adamw_lr;
            oa.momentum = 0.0;  // AdamW's momentum is beta1 (the result line reports what ran)
            const double b1 = number_of(beta1_opt_, beta1_), b2 = number_of(beta2_opt_, beta2_),
                         eps = number_of(eps_opt_, eps_);
            note(o, fmt::format("optimizer: AdamW, lr {:g}, betas ({:g}, {:g}), eps {:g}, decoupled weight decay {:g}",
                                oa.lr, b1, b2, eps, o.weight_decay));
            json_line j = run_with<Net, loss, pipeprop::optim::adamw<float>>(
                oa, data, {.beta1 = b1, .beta2 = b2, .eps = eps}, 0.0);
            return j.add("optimizer", "adamw").add("beta1", b1).add("beta2", b2).add("eps", eps);
        } else if (o.ranks == nullptr) {
            const pipeprop::data::dataset_pair data = load_data<Net>(o);
            return run_with<Net, pipeprop::detail::default_loss_t<Net, float>, pipeprop::optim::sgd<float>>(
                o, data, sgd, o.momentum);
        } else {  // --transport mpi: the data on the ranks of stage 0 (inputs, targets) and of the last stage (N)
            using loss = pipeprop::detail::default_loss_t<Net, float>;
            std::optional<pipeprop::data::dataset_pair> data;
            std::uint64_t count = 0;
            if (o.ranks->rank() == 0) {  // first rank 0 (a bad --data is then said once), then the last stage's
                data.emplace(load_data<Net>(o));
                count = data->train.count;
            }
            o.ranks->broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&count, 1)));
            (void)epoch_samples(o, static_cast<std::size_t>(count));  // --batch within the epoch, before the cut
            const auto ranges = stage_ranges<Net>(o);
            const std::vector<int> rank_of = ranks_of_stages(o, ranges.size());
            const bool needs_data = o.ranks->rank() == 0 || o.ranks->rank() == rank_of.back();
            if (needs_data && !data) data.emplace(load_data<Net>(o));
            if (needs_data)
                return run_with<Net, loss, pipeprop::optim::sgd<float>>(o, *data, sgd, o.momentum, &ranges, &rank_of);
            return run_with<Net, loss, pipeprop::optim::sgd<float>>(
                o, placeholder_data{static_cast<std::size_t>(count), Net::input_shape::size}, sgd, o.momentum, &ranges,
                &rank_of);
        }
    }

public:
    /// The most samples per micro-batch the balanced cut measures its layer costs at: a layer's cost grows about
    /// linearly with the micro-batch, so a few samples rank the layers as the full micro-batch would, and the probe
    /// holds a few micro-batches' buffers at most (at the full micro-batch of a huge --batch it allocated gigabytes
    /// before the memory estimate could refuse the run).
    static constexpr std::size_t cost_probe_batch = 8;

private:
    /// The stage cut of --stages: split points, or a balanced cut by per-layer costs measured at the micro-batch
    /// size, at most cost_probe_batch samples (with --transport mpi measured on rank 0 and sent to the others: every
    /// rank needs the same cut).
    template <class Net>
    std::vector<pipeprop::layer_range> stage_ranges(const common_options& o) const {
        const std::size_t m = micro_batches_, b = std::min((o.batch + m - 1) / m, cost_probe_batch);
        const stage_spec spec = parse_stages(value_of(stages_opt_, stages_), Net::layer_count);
        std::vector<std::size_t> points = spec.split_points;
        if (spec.balanced_stages > 0) {
            if (o.ranks == nullptr || o.ranks->rank() == 0) {
                std::vector<double> cost;
                for (const auto& c : ps::measure_layer_costs<Net>(b, 5, o.seed)) cost.push_back(c.total());
                using stack_t = pipeprop::layer_stack<Net, float>;
                points = pipeprop::balanced_partition(cost, spec.balanced_stages, stack_t::cut_allowed_before);
            }
            if (o.ranks != nullptr) {
                std::vector<std::uint64_t> sent(spec.balanced_stages - 1);
                std::copy(points.begin(), points.end(), sent.begin());
                o.ranks->broadcast(std::as_writable_bytes(std::span<std::uint64_t>(sent)));
                points.assign(sent.begin(), sent.end());
            }
        }
        return pipeprop::partition_at(Net::layer_count, points);
    }

    /// --transport mpi: the rank of every stage: the schedule's devices in contiguous groups, one per rank (a
    /// device's stages on one rank). Throws CLI::ValidationError when there are more ranks than devices.
    [[nodiscard]] std::vector<int> ranks_of_stages(const common_options& o, std::size_t stages) const {
        const ps::schedule sc = ps::make_schedule(ps::parse_schedule_kind(schedule_), stages, micro_batches_,
                                                  two_stage_bp_ == "on");
        std::vector<int> of_device;
        try {
            of_device = pipeprop::contiguous_ranks(sc.devices(), static_cast<std::size_t>(o.ranks->size()));
        } catch (const std::invalid_argument&) {
            throw CLI::ValidationError("--transport", fmt::format("mpi: {} ranks for the {} devices of the schedule "
                                                                  "({} stages); every rank needs a device (mpirun -np "
                                                                  "P with P <= {}, or more stages: --stages "
                                                                  "balanced:N or split points)",
                                                                  o.ranks->size(), sc.devices(), stages,
                                                                  sc.devices()));
        }
        std::vector<int> rank_of(stages);
        for (std::size_t s = 0; s < stages; ++s) rank_of[s] = of_device[sc.device_of_stage(s)];
        return rank_of;
    }

    /// The executor's memory estimate (pipeprop/sync/memory_estimate.hpp) against the memory left
    /// (train/memory_check.hpp), with the options that lower it in this mode: a smaller batch (the micro-batches and
    /// the evaluation buffers, which hold --batch samples); unless the schedule is GPipe (m slots per stage: m b = B
    /// samples whatever m and S), more micro-batches and fewer stages; GPipe: 1F1B (at most S - s slots on stage s).
    template <class Executor>
    void check_sync_memory(const common_options& o, ps::schedule_kind kind, bool two_stage_bp,
                           const std::vector<pipeprop::layer_range>& ranges,
                           const typename Executor::options_type& eo) const {
        const pipeprop::memory_estimate e = ps::estimate_memory<Executor>(kind, two_stage_bp, ranges, eo);
        std::vector<std::string> remedies;
        if (o.batch > 1) remedies.push_back(fmt::format("a smaller --batch ({} now)", o.batch));
        if (kind == ps::schedule_kind::gpipe && eo.micro_batches > 1)
            remedies.push_back("--schedule 1f1b (at most S - s micro-batches in flight on stage s, not m)");
        if (kind != ps::schedule_kind::gpipe && eo.micro_batches < o.batch)
            remedies.push_back(fmt::format("more --micro-batches (smaller ones; {} now)", eo.micro_batches));
        if (kind != ps::schedule_kind::gpipe && ranges.size() > 1)
            remedies.push_back(fmt::format("fewer stages (--stages, {} now)", ranges.size()));
        check_memory(o, "--mode sync engine", e, remedies);
    }

    /// momentum: of every step (--momentum for momentum SGD, 0 for AdamW); the weight decay is --weight-decay.
    /// given_ranges, rank_of: --transport mpi (the cut and the ranks of the stages, the same on every rank).
    template <class Net, class Loss, class Optimizer, class Data>
    json_line run_with(const common_options& o, const Data& data, const typename Optimizer::config_type& config,
                       double momentum, const std::vector<pipeprop::layer_range>* given_ranges = nullptr,
                       const std::vector<int>* rank_of = nullptr) {
        const ps::schedule_kind kind = ps::parse_schedule_kind(schedule_);
        const bool two = two_stage_bp_ == "on";
        const std::size_t m = micro_batches_;
        const std::size_t b = (o.batch + m - 1) / m;
        // the cheap checks first: --batch within the epoch (CLI::ValidationError, exit 2), then the cut (a balanced
        // one measures its costs at cost_probe_batch samples at most) and the memory estimate of its engine
        const std::size_t epoch_size = epoch_samples(o, data);
        const auto ranges = given_ranges != nullptr ? *given_ranges : stage_ranges<Net>(o);
        std::unique_ptr<pipeprop::remote_transport> transport;  // outlives the engine
        if (rank_of != nullptr) transport = o.ranks->make_transport(*rank_of);
        typename sync_engine<Net, Loss, Optimizer>::executor_type::options_type eo;
        eo.micro_batches = m;
        eo.max_batch = o.batch;
        eo.optimizer = config;
        eo.seed = o.seed;
        eo.executor = ps::parse_executor_kind(value_of(executor_opt_, executor_));
        eo.remote = transport.get();
        if (o.ranks == nullptr)  // --transport mpi: every rank holds only its stages' buffers; not checked
            check_sync_memory<typename sync_engine<Net, Loss, Optimizer>::executor_type>(o, kind, two, ranges, eo);
        set_activity(fmt::format("building the --mode sync engine ({} stages, batch {} in {} micro-batches)",
                                 ranges.size(), o.batch, m));
        sync_engine<Net, Loss, Optimizer> engine(kind, two, ranges, eo, make_schedule(o, epoch_size),
                                                 momentum, o.weight_decay, !trace_.empty(), o.ranks,
                                                 rank_of != nullptr ? *rank_of : std::vector<int>{});

        auto& ex = engine.executor();
        std::string cut, slots, caps;
        for (std::size_t s = 0; s < ranges.size(); ++s) {
            cut += (s ? " " : "") + std::string("[") + std::to_string(ranges[s].begin) + "," +
                   std::to_string(ranges[s].end) + ")";
            slots += (s ? "," : "") + std::to_string(ex.activation_slots()[s]);
        }
        for (std::size_t s = 0; s < ex.channel_sizes().size(); ++s)
            caps += (s ? "," : "") + std::to_string(ex.channel_sizes()[s].forward) + "/" +
                    std::to_string(ex.channel_sizes()[s].backward);
        const std::string label = ex.current_schedule().label();
        note(o, "sync: schedule " + label + ", " + std::to_string(ranges.size()) + " stages " + cut + ", m = " +
                    std::to_string(m) + " micro-batches of <= " + std::to_string(b) + " samples, executor " +
                    std::string(ps::name(eo.executor)) + "; activation slots per stage " + slots +
                    " (peak micro-batches in flight), channel capacities fwd/bwd " + (caps.empty() ? "-" : caps));

        const run_summary r =
            reporting_failures(transport.get(), [&] { return run_training<Net>(engine, o, data, mode_name); });
        json_line j = r.to_json();
        j.add("schedule", label)
            .add("two_stage_bp", two)
            .add("micro_batches", m)
            .add("stages", ranges.size())
            .add("stage_cut", cut)
            .add("activation_slots", slots)
            .add("executor", ps::name(eo.executor));
        if (rank_of != nullptr) {
            std::string text;
            for (std::size_t s = 0; s < rank_of->size(); ++s) text += fmt::format("{}{}", s ? "," : "", (*rank_of)[s]);
            j.add("transport", "mpi").add("ranks", text);
        }

        if (!trace_.empty()) {
            const auto& spans = engine.last_full_spans();
            if (spans.empty()) {
                note(o, "sync: no full step ran; no trace written");
            } else {
                const auto costs = ps::costs_from_spans(spans, ranges.size());
                const auto sim = ps::simulate(ex.current_schedule(), costs);
                double measured = 0;
                for (const auto& sp : spans) measured = std::max(measured, sp.end);
                const trace_files files = trace_paths(trace_);
                j.add("step_seconds_measured", measured).add("step_seconds_simulated", sim.makespan);
                try {
                    ps::write_chrome_trace_file(files.json,
                                                {{label + " measured (last full step)", spans, 1},
                                                 {label + " simulated from the same op durations", sim.spans, 1}});
                    ps::write_svg_gantt_file(files.svg, {label + " simulated step (times in s)", sim.spans, 1}, "s");
                } catch (const std::exception& e) {  // training is done: the result line is still printed (exit 1)
                    j.add("trace_error", e.what());
                    throw output_failed_after_training(std::string("--trace: ") + e.what(), j);
                }
                note(o, fmt::format("sync: trace {} and {} written; last full step {:.3f} ms measured, {:.3f} ms "
                                    "simulated",
                                    files.json, files.svg, measured * 1e3, sim.makespan * 1e3));
            }
        }
        return j;
    }

    std::string schedule_ = "1f1b";
    std::string two_stage_bp_ = "on";
    std::size_t micro_batches_ = 4;
    std::string stages_ = "balanced";
    std::string executor_ = "concurrent";
    std::string trace_;
    std::string optimizer_ = "auto";
    double beta1_ = mode_sgd::default_beta1, beta2_ = mode_sgd::default_beta2, eps_ = mode_sgd::default_eps;
    CLI::Option* stages_opt_ = nullptr;
    CLI::Option* executor_opt_ = nullptr;
    CLI::Option *optimizer_opt_ = nullptr, *beta1_opt_ = nullptr, *beta2_opt_ = nullptr, *eps_opt_ = nullptr;
};

}  // namespace train
