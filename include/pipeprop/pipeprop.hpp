// pipeprop/pipeprop.hpp: umbrella header, every public component of pipeprop. A program that needs less includes
// less: pipeprop/core.hpp (layers, networks, passes; no oneTBB, xtensor, zlib or {fmt}), pipeprop/pb.hpp,
// pipeprop/sync.hpp, pipeprop/data.hpp, pipeprop/checkpoint.hpp.
#pragma once

#include "pipeprop/core.hpp"
#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/executor_kind.hpp"
#include "pipeprop/data.hpp"
#include "pipeprop/checkpoint.hpp"
#include "pipeprop/pb.hpp"
#include "pipeprop/pb/checkpoint.hpp"
#include "pipeprop/sync.hpp"
#include "pipeprop/sync/checkpoint.hpp"
#include "pipeprop/pb/trainer.hpp"
#include "pipeprop/sync/trainer.hpp"
