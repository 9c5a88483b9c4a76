// pipeprop/loss/default_loss.hpp: the loss an engine of Net uses when none is given: softmax cross-entropy over
// the network output's elements (the classes).
#pragma once

#include "pipeprop/layer_stack.hpp"
#include "pipeprop/loss/softmax_cross_entropy.hpp"

namespace pipeprop::detail {

/// softmax_cross_entropy<T, per-sample output size of Net>.
template <network_type Net, class T>
using default_loss_t = softmax_cross_entropy<T, layer_stack<Net, T>::output_shape::size>;

}  // namespace pipeprop::detail
