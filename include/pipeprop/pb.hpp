// pipeprop/pb.hpp: Pipelined Backpropagation (PB-paper: Kosson et al., arXiv 2003.11666; docs/pb-semantics.md):
// the core (pipeprop/core.hpp), the static and runtime-partition PB pipelines (pb::pipeline) with both executors
// (sequential reference, concurrent on a oneTBB flow graph), the mitigation policies and the memory estimate.
// Checkpoints of a PB engine: pipeprop/pb/checkpoint.hpp; stages in other processes: pipeprop/mpi/mpi_transport.hpp.
#pragma once

#include "pipeprop/core.hpp"
#include "pipeprop/pb/memory_estimate.hpp"
#include "pipeprop/pb/pipeline.hpp"
#include "pipeprop/pb/policies.hpp"
#include "pipeprop/pb/policy_nesterov.hpp"
#include "pipeprop/pb/policy_optimizer_prediction.hpp"
#include "pipeprop/pb/policy_pipedream_2bw.hpp"
