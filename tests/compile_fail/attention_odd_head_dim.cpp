// Must not compile: causal_self_attention with 4 heads over D = 12 features: head dimension 3 is odd, and RoPE
// rotates pairs of features. Expected diagnostic: "the head dimension D / Heads must be even".
#include <pipeprop/layer_stack.hpp>
#include <pipeprop/layers/causal_self_attention.hpp>

namespace pp = pipeprop;

using net = pp::network<pp::shape<7, 12>, pp::causal_self_attention<4>>;

std::size_t instantiate() { return pp::layer_stack<net, float>::parameter_count; }
