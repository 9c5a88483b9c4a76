// examples/train/training_loop.cpp: the epoch loop of train/training_loop.hpp, compiled once for the three kinds of
// data (the per-network units see it as extern templates and adapt their engines to train::run_engine).
#include "train/training_loop.hpp"

namespace train {

template run_summary run_training_on(run_engine&, const common_options&, const image_source&, const std::string&);
template run_summary run_training_on(run_engine&, const common_options&, const placeholder_source&,
                                     const std::string&);
template run_summary run_training_on(run_engine&, const common_options&, const text_source&, const std::string&);

}  // namespace train
