// Must not compile: online_norm on a rank-2 [tokens, features] input (only rank 3 [C, H, W] and rank 1 [N] are
// implemented). Expected diagnostic: "the input must be rank 3 [channels, height, width] ... or rank 1 [features]".
#include <pipeprop/layer_stack.hpp>
#include <pipeprop/layers/online_norm.hpp>

namespace pp = pipeprop;

using net = pp::network<pp::shape<4, 8>, pp::online_norm<>>;

std::size_t instantiate() { return pp::layer_stack<net, float>::parameter_count; }
