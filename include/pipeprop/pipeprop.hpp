// pipeprop/pipeprop.hpp: umbrella header. Includes every public component of pipeprop.
#pragma once

#include "pipeprop/shape.hpp"
#include "pipeprop/parameter_tensor.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/network.hpp"
#include "pipeprop/seed.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/pipeline_layout.hpp"
#include "pipeprop/kernels/gemm.hpp"
#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/layers/dense.hpp"
#include "pipeprop/layers/relu.hpp"
#include "pipeprop/layers/flatten.hpp"
#include "pipeprop/loss/softmax_cross_entropy.hpp"
#include "pipeprop/testing/check_gradients.hpp"
#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/optim/momentum_update.hpp"
