// Must not compile: a PB pipeline with spike compensation (defined on momentum SGD's velocity, PB-paper §4) and the
// AdamW optimizer. Expected diagnostic: "spike compensation and the velocity form of linear weight prediction are
// defined for momentum SGD only".
#include <pipeprop/layers/dense.hpp>
#include <pipeprop/optim/adamw.hpp>
#include <pipeprop/pb/pipeline.hpp>

namespace pp = pipeprop;

using net = pp::network<pp::shape<8>, pp::dense<10>, pp::dense<3>>;
using pipeline = pp::pb::pipeline<net, pp::fine_grained<>, pp::pb::policy::spike_compensation<>, float,
                              pp::softmax_cross_entropy<float, 3>, pp::optim::adamw<float>>;

std::size_t instantiate() {
    pipeline p;
    return p.number_of_stages();
}
