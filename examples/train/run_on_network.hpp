// examples/train/run_on_network.hpp: the definition of train::run_on_network (declared in mode.hpp). Included only
// by the generated per-network units (examples/train/unit.cpp.in), never by pipeprop_train.cpp.
#pragma once

#include "train/mode.hpp"

namespace train {

template <class M, class Net>
json_line run_on_network(M& m, const common_options& o) {
    return m.template run_network<Net>(o);
}

}  // namespace train
