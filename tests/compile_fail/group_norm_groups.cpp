// Must not compile: group_norm with 4 groups over 6 channels (6 is not divisible by 4).
// Expected diagnostic: "the number of channels C (the first input dimension) must be divisible by the number of
// groups".
#include <pipeprop/layer_stack.hpp>
#include <pipeprop/layers/conv2d.hpp>
#include <pipeprop/layers/group_norm.hpp>
#include <pipeprop/layers/relu.hpp>

namespace pp = pipeprop;

using net = pp::network<pp::shape<1, 8, 8>, pp::conv2d<6, 3, 1, 1>, pp::group_norm<4>, pp::relu>;

std::size_t instantiate() { return pp::layer_stack<net, float>::parameter_count; }
