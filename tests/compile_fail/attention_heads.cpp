// Must not compile: causal_self_attention with 5 heads over D = 12 features (12 is not divisible by 5).
// Expected diagnostic: "the number of features D must be divisible by the number of heads".
#include <pipeprop/layer_stack.hpp>
#include <pipeprop/layers/causal_self_attention.hpp>

namespace pp = pipeprop;

using net = pp::network<pp::shape<7, 12>, pp::causal_self_attention<3>, pp::causal_self_attention<5>>;

std::size_t instantiate() { return pp::layer_stack<net, float>::parameter_count; }
