// Must not compile: conv2d on a rank-1 activation (the output of a dense layer).
// Expected diagnostic: "the input of a conv2d layer must be rank 3 [channels, height, width]".
#include <pipeprop/layer_stack.hpp>
#include <pipeprop/layers/conv2d.hpp>
#include <pipeprop/layers/dense.hpp>

namespace pp = pipeprop;

using net = pp::network<pp::shape<64>, pp::dense<32>, pp::conv2d<4, 3>>;

std::size_t instantiate() { return pp::layer_stack<net, float>::parameter_count; }
