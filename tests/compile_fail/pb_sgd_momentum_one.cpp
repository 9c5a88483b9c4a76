// Must not compile: a PB pipeline with momentum SGD and a policy whose compile-time momentum is 1 (the velocity never
// decays; the engine refuses momentum 1 at run time too). Expected diagnostic: "a policy's compile-time momentum of 1
// does not decay momentum SGD's velocity".
#include <pipeprop/layers/dense.hpp>
#include <pipeprop/pb/pipeline.hpp>

#include <ratio>

namespace pp = pipeprop;

using net = pp::network<pp::shape<8>, pp::dense<10>, pp::dense<3>>;
using pipeline = pp::pb::pipeline<net, pp::fine_grained<>, pp::pb::policy::spike_compensation<std::ratio<1>>>;

std::size_t instantiate() {
    pipeline p;
    return p.number_of_stages();
}
