// The main program's --mode pb on llama-tiny with AdamW (train/mode_pb.hpp: mode_pb::run_text), a translation unit of
// its own so that the unit of --mode pb on llama-tiny (momentum SGD, six mitigations) does not also hold these.
#include "train/mode_pb.hpp"

// The stage code is compiled in the unit of llama-tiny's executors (train/pb_executors.hpp).
extern template std::vector<pipeprop::stage_program<pipeprop::layer_stack<train::llama_tiny, float>>>
train::pb_stage_programs<train::llama_tiny>(const std::string&);

template train::json_line train::mode_pb::run_text<train::llama_tiny, pipeprop::optim::adamw<float>>(
    const train::common_options&);
