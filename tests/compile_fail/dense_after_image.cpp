// Must not compile: dense directly after a rank-3 [C, H, W] activation (flatten missing).
// Expected diagnostic: "the input of a dense layer must be rank 1 [features]; put pipeprop::flatten before it".
#include <pipeprop/layer_stack.hpp>
#include <pipeprop/layers/conv2d.hpp>
#include <pipeprop/layers/dense.hpp>
#include <pipeprop/layers/relu.hpp>

namespace pp = pipeprop;

using net = pp::network<pp::shape<1, 8, 8>, pp::conv2d<4, 3, 1, 1>, pp::relu, pp::dense<10>>;

std::size_t instantiate() { return pp::layer_stack<net, float>::parameter_count; }
