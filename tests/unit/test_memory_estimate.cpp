// Memory estimates (pipeprop/memory_estimate.hpp, pb/memory_estimate.hpp, sync/memory_estimate.hpp): the bytes
// computed before an engine is built equal, byte for byte, what the built engine reports or holds: per stage the
// activation slots and their bytes (pb::stage_stats::stash_bytes, sync::stage::activation_bytes plus the targets),
// the weight bytes (pb::stage_stats::weight_bytes; a sync stage's parameter-sized buffers) and the workspaces, the
// channels' and the evaluation buffers' bytes. On the MLP, the small CNN and ResNet-20 of pipeprop/models, both PB
// executors, several cuts, policies and micro-batch sizes, and synchronous schedules with 2BP on and off. An
// estimate far beyond the machine's memory is computed without allocating it. The synchronous buffer sizes the
// estimate reads without building a plan per micro-batch count (sync/plan_sizes.hpp) equal the exact plans' sizes:
// the closed form past the steady state and the maximum over every short step's plan. The concurrent PB executor's
// per-stage bytes also equal the formula of pb/memory_estimate.hpp computed from the layer tables alone (one copy of
// each boundary activation, in the forward channel), and the bytes a built concurrent engine takes from the heap
// (glibc's mallinfo2) its estimate.
#include <catch2/catch.hpp>

#include <pipeprop/memory_estimate.hpp>
#include <pipeprop/models/resnet.hpp>
#include <pipeprop/models/small_cnn.hpp>
#include <pipeprop/pb/engine.hpp>
#include <pipeprop/pb/memory_estimate.hpp>
#include <pipeprop/pb/policy_pipedream_2bw.hpp>
#include <pipeprop/sync/executor.hpp>
#include <pipeprop/sync/memory_estimate.hpp>
#include <pipeprop/sync/plan_sizes.hpp>
#include <pipeprop/sync/step_plan_cache.hpp>

#include <cblas.h>
#include <malloc.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace pp = pipeprop;
namespace pb = pipeprop::pb;
namespace ps = pipeprop::sync;

namespace {

using resnet20 = pp::models::resnet_of_depth<20>;

/// Stages of `every` cut-allowed positions each (1: as fine as the network allows).
template <class Stack>
std::vector<pp::layer_range> cut_every(std::size_t every) {
    std::vector<std::size_t> splits;
    std::size_t allowed = 0;
    for (std::size_t i = 1; i < Stack::layer_count; ++i)
        if (Stack::cut_allowed_before[i] && ++allowed % every == 0) splits.push_back(i);
    return pp::partition_at(Stack::layer_count, splits);
}

/// Builds the PB engine and requires the estimate made before to equal what it reports and holds.
template <class Net, class Policy, class Optimizer = pp::optim::sgd<float>>
void check_pb(const std::vector<pp::layer_range>& cut, pb::executor_kind executor, std::size_t max_b) {
    using engine = pb::engine<Net, Policy, float, pp::detail::default_loss_t<Net, float>, Optimizer>;
    using stack = typename engine::stack_type;
    typename engine::options_type opt;
    opt.max_batch = max_b;
    opt.executor = executor;
    opt.push_buffer = 5;
    opt.lanes = 1;  // no cost measurement: the buffers do not depend on the lanes
    opt.eval_batch = 7;
    if constexpr (Policy::corrects_discrepancy) opt.policy.warmup_samples = 10;
    const pp::memory_estimate e = pb::estimate_memory<engine>(cut, opt);
    engine built(cut, opt);
    const pb::run_stats st = built.stats();
    INFO("policy " << Policy::name << ", executor " << pp::to_string(executor) << ", S = " << cut.size()
                   << ", b = " << max_b);
    REQUIRE(e.stages.size() == st.stages.size());
    const std::size_t S = cut.size(), t = engine::targets_per_sample;
    for (std::size_t s = 0; s < S; ++s) {
        INFO("stage " << s << " layers [" << cut[s].begin << ", " << cut[s].end << ")");
        CHECK(e.stages[s].activation_slots == st.stages[s].activation_slots);
        CHECK(e.stages[s].activation_bytes == st.stages[s].stash_bytes);
        CHECK(e.stages[s].weight_bytes == st.stages[s].weight_bytes);
        CHECK(e.stages[s].workspace_bytes == built.stack().make_workspaces(cut[s], max_b).bytes());
        CHECK(e.stages[s].channel_bytes == st.stages[s].channel_bytes);  // the executor's channel objects
        if (executor != pb::executor_kind::concurrent) continue;
        // The formula of pb/memory_estimate.hpp from the layer tables alone: D_s + 1 slots of the stage's
        // activations less the boundaries the forward channels hold (the input unless s = 0, the output unless
        // s = S - 1), its stashes L_s and targets, plus one set of gradients (every slot's on the last stage); the
        // forward channel into s holds D_{s-1} + 1 inputs of whole 64-byte lines.
        const pp::layer_range r = cut[s];
        const std::size_t D = built.stage_delay(s), in = stack::activation_size[r.begin] * max_b * sizeof(float),
                          out = stack::activation_size[r.end] * max_b * sizeof(float);
        std::size_t A = 0;
        for (std::size_t k = r.begin; k <= r.end; ++k) A += stack::activation_size[k] * max_b * sizeof(float);
        const std::size_t L = built.stack().make_activations(r, max_b).bytes() - 2 * A;  // the layers' stashes
        const std::size_t slot = A - (s > 0 ? in : 0) - (s + 1 < S ? out : 0) + L + max_b * t * sizeof(std::int32_t);
        CHECK(st.stages[s].stash_bytes == (D + 1) * slot + (s + 1 < S ? 1 : D + 1) * A);
        const auto lines = [](std::size_t bytes) { return (bytes + 63) / 64 * 64; };
        const std::size_t forward_in =
            s == 0 ? opt.push_buffer * (in + max_b * t * sizeof(std::int32_t))
                   : (built.stage_delay(s - 1) + 1) * (lines(in) + max_b * t * sizeof(std::int32_t));
        const std::size_t backward_in = s + 1 < S ? (built.stage_delay(s + 1) + 3) * out : 0;
        CHECK(st.stages[s].channel_bytes == forward_in + backward_in);
    }
    CHECK(e.evaluation_bytes == pp::stage_inference<stack>(built.stack(), cut, opt.eval_batch).bytes());
    CHECK(e.construction_bytes == stack::parameter_count * sizeof(float));
    CHECK(e.activation_bytes() > 0);
    CHECK(e.peak_bytes() > e.built_bytes());
}

/// Builds the synchronous executor and requires the estimate made before to equal what its stages hold.
template <class Net, class Optimizer = pp::optim::sgd<float>>
void check_sync(ps::schedule_kind kind, bool two_stage_bp, const std::vector<pp::layer_range>& cut,
                std::size_t micro_batches, std::size_t max_batch) {
    using executor = ps::schedule_executor<Net, float, pp::detail::default_loss_t<Net, float>, Optimizer>;
    using stack = typename executor::stack_type;
    typename executor::options_type opt;
    opt.micro_batches = micro_batches;
    opt.max_batch = max_batch;
    const pp::memory_estimate e = ps::estimate_memory<executor>(kind, two_stage_bp, cut, opt);
    executor built(kind, two_stage_bp, cut, opt);
    const stack net{};
    INFO("schedule " << ps::name(kind) << ", 2BP " << two_stage_bp << ", S = " << cut.size()
                     << ", m = " << micro_batches << ", B = " << max_batch);
    REQUIRE(e.stages.size() == cut.size());
    const std::size_t b = built.max_micro_batch(), t = executor::targets_per_sample;
    std::size_t channels = 0;
    for (std::size_t s = 0; s < cut.size(); ++s) {
        INFO("stage " << s);
        const auto& stage = built.stage_at(s);
        CHECK(e.stages[s].activation_slots == stage.slots());
        CHECK(e.stages[s].activation_bytes == stage.activation_bytes() + stage.slots() * b * t * sizeof(std::int32_t));
        std::size_t weights = stage.parameters().size() + stage.gradient().size();
        for (std::size_t k = 0; k < Optimizer::state_buffer_names.size(); ++k)
            weights += stage.optimizer().state_buffer(k).size();
        CHECK(e.stages[s].weight_bytes == weights * sizeof(float));
        CHECK(e.stages[s].workspace_bytes == net.make_workspaces(cut[s], b).bytes());
    }
    for (std::size_t k = 0; k + 1 < cut.size(); ++k) {
        const std::size_t n = stack::activation_size[cut[k].end];
        channels += pp::boundary_channel<float>("f", built.channel_sizes()[k].forward, n, b, t).bytes() +
                    pp::boundary_channel<float>("b", built.channel_sizes()[k].backward, n, b, 0).bytes();
    }
    CHECK(e.channel_bytes() == channels);
    CHECK(e.evaluation_bytes == pp::stage_inference<stack>(net, cut, max_batch).bytes());
}

}  // namespace

TEST_CASE("PB estimate equals the engine's report: MLP and small CNN, every policy kind, both executors",
          "[memory][pb]") {
    openblas_set_num_threads(1);
    using mlp = pp::models::mlp;
    using cnn = pp::models::small_cnn;
    using mlp_stack = pp::layer_stack<mlp, float>;
    using cnn_stack = pp::layer_stack<cnn, float>;
    for (const auto executor : {pb::executor_kind::sequential, pb::executor_kind::concurrent}) {
        for (const std::size_t b : {std::size_t{1}, std::size_t{3}}) {
            check_pb<mlp, pb::policy::none>(cut_every<mlp_stack>(1), executor, b);
            check_pb<mlp, pb::policy::sc_lwp<>>(cut_every<mlp_stack>(2), executor, b);
            check_pb<cnn, pb::policy::none>(cut_every<cnn_stack>(1), executor, b);
            check_pb<cnn, pb::policy::sc_lwp<>>(cut_every<cnn_stack>(1), executor, b);
            check_pb<cnn, pb::policy::weight_stashing>(cut_every<cnn_stack>(3), executor, b);
            check_pb<cnn, pb::policy::pipemare>(cut_every<cnn_stack>(2), executor, b);
            check_pb<cnn, pb::policy::linear_weight_prediction<pb::lwp_form::weight_difference>>(
                cut_every<cnn_stack>(1), executor, b);
            check_pb<cnn, pb::policy::pipedream_2bw>(cut_every<cnn_stack>(4), executor, b);
            check_pb<cnn, pb::policy::none, pp::optim::adamw<float>>(cut_every<cnn_stack>(2), executor, b);
            check_pb<cnn, pb::policy::none>({cnn_stack::all()}, executor, b);  // one stage
        }
    }
}

TEST_CASE("PB estimate equals the engine's report: ResNet-20, several cuts", "[memory][pb]") {
    // (the concurrent executor on the finest cut, 75 stages, would hold about 3 GB at b = 2: its slots and channels
    // grow with S^2)
    openblas_set_num_threads(1);
    using stack = pp::layer_stack<resnet20, float>;
    check_pb<resnet20, pb::policy::sc_lwp<>>(cut_every<stack>(1), pb::executor_kind::sequential, 2);
    check_pb<resnet20, pb::policy::sc_lwp<>>(cut_every<stack>(6), pb::executor_kind::concurrent, 2);
    check_pb<resnet20, pb::policy::weight_stashing>(cut_every<stack>(9), pb::executor_kind::concurrent, 1);
    check_pb<resnet20, pb::policy::weight_stashing>(cut_every<stack>(9), pb::executor_kind::sequential, 3);
}

TEST_CASE("PB estimate of the concurrent engine equals the bytes it takes from the heap", "[memory][pb]") {
    // glibc's count of the bytes in use (mallinfo2: the heap's and the mmapped blocks') before and after building the
    // engine: the estimate's built_bytes plus what the containers, names and the flow graph take besides the
    // payloads (a few bytes per buffer), and the construction block freed before the constructor returns.
    openblas_set_num_threads(1);
    using stack = pp::layer_stack<resnet20, float>;
    using engine = pb::engine<resnet20, pb::policy::sc_lwp<>>;
    engine::options_type opt;
    opt.executor = pb::executor_kind::concurrent;
    opt.lanes = 1;
    const auto in_use = [] {
        const struct mallinfo2 m = mallinfo2();
        return m.uordblks + m.hblkhd;
    };
    { engine warm({stack::all()}, opt); }  // oneTBB's and the program's first allocations, outside the count
    for (const std::size_t every : {std::size_t{4}, std::size_t{2}}) {
        const std::vector<pp::layer_range> cut = cut_every<stack>(every);
        const pp::memory_estimate e = pb::estimate_memory<engine>(cut, opt);
        const std::size_t before = in_use();
        engine built(cut, opt);
        const std::size_t taken = in_use() - before;
        INFO("S = " << cut.size() << ": estimate " << e.built_bytes() << " B, taken from the heap " << taken << " B");
        CHECK(taken >= e.built_bytes());
        CHECK(taken <= e.built_bytes() + e.built_bytes() / 50 + (std::size_t{1} << 20));
    }
}

TEST_CASE("sync estimate equals what the executor's stages hold", "[memory][sync]") {
    openblas_set_num_threads(1);
    using cnn_stack = pp::layer_stack<pp::models::small_cnn, float>;
    using resnet_stack = pp::layer_stack<resnet20, float>;
    for (const bool two_bp : {false, true}) {
        for (const auto kind : {ps::schedule_kind::gpipe, ps::schedule_kind::one_f_one_b, ps::schedule_kind::zb_h1}) {
            check_sync<pp::models::mlp>(kind, two_bp, cut_every<pp::layer_stack<pp::models::mlp, float>>(2), 4, 10);
            check_sync<pp::models::small_cnn>(kind, two_bp, cut_every<cnn_stack>(2), 3, 9);
        }
        check_sync<resnet20>(ps::schedule_kind::one_f_one_b, two_bp, cut_every<resnet_stack>(4), 4, 8);
    }
    check_sync<pp::models::small_cnn, pp::optim::adamw<float>>(ps::schedule_kind::gpipe, false,
                                                               cut_every<cnn_stack>(2), 2, 5);
}

TEST_CASE("an estimate far beyond the machine's memory is computed without allocating it", "[memory]") {
    // ResNet-20 cut into its finest stages with micro-batches of 2^20 samples: terabytes, which the estimate only
    // counts (a std::bad_alloc here would mean it allocated what it counts).
    using engine = pb::engine<resnet20, pb::policy::sc_lwp<>>;
    engine::options_type opt;
    opt.max_batch = std::size_t{1} << 20;
    const pp::memory_estimate e = pb::estimate_memory<engine>(cut_every<pp::layer_stack<resnet20, float>>(1), opt);
    CHECK(e.activation_bytes() > (std::size_t{1} << 40));
    CHECK(e.built_bytes() > e.activation_bytes());
    // and the one-micro-batch figures grow linearly with it
    opt.max_batch = 1;
    const pp::memory_estimate one = pb::estimate_memory<engine>(cut_every<pp::layer_stack<resnet20, float>>(1), opt);
    CHECK(e.activation_bytes() > one.activation_bytes() * (std::size_t{1} << 19));
    CHECK(e.weight_bytes() == one.weight_bytes());
    // the errors of the engine's constructor
    opt.max_batch = 0;
    CHECK_THROWS_AS(pb::estimate_memory<engine>({pp::layer_stack<resnet20, float>::all()}, opt), std::invalid_argument);
}

namespace {
/// The (kind, S, chunks) combinations the generators take, S = 1 .. max_stages (interleaved 1F1B with 2 and 3 stages
/// per device).
struct sized_schedule {
    ps::schedule_kind kind;
    std::size_t stages, chunks;
};
std::vector<sized_schedule> schedules_up_to(std::size_t max_stages) {
    std::vector<sized_schedule> out;
    for (const auto kind : ps::all_schedule_kinds)
        for (const std::size_t chunks : {std::size_t{2}, std::size_t{3}})
            for (std::size_t S = 1; S <= max_stages; ++S)
                if ((kind == ps::schedule_kind::interleaved_1f1b || chunks == 2) &&
                    ps::schedule_accepts(kind, S, 1, chunks))
                    out.push_back({kind, S, chunks});
    return out;
}
}  // namespace

TEST_CASE("sync buffer sizes: the closed form equals the exact sizes past the steady state", "[memory][sync]") {
    // step_sizes (exact up to m1 + period, then sizes(m1) + rounds * (sizes(m1 + period) - sizes(m1))) against the
    // sizes of the generated schedule itself, for every micro-batch count up to 3 m1 and a few far beyond it
    for (const auto& [kind, S, chunks] : schedules_up_to(7))
        for (const bool two_bp : {false, true})
            for (const std::size_t steps : {std::size_t{1}, std::size_t{2}}) {
                const std::size_t period = ps::size_period(kind, S, chunks);
                const std::size_t m1 = ps::steady_state_micro_batches(kind, S, chunks);
                REQUIRE(m1 % period == 0);
                std::vector<std::size_t> counts;
                for (std::size_t m = period; m <= 3 * m1; m += period) counts.push_back(m);
                for (const std::size_t far : {std::size_t{257}, std::size_t{1000}})
                    counts.push_back(far / period * period);
                for (const std::size_t m : counts) {
                    INFO(ps::name(kind) << ", 2BP " << two_bp << ", S = " << S << ", chunks " << chunks << ", steps "
                                        << steps << ", m = " << m);
                    CHECK(ps::step_sizes(kind, S, m, two_bp, steps, chunks) ==
                          ps::exact_step_sizes(kind, S, m, two_bp, steps, chunks));
                }
            }
    // sizes_of counts what slot_plan assigns
    for (const auto& [kind, S, chunks] : schedules_up_to(6))
        for (const std::size_t m : {std::size_t{1}, std::size_t{6}, std::size_t{12}}) {
            if (!ps::schedule_accepts(kind, S, m, chunks)) continue;
            const ps::schedule sc = ps::make_schedule(kind, S, m, true, chunks);
            const auto plan = ps::slot_plan(sc);
            const ps::plan_sizes sizes = ps::sizes_of(sc);
            for (std::size_t s = 0; s < S; ++s) CHECK(sizes.slots[s] == plan[s].slots);
        }
    // a closed form at 65536 micro-batches: 1F1B keeps S - s in flight on stage s, GPipe all m
    CHECK(ps::step_sizes(ps::schedule_kind::one_f_one_b, 4, 65536, false).slots ==
          std::vector<std::size_t>{4, 3, 2, 1});
    CHECK(ps::step_sizes(ps::schedule_kind::gpipe, 3, 65536, true).slots == std::vector<std::size_t>(3, 65536));
    CHECK_THROWS_AS(ps::step_sizes(ps::schedule_kind::interleaved_1f1b, 8, 65537, true, 1, 2), std::invalid_argument);
}

TEST_CASE("sync buffer sizes: covering_sizes equals the maximum over every plan an executor runs", "[memory][sync]") {
    // the full step, the short step of every batch size up to max_batch (its micro-batch count micro_batches_for) and
    // k consecutive full steps, each from its exact plan; and what the executor's plan cache sizes its buffers for
    for (const auto& [kind, S, chunks] : schedules_up_to(6))
        for (const bool two_bp : {false, true})
            for (std::size_t m = 1; m <= 3 * ps::steady_state_micro_batches(kind, S, chunks) + 2; ++m) {
                if (!ps::schedule_accepts(kind, S, m, chunks)) continue;
                for (const std::size_t max_batch : {m, 2 * m + 1})
                    for (const std::size_t k : {std::size_t{1}, std::size_t{2}}) {
                        INFO(ps::name(kind) << ", 2BP " << two_bp << ", S = " << S << ", chunks " << chunks
                                            << ", m = " << m << ", B = " << max_batch << ", k = " << k);
                        ps::plan_sizes all = ps::exact_step_sizes(kind, S, m, two_bp, 1, chunks);
                        for (std::size_t batch = 1; batch <= std::min(max_batch, m); ++batch)
                            all.widen(ps::exact_step_sizes(kind, S, ps::micro_batches_for(kind, S, m, chunks, batch),
                                                           two_bp, 1, chunks));
                        if (k > 1) all.widen(ps::exact_step_sizes(kind, S, m, two_bp, k, chunks));
                        CHECK(ps::covering_sizes(kind, two_bp, S, m, max_batch, k, chunks) == all);
                        if (m % 4 != 1) continue;  // the plan cache on a sample of the counts
                        ps::detail::step_plan_cache cache;
                        const auto slots = cache.build(kind, two_bp, S, m, max_batch, k, chunks);
                        CHECK(slots == all.slots);
                        CHECK(ps::plan_sizes{slots, cache.channel_sizes()} == all);
                    }
            }
}
