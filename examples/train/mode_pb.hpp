// examples/train/mode_pb.hpp: --mode pb, Pipelined Backpropagation (PB-paper: Kosson et al., arXiv 2003.11666;
// docs/pb-semantics.md) on pipeprop::pb::pipeline with a runtime partition.
//
//   pipeprop_train --mode pb --stages fine --mitigation sc_lwp --reference-batch 32 --lr 0.05 --momentum 0.9
//
// In this mode --batch is the micro-batch size b (default 1: "training without batches"); every micro-batch is one
// weight update at every stage. --reference-batch B names the batch size the given --lr / --momentum were tuned
// for: they are scaled to b by the rules of docs/pb-semantics.md §4 (pipeprop::optim::scale_hyperparameters), and the
// scaled values are printed and used (the learning-rate schedule, in samples, is applied to the scaled rate).
// Options: --mitigation none|sc|lwp|lwp_wd|sc_lwp|stash|pipemare|lwp_opt|nesterov|2bw,
// --stages layer|fine|fine-own|<split points>,
// --executor concurrent|sequential, --push-buffer K (concurrent: micro-batches buffered per graph run), --lanes L
// (concurrent: serial nodes the stages are grouped into; 0 = one per core), --load-probe-period N (concurrent with
// several lanes: every N graph runs one run goes the other way, lanes or inline on one thread, and the faster is
// kept: pb/load_adaptation.hpp; 0 = always the lanes; every switch is logged), --lane-rebalance-period N (the lanes
// cut anew from the stages' busy time every N measured runs on the lanes: pb/lane_rebalance.hpp; 0 = never),
// --pipemare-warmup (epochs), --pipemare-decay, --2bw-accumulation (micro-batches per update, >= D_0; 0: D_0).
// Networks: the image networks (softmax cross-entropy, heavy-ball momentum SGD) and the text network llama-tiny
// (next-token sequences of the text corpus, one sequence per sample, token cross-entropy), where --optimizer auto
// means AdamW (pb/optimizer.hpp: with AdamW only --mitigation none, stash, pipemare, lwp_opt, nesterov and 2bw are
// defined (docs/pb-semantics.md §3, "Which optimizer each policy admits"), and none is
// then the default; --lr defaults to 3e-3 as in --mode sgd; --reference-batch is not offered: the scaling rules are
// momentum SGD's) and --optimizer sgd momentum SGD with every mitigation. --optimizer, --beta1, --beta2 and --eps
// are --mode sgd's options, read here too.
// Printed: per-stage layers, D_s, stash bytes and weight bytes at the start; samples/s and per-stage busy time and
// utilization at the end. The JSON result gains mitigation, executor, reference_batch, stages, delays,
// utilization (arrays as comma-separated strings: the result object is flat), pb_samples_per_second, inline_runs
// and load_switches (the load adaptation's runs inline and switches; with it, one line per switch in the log).
#pragma once

#include <fmt/ranges.h>  // fmt::format, fmt::join

#include <algorithm>
#include <cmath>
#include <pipeprop/optim/scaling_rules.hpp>
#include <pipeprop/pb/checkpoint.hpp>
#include <pipeprop/pb/memory_estimate.hpp>
#include <pipeprop/pb/pipeline.hpp>
#include <pipeprop/pb/trainer.hpp>

#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "train/cluster.hpp"
#include "train/memory_check.hpp"
#include "train/rank_evaluation.hpp"
#include "train/mode.hpp"
#include "train/mode_sgd.hpp"
#include "train/networks.hpp"
#include "train/pb_engine.hpp"
#include "train/pb_executors.hpp"
#include "train/training_loop.hpp"

namespace train {

/// --mode pb.
class mode_pb final : public mode {
public:
    ~mode_pb() override;  // pipeprop_train.cpp (the key function: see mode::~mode)
    static constexpr const char* mode_name = "pb";

    [[nodiscard]] std::string name() const override { return mode_name; }
    [[nodiscard]] std::string description() const override {
        return "Pipelined Backpropagation: every micro-batch of --batch b samples (default 1) updates every stage";
    }

    void add_options(CLI::Option_group& g) override {
        mitigation_opt_ = g.add_option("--mitigation", mitigation_,
                                       "PB mitigation: none, sc (spike compensation), lwp (linear weight "
                                       "prediction, velocity form), lwp_wd (its weight-difference form), sc_lwp, "
                                       "stash (weight stashing), pipemare, lwp_opt (optimizer-aware LWP: the "
                                       "optimizer's own step, AdamW's too), nesterov (Nesterov momentum or NAdamW "
                                       "with weight stashing), 2bw (PipeDream-2BW: one update per --2bw-accumulation "
                                       "micro-batches, computed on the previous weights) (default: sc_lwp with "
                                       "momentum SGD, none with AdamW)")
                              ->check(CLI::IsMember({"none", "sc", "lwp", "lwp_wd", "sc_lwp", "stash", "pipemare",
                                                     "lwp_opt", "nesterov", "2bw"}))
                              ->capture_default_str();
        g.add_option("--stages", stages_,
                     "Stages: layer (one per weight layer: a conv or dense layer with its normalization and "
                     "activation, the PB paper's fine-grained ResNets), fine (one per parametric layer, normalization "
                     "layers included), fine-own (one per layer) or comma-separated split points, e.g. 2,5,8")
            ->check(not_empty("layer, fine, fine-own or split points"))
            ->capture_default_str();
        g.add_option("--executor", executor_, "PB executor: concurrent (TBB flow graph) or sequential (reference)")
            ->check(CLI::IsMember({"concurrent", "sequential"}))
            ->capture_default_str();
        g.add_option("--reference-batch", reference_batch_,
                     "Batch size B that --lr and --momentum were tuned for; they are scaled to the micro-batch size "
                     "(0: use them as given)")
            ->check(CLI::Range(std::size_t(0), std::size_t(1) << 20))
            ->capture_default_str();
        g.add_option("--push-buffer", push_buffer_, "Concurrent executor: micro-batches buffered per graph run")
            ->check(CLI::Range(std::size_t(1), std::size_t(1) << 16))
            ->capture_default_str();
        g.add_option("--lanes", lanes_,
                     "Concurrent executor: serial flow-graph nodes the stages are grouped into (consecutive stages, "
                     "balanced by measured cost); 0 = one per core, at most one per stage")
            ->check(CLI::Range(std::size_t{0}, std::size_t{4096}))
            ->capture_default_str();
        g.add_option("--load-probe-period", load_probe_period_,
                     "Concurrent executor with several lanes: every N graph runs, one run goes the other way (lanes "
                     "or inline on the calling thread) and the faster is kept, so that a competing process on a core "
                     "does not make the pipeline slower than one thread; 0 = always the lanes")
            ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20))
            ->capture_default_str();
        g.add_option("--lane-rebalance-period", lane_rebalance_period_,
                     "Concurrent executor with several lanes: every N graph runs on the lanes, cut the lanes anew over "
                     "their stages' busy time when two such looks agree on a 3% gain; 0 = keep the first cut")
            ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20))->capture_default_str();
        g.add_flag("--log-stage-norms", log_stage_norms_,
                   "With --metrics and --log-every: the interval lines also hold stage_weight_norm and "
                   "stage_velocity_norm, the L2 norms of every stage's weights and velocity (null once not finite; "
                   "not with --transport mpi)");
        g.add_flag("--flush-subnormals", flush_subnormals_,
                   "Run the stages' work with subnormal numbers flushed to zero (x86 FTZ + DAZ; pb::options::"
                   "flush_subnormals): much faster when momentum near 1 decays velocities into the subnormal range");
        g.add_option("--pipemare-warmup", pipemare_warmup_epochs_,
                     "PipeMare: per-stage learning-rate warm-up length in epochs")
            ->check(finite_number())
            ->check(CLI::Range(0.0, 1e6))
            ->capture_default_str();
        g.add_option("--pipemare-decay", pipemare_decay_, "PipeMare: decay of the EMA of weight steps, in [0, 1)")
            ->check(finite_number())
            ->check(CLI::Range(0.0, 0.999999))
            ->capture_default_str();
        g.add_option("--2bw-accumulation", two_bw_accumulation_,
                     "PipeDream-2BW: micro-batches per update, at least the first stage's delay D_0 (0: D_0)")
            ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20))
            ->capture_default_str();
        // --mode sgd's optimizer options (text networks: AdamW by default), read here too.
        optimizer_opt_ = shared_option(g, "--optimizer", optimizer_, "Optimizer: sgd, adamw or auto");
        beta1_opt_ = shared_option(g, "--beta1", beta1_, "AdamW: decay of the first moment");
        beta2_opt_ = shared_option(g, "--beta2", beta2_, "AdamW: decay of the second moment");
        eps_opt_ = shared_option(g, "--eps", eps_, "AdamW: added to sqrt(v_hat)");
        if (CLI::App* parent = g.get_parent(); parent != nullptr)
            batch_option_ = parent->get_option_no_throw("--batch");
    }

    [[nodiscard]] bool shares_option(const std::string& option_name) const override {
        for (const char* n : {"--optimizer", "--beta1", "--beta2", "--eps"})
            if (option_name == n) return true;
        return false;
    }
    [[nodiscard]] bool supports_text_networks() const override { return true; }

    void validate(const common_options& o) const override;  // in pipeprop_train.cpp (per-network code: see there)

    json_line run(const common_options& given) override;  // in pipeprop_train.cpp (per-network code: see there)

    /// Training on network Net with the --mitigation policy, o already scaled (instantiated per network in its
    /// own unit: run_on_network). Image networks: softmax cross-entropy, momentum SGD. Text networks: next-token
    /// sequences, token cross-entropy, AdamW (--optimizer auto or adamw) or momentum SGD.
    template <class Net>
    json_line run_network(const common_options& o) {
        if constexpr (is_sequence_model<Net>) {
            return uses_adamw(o) ? run_text<Net, pipeprop::optim::adamw<float>>(o)
                                 : run_text<Net, pipeprop::optim::sgd<float>>(o);
        } else if (o.ranks == nullptr || o.ranks->rank() == 0) {
            // --transport mpi: rank 0 (stage 0 and the evaluation) reads the data and tells the others its size
            const pipeprop::data::dataset_pair data = load_data<Net>(o);
            if (o.ranks != nullptr) {
                std::uint64_t count = data.train.count;
                o.ranks->broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&count, 1)));
            }
            return run_policy<Net, pb_loss_t<Net>>(o, mitigation(o), data);
        } else {
            std::uint64_t count = 0;
            o.ranks->broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&count, 1)));
            const placeholder_data data{static_cast<std::size_t>(count), Net::input_shape::size};
            return run_policy<Net, pb_loss_t<Net>>(o, mitigation(o), data);
        }
    }

    /// A text network Net (next-token sequences, token cross-entropy) with Optimizer: momentum SGD and every
    /// mitigation, or AdamW with none, stash, pipemare, lwp_opt, nesterov or 2bw.
    template <class Net, class Optimizer>
    json_line run_text(const common_options& o);

private:
    /// True when the run uses AdamW: --optimizer adamw, or auto on a text network.
    [[nodiscard]] bool uses_adamw(const common_options& o) const {
        const std::string optimizer = value_of(optimizer_opt_, optimizer_);
        return optimizer == "adamw" || (optimizer == "auto" && is_text_network(o.network));
    }
    /// --mitigation, or its default: sc_lwp with momentum SGD, none with AdamW.
    [[nodiscard]] std::string mitigation(const common_options& o) const {
        if (mitigation_opt_ != nullptr && mitigation_opt_->count() == 0 && uses_adamw(o)) return "none";
        return mitigation_;
    }

    /// Momentum SGD with mitigation m.
    template <class Net, class Loss, class Data>
    json_line run_policy(const common_options& o, const std::string& m, const Data& data) {
        namespace pol = pb_policies;  // the engines whose executors train/pb_executors.hpp declares
        const pipeprop::optim::adamw_config unused{};
        if (m == "none") return run_with<Net, pol::none, Loss, pol::sgd>(o, data, unused);
        if (m == "sc") return run_with<Net, pol::sc, Loss, pol::sgd>(o, data, unused);
        if (m == "lwp") return run_with<Net, pol::lwp, Loss, pol::sgd>(o, data, unused);
        if (m == "lwp_wd") return run_with<Net, pol::lwp_wd, Loss, pol::sgd>(o, data, unused);
        if (m == "sc_lwp") return run_with<Net, pol::sc_lwp, Loss, pol::sgd>(o, data, unused);
        if (m == "stash") return run_with<Net, pol::stash, Loss, pol::sgd>(o, data, unused);
        if (m == "lwp_opt") return run_with<Net, pol::lwp_opt, Loss, pol::sgd>(o, data, unused);
        if (m == "nesterov") return run_with<Net, pol::nesterov, Loss, pol::sgd>(o, data, unused);
        if (m == "2bw") return run_with<Net, pol::two_bw, Loss, pol::sgd>(o, data, unused);
        return run_with<Net, pol::pipemare, Loss, pol::sgd>(o, data, unused);
    }

    /// The PB engine's memory estimate (pipeprop/pb/memory_estimate.hpp) against the memory left
    /// (train/memory_check.hpp), with the options that lower it in this mode: fewer stages (the concurrent
    /// executor's slots and channels grow with S^2; the sequential one's forward-weight history with S), the
    /// sequential executor, a smaller push buffer (the input channel), a smaller micro-batch, a mitigation without
    /// weight copies; each only where it lowers a tenth of the estimate or more, or its main term.
    template <class Net, class Policy, class Loss, class Optimizer>
    void check_pb_memory(const common_options& o, const std::vector<pipeprop::layer_range>& ranges,
                         const pipeprop::pb::options<Policy>& opt, const std::string& mitigation_name) const {
        using engine_type = typename pb_engine<Net, Policy, Loss, Optimizer>::pipe_type;
        const pipeprop::memory_estimate e = pipeprop::pb::estimate_memory<engine_type>(ranges, opt);
        const bool concurrent = opt.executor == pipeprop::pb::executor_kind::concurrent;
        const std::size_t base_copies = 3 + (pipeprop::pb::is_adamw<Optimizer, float> ? 1 : 0);
        const std::size_t copies = e.weight_bytes() - base_copies * engine_type::stack_type::parameter_count * 4;
        const bool copies_matter = copies * 10 > e.peak_bytes();  // a tenth of the whole or more
        std::vector<std::string> remedies;
        if (ranges.size() > 1 && (concurrent || copies_matter))
            remedies.push_back(fmt::format("fewer stages (--stages, {} now)", ranges.size()));
        if (concurrent) remedies.push_back("--executor sequential (one activation slot per stage, no channels)");
        if (concurrent && opt.push_buffer > 1 && e.stages.front().channel_bytes * 10 > e.peak_bytes())
            remedies.push_back(fmt::format("a smaller --push-buffer (the input channel holds {} micro-batches)",
                                           opt.push_buffer));
        if (o.batch > 1) remedies.push_back(fmt::format("a smaller --batch (the micro-batch size b, {} now)", o.batch));
        if (copies_matter)
            remedies.push_back(fmt::format("a --mitigation without weight copies (none or sc; {} keeps {} of them)",
                                           mitigation_name, byte_text(copies)));
        check_memory(o, "--mode pb engine", e, remedies);
    }

    template <class Net, class Policy, class Loss, class Optimizer, class Data>
    json_line run_with(const common_options& o, const Data& data, const pipeprop::optim::adamw_config& adamw) {
        const std::string mitigation_name = mitigation(o);
        const std::size_t epoch_size = epoch_samples(o, data);
        pipeprop::pb::options<Policy> opt;
        opt.max_batch = o.batch;
        opt.executor = pipeprop::pb::parse_executor(executor_);
        opt.push_buffer = push_buffer_;
        opt.lanes = lanes_;
        opt.load_probe_period = load_probe_period_;
        opt.lane_rebalance_period = lane_rebalance_period_;
        opt.flush_subnormals = flush_subnormals_;
        opt.eval_batch = 256;
        opt.seed = o.seed;
        opt.adamw = adamw;
        if constexpr (Policy::corrects_discrepancy) {
            opt.policy.warmup_samples = pipemare_warmup_epochs_ * static_cast<double>(epoch_size);
            opt.policy.discrepancy_decay = pipemare_decay_;
        }
        if constexpr (Policy::double_buffered) opt.policy.accumulation = two_bw_accumulation_;
        auto programs = pb_stage_programs<Net>(stages_);
        // --transport mpi: the stage cut in contiguous groups, one per rank (outlives the engine)
        std::unique_ptr<pipeprop::remote_transport> transport;
        if (o.ranks != nullptr) {
            std::vector<int> rank_of;
            try {
                rank_of = pipeprop::contiguous_ranks(programs.size(), static_cast<std::size_t>(o.ranks->size()));
            } catch (const std::invalid_argument&) {
                throw CLI::ValidationError("--transport", fmt::format("mpi: {} ranks for {} stages; every rank needs a "
                                                                      "stage (mpirun -np P with P <= {}, or more "
                                                                      "stages: --stages)",
                                                                      o.ranks->size(), programs.size(),
                                                                      programs.size()));
            }
            transport = o.ranks->make_transport(std::move(rank_of));
            opt.remote = transport.get();
        }
        if (o.ranks == nullptr)  // --transport mpi: every rank holds only its stages' buffers; not checked
            check_pb_memory<Net, Policy, Loss, Optimizer>(o, pipeprop::ranges_of(programs), opt, mitigation_name);
        set_activity(fmt::format("building the --mode pb engine ({} stages, micro-batch b = {}, executor {})",
                                 programs.size(), o.batch, executor_));
        pb_engine<Net, Policy, Loss, Optimizer> engine(std::move(programs), opt, make_schedule(o, epoch_size),
                                                       o.momentum, o.weight_decay, o.ranks);
        auto& pipe = engine.pipeline();
        const std::size_t S = pipe.number_of_stages();
        {
            const auto st = pipe.stats();
            note(o, fmt::format("pb: {} stages, mitigation {}, executor {}, micro-batch b = {}", S, mitigation_name,
                                executor_, o.batch));
            if (o.ranks != nullptr) {
                const std::vector<std::string> by_rank = engine.stages_by_rank();
                std::string text;
                for (std::size_t r = 0; r < by_rank.size(); ++r)
                    text += fmt::format("{}rank {}: stages {}", r > 0 ? ", " : "", r, by_rank[r]);
                note(o, fmt::format("pb: --transport mpi, {} ranks ({})", by_rank.size(), text));
            }
            for (const auto& s : st.stages)
                note(o, fmt::format("pb: stage {:2} layers [{}, {})  D = {:2}  parameters {:8}  stash bytes {:9}  "
                                    "weight bytes {:9}",
                                    s.stage, s.layers.begin, s.layers.end, s.delay, s.parameters, s.stash_bytes,
                                    s.weight_bytes));
        }
        const run_summary r =
            reporting_failures(transport.get(), [&] { return run_training<Net>(engine, o, data, mode_name); });
        const auto st = pipe.stats();
        // per stage: busy seconds and utilization (--transport mpi: gathered from the rank that runs the stage)
        std::vector<float> busy(S), used(S);
        for (std::size_t s = 0; s < S; ++s) {
            busy[s] = static_cast<float>(st.stages[s].busy_seconds);
            used[s] = static_cast<float>(st.utilization(s));
        }
        std::string ranks;
        if (o.ranks != nullptr) {
            std::vector<float> mine;
            for (std::size_t s = 0; s < S; ++s)
                if (transport->is_local(s)) mine.insert(mine.end(), {busy[s], used[s]});
            std::vector<float> all(o.ranks->rank() == 0 ? 2 * S : 0);
            o.ranks->gather(mine, all);
            for (std::size_t s = 0; s < S && !all.empty(); ++s) {
                busy[s] = all[2 * s];
                used[s] = all[2 * s + 1];
            }
            for (std::size_t s = 0; s < S; ++s) ranks += fmt::format("{}{}", s > 0 ? "," : "", transport->rank_of(s));
        }
        std::string delays, utilization, lanes;
        for (std::size_t s = 0; s < S; ++s) {
            delays += fmt::format("{}{}", s > 0 ? "," : "", st.stages[s].delay);
            utilization += fmt::format("{}{:.3f}", s > 0 ? "," : "", used[s]);
            lanes += fmt::format("{}{}", s > 0 ? "," : "", st.stages[s].lane);
            if (o.ranks != nullptr)
                note(o, fmt::format("pb: stage {:2} busy {:8.3f} s  utilization {:.3f}  rank {}", s, busy[s],
                                    used[s], transport->rank_of(s)));
            else
                note(o, fmt::format("pb: stage {:2} busy {:8.3f} s  utilization {:.3f}  in flight (max) {}  lane {}",
                                    s, busy[s], used[s], st.stages[s].in_flight_max, st.stages[s].lane));
        }
        note(o, fmt::format("pb: {:.1f} samples/s over {:.2f} s inside the pipeline ({} executor)",
                            st.samples_per_second, st.wall_seconds, executor_));
        if (st.lanes.enabled)
            note(o, fmt::format("pb: lane rebalancing: {} looks at the busy time, {} new cuts; lanes now start at "
                                "stages {}",
                                st.lanes.checks, st.lanes.replans, fmt::join(st.lanes.first_stage, " ")));
        if (st.load.enabled) {
            note(o, fmt::format("pb: load adaptation: {} graph runs on the lanes, {} inline on one thread ({} of "
                                "them probes), {} switches",
                                st.load.lane_runs, st.load.inline_runs, st.load.probes, st.load.switch_count));
            const std::size_t shown = std::min<std::size_t>(st.load.switches.size(), 8);
            for (std::size_t i = 0; i < shown; ++i) {
                const auto& w = st.load.switches[i];
                note(o, fmt::format("pb: load adaptation: from micro-batch {} {} (measured {:.1f} micro-batches/s "
                                    "on the lanes, {:.1f} inline)",
                                    w.micro_batch,
                                    w.to_inline ? "inline on one thread: the lanes ran slower (other work on the cores)"
                                                : "on the lanes again: they ran faster",
                                    w.lanes_rate, w.inline_rate));
            }
            if (st.load.switch_count > shown)
                note(o, fmt::format("pb: load adaptation: {} more switches", st.load.switch_count - shown));
        }
        json_line j = r.to_json();
        j.add("mitigation", mitigation_name)
            .add("executor", executor_)
            .add("reference_batch", reference_batch_)
            .add("stages", S)
            .add("delays", delays)
            .add("utilization", utilization)
            .add("lanes", executor_ == "concurrent" && o.ranks == nullptr ? lanes : std::string())
            .add("pb_samples_per_second", st.samples_per_second)
            .add("inline_runs", st.load.inline_runs)
            .add("load_switches", st.load.switch_count)
            .add("flush_subnormals", flush_subnormals_);
        if (reference_batch_ > 0) j.add("reference_lr", reference_lr_).add("reference_momentum", reference_momentum_);
        if (o.ranks != nullptr) j.add("transport", "mpi").add("ranks", ranks);
        return j;
    }

    std::string mitigation_ = "sc_lwp";
    std::string stages_ = "fine";
    std::string executor_ = "concurrent";
    std::size_t reference_batch_ = 0;
    bool log_stage_norms_ = false;
    std::size_t push_buffer_ = 256;
    std::size_t lanes_ = 0;
    std::size_t load_probe_period_ = 4;
    std::size_t lane_rebalance_period_ = 2;
    bool flush_subnormals_ = false;
    double pipemare_warmup_epochs_ = 0.25;
    double pipemare_decay_ = 0.9;
    std::size_t two_bw_accumulation_ = 0;
    const CLI::Option* batch_option_ = nullptr;
    const CLI::Option* mitigation_opt_ = nullptr;
    std::string optimizer_ = "auto";
    double beta1_ = mode_sgd::default_beta1, beta2_ = mode_sgd::default_beta2, eps_ = mode_sgd::default_eps;
    CLI::Option *optimizer_opt_ = nullptr, *beta1_opt_ = nullptr, *beta2_opt_ = nullptr, *eps_opt_ = nullptr;
    double reference_lr_ = 0.0, reference_momentum_ = 0.0;
};

}  // namespace train

#include "train/mode_pb_text.hpp"  // mode_pb::run_text, the text networks' runs
