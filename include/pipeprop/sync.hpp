// pipeprop/sync.hpp: synchronous pipeline schedules with 2-stage backpropagation (2BP: Rae et al., arXiv
// 2405.18047; docs/schedules.md): the core (pipeprop/core.hpp), schedules as data (GPipe, 1F1B, ZB-H1 / ZB-H2,
// interleaved 1F1B, ZB-V), their analysis and simulator, the schedule executor on a oneTBB flow graph, traces, the
// memory estimate and balanced cuts from measured costs. Checkpoints of a synchronous executor:
// pipeprop/sync/checkpoint.hpp.
#pragma once

#include "pipeprop/core.hpp"
#include "pipeprop/balanced_partition.hpp"
#include "pipeprop/op_cost_probe.hpp"
#include "pipeprop/sync/any_executor.hpp"
#include "pipeprop/sync/cost_measurement.hpp"
#include "pipeprop/sync/executor.hpp"
#include "pipeprop/sync/executor_options.hpp"
#include "pipeprop/sync/memory_estimate.hpp"
#include "pipeprop/sync/op_span.hpp"
#include "pipeprop/sync/schedule.hpp"
#include "pipeprop/sync/schedule_analysis.hpp"
#include "pipeprop/sync/schedule_executor.hpp"
#include "pipeprop/sync/simulator.hpp"
#include "pipeprop/sync/stage.hpp"
#include "pipeprop/sync/step_plan.hpp"
#include "pipeprop/sync/trace.hpp"
