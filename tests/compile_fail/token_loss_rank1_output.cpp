// Must not compile: a token loss (token_cross_entropy over [L, V]) on a network whose output is rank 1 (a vector of
// class logits). Expected diagnostic: "the loss does not fit the network's output: their ranks differ".
#include <pipeprop/layers/dense.hpp>
#include <pipeprop/loss/token_cross_entropy.hpp>
#include <pipeprop/sequential_trainer.hpp>

namespace pp = pipeprop;

using net = pp::network<pp::shape<8>, pp::dense<10>>;
using trainer = pp::sequential_trainer<net, float, pp::token_cross_entropy<float, 2, 5>>;

std::size_t instantiate() { return trainer::parameter_count; }
