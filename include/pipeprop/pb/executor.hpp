// pipeprop/pb/executor.hpp: the one interface behind which the two PB executors run, and the options of a PB run.
//
// PB-paper (Kosson et al., arXiv 2003.11666) §3; docs/pb-semantics.md §1. Both executors realize the
// clocked model exactly and produce identical bits:
//   - sequential (pb/sequential_executor.hpp): the reference; one micro-batch at a time through every stage, with a
//     per-stage history of forward weights.
//   - concurrent (pb/concurrent_executor.hpp): every stage runs its op stream (pb/op_stream.hpp) on the engines'
//     flow graph (lane_graph.hpp), an op as soon as its input message is there; consecutive stages grouped into
//     serial nodes ("lanes", options::lanes; one per core by default, or one per stage).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pipeprop/executor_kind.hpp"
#include "pipeprop/optim/adamw.hpp"
#include "pipeprop/pb/micro_batch.hpp"
#include "pipeprop/pb/policies.hpp"
#include "pipeprop/pb/stats.hpp"
#include "pipeprop/remote_transport.hpp"

namespace pipeprop::pb {

using pipeprop::executor_kind;
using pipeprop::parse_executor_kind;
using pipeprop::to_string;

/// Same as parse_executor_kind (the name of the first release).
[[nodiscard]] inline executor_kind parse_executor(std::string_view s) { return parse_executor_kind(s); }

/// Options of a PB engine (all sizes in samples or micro-batches).
template <mitigation_policy Policy>
struct options {
    std::size_t max_batch = 1;  ///< largest micro-batch size b the buffers are made for (>= 1)
    /// sequential (the reference) or concurrent (oneTBB flow graph)
    executor_kind executor = executor_kind::concurrent;
    /// Concurrent executor: micro-batches buffered by push() before the flow graph runs them (>= 1). Larger values
    /// amortize the pipeline's ramp at each run (at the start of a run the later lanes wait for the first forward, at
    /// its end the earlier ones for the last; bench/README.md, "Concurrent PB executor vs the sequential reference",
    /// measures 64 against 256) and report completed micro-batches later, in larger groups; the input channel holds
    /// push_buffer micro-batches of max_batch samples. The results do not depend on it.
    std::size_t push_buffer = 256;
    /// Concurrent executor: the serial flow-graph nodes ("lanes", lane_graph.hpp) the stages are grouped into, each
    /// lane a run of consecutive stages whose ops one node runs, so that a stage's weights and activations stay on the
    /// core that runs its lane. 0 (default): one lane per core of the task arena, at most S, the cut balanced by
    /// the stages' measured per-tick costs (pb::plan_lanes over pb::measure_tick_costs, run by the engine's
    /// constructor); S (or more): one node per stage. The results do not depend on it.
    std::size_t lanes = 0;
    /// Concurrent executor: an explicit lane plan (pb/lane_plan.hpp: the first stage of each lane, e.g. from
    /// plan_lanes over measure_tick_costs or one's own); when given, `lanes` is not read and nothing is measured
    /// (lane_rebalance_period 0 keeps it for the whole run).
    /// Throws std::invalid_argument at engine construction when it is not a plan for the engine's S stages.
    std::vector<std::size_t> lane_starts{};
    /// Concurrent executor in one process with more than one lane: adapt to the cores' load
    /// (pb/load_adaptation.hpp): every `load_probe_period` graph runs (of push_buffer micro-batches: 4 x 256 by
    /// default, about 1000 micro-batches), one run goes the other way (inline on the calling thread when on the lanes,
    /// and back), and the faster of the two is kept; run_stats::load says what it did. 0: always the lanes. The
    /// results do not depend on it.
    std::size_t load_probe_period = 4;
    /// Concurrent executor in one process with more than one lane: look at the lane plan again
    /// (pb/lane_rebalance.hpp): every `lane_rebalance_period` measured graph runs on the lanes (2 x 256 micro-batches
    /// by default), cut the lanes anew over the stages' busy time in those runs when two looks in a row find the same
    /// cut that makes the slowest lane at least 3% less busy; run_stats::lanes says what it did. It applies to a plan
    /// from lane_starts too. 0: the plan stays as made or given. The results do not depend on it.
    std::size_t lane_rebalance_period = 2;
    /// Run every stage's forward, backward and update with subnormal numbers flushed to zero
    /// (flush_subnormals.hpp: much faster where momentum near 1 decays velocities into the subnormal range; results
    /// can differ from an unflushed run, never between the executors). Default off.
    bool flush_subnormals = false;
    std::size_t eval_batch = 64;           ///< samples per forward pass in evaluate() (>= 1)
    std::uint64_t seed = 1;                ///< layer_stack::init_parameters seed (per layer; independent of the cut)
    typename Policy::parameters policy{};  ///< the policy's runtime knobs (PipeMare: warm-up, EMA decay)
    /// Engines whose Optimizer is optim::adamw<T> (pb/optimizer.hpp): beta1, beta2 and eps. The decoupled weight
    /// decay comes per micro-batch with optim::hyperparameters, like the learning rate.
    optim::adamw_config adamw{};
    /// Stages in several processes: the transport to the stages other processes run
    /// (remote_transport.hpp, e.g. pipeprop/mpi/mpi_transport.hpp; it must outlive the engine). This process then
    /// runs only its local stages, on one lane (concurrent executor only: std::invalid_argument with the sequential
    /// one). Every process makes the same engine and pushes the same micro-batches. nullptr (default): one process.
    remote_transport* remote = nullptr;
};

/// The executor interface (internal to pb::engine, which validates every argument before calling it).
template <class T>
class executor {
public:
    virtual ~executor() = default;
    /// Accepts micro-batch mb with x [mb.batch, input size] and targets [mb.batch, targets per sample] (copied
    /// before returning);
    /// returns the micro-batches whose backward completed at every stage during this call, oldest first. The span
    /// is valid until the next call.
    virtual std::span<const completed_micro_batch<T>> push(const T* x, const std::int32_t* labels,
                                                           const micro_batch_info<T>& mb) = 0;
    /// Completes every micro-batch in flight (its backward and update at every stage) and returns them.
    virtual std::span<const completed_micro_batch<T>> drain() = 0;
    /// Micro-batches pushed and not yet completed.
    [[nodiscard]] virtual std::size_t in_flight() const noexcept = 0;
    /// Called at a drained point after the stages' state was replaced (checkpoint load, parameter load): rebuild
    /// whatever the executor derived from it (forward-weight history, predicted weights); n0 := next micro-batch.
    virtual void resynchronize() = 0;
    [[nodiscard]] virtual executor_kind kind() const noexcept = 0;  ///< Which executor this is.
    /// Fills the executor's part of each stage's figures (slots, in-flight max, stash bytes, busy time, its own
    /// weight copies added to weight_bytes / weight_copies).
    virtual void fill_stats(std::vector<stage_stats>& stages) const = 0;
    /// What the load adaptation did (pb/load_adaptation.hpp; nothing for an executor without one).
    [[nodiscard]] virtual load_adaptation_stats load_adaptation() const { return {}; }
    /// What the lane rebalancing did (pb/lane_rebalance.hpp; nothing for an executor without one).
    [[nodiscard]] virtual lane_rebalance_stats lane_rebalance() const { return {}; }
};

}  // namespace pipeprop::pb
