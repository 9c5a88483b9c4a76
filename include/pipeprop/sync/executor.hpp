// pipeprop/sync/executor.hpp: pipeline_executor, the synchronous pipeline executor with its schedule (GPipe, 1F1B,
// ZB-H1, ZB-H2) and 2BP flag (2BP-paper, Rae et al. arXiv 2405.18047, §3) fixed by template arguments. It is
// schedule_executor (sync/schedule_executor.hpp; semantics, failures, global reductions: docs/schedules.md §3) built
// for that schedule; the schedule's op lists are data, so every (Kind, TwoStageBP) shares one compiled executor per
// network.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "pipeprop/sync/schedule_executor.hpp"

namespace pipeprop::sync {

/// schedule_executor running schedule Kind with 2BP on (TwoStageBP) or off. Not copyable or movable.
template <network_type Net, class T, schedule_kind Kind, bool TwoStageBP,
          class Loss = pipeprop::detail::default_loss_t<Net, T>, class Optimizer = optim::sgd<T>>
class pipeline_executor : public schedule_executor<Net, T, Loss, Optimizer> {
    using base = schedule_executor<Net, T, Loss, Optimizer>;

public:
    /// The executor's options (schedule_executor).
    using typename base::options_type;
    /// The network's layer stack.
    using typename base::stack_type;
    static constexpr schedule_kind kind = Kind;  ///< The schedule (GPipe, 1F1B, ZB-H1, ...).
    /// True: 2BP (backward-p1 and -p2 as separate ops); false: fused backward.
    static constexpr bool two_stage_bp = TwoStageBP;

    /// Stages are the given ranges (checked as schedule_executor's). Throws as schedule_executor's constructor.
    pipeline_executor(std::vector<layer_range> stages, const options_type& opt)
        : base(Kind, TwoStageBP, std::move(stages), opt) {}
    /// Each stage's code given (stage_program.hpp).
    pipeline_executor(std::vector<stage_program<stack_type>> programs, const options_type& opt)
        : base(Kind, TwoStageBP, std::move(programs), opt) {}

    /// The executor for a static pipeline_layout (same Net and T). Throws as the constructor.
    template <class Layout>
    [[nodiscard]] static std::unique_ptr<pipeline_executor> for_layout(const options_type& opt) {
        static_assert(std::is_same_v<typename Layout::stack_type, stack_type>,
                      "pipeprop::sync::pipeline_executor::for_layout: the layout is over another network or "
                      "value type.");
        return std::make_unique<pipeline_executor>(static_stage_programs<Layout>(), opt);
    }
};

}  // namespace pipeprop::sync
