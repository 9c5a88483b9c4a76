// Must not compile: stage split points that are not strictly increasing (split_at<3, 2>).
// Expected diagnostic: "split points must be strictly increasing".
#include <pipeprop/pipeline_layout.hpp>
#include <pipeprop/layers/dense.hpp>
#include <pipeprop/layers/relu.hpp>

namespace pp = pipeprop;

using net = pp::network<pp::shape<8>, pp::dense<8>, pp::relu, pp::dense<8>, pp::relu, pp::dense<2>>;

std::size_t instantiate() { return pp::pipeline_layout<net, pp::split_at<3, 2>>::stage_count; }
