// examples/train/mode_sgd.hpp: --mode sgd, the sequential (non-pipelined) reference: mini-batch momentum SGD with
// batch size B = --batch on pipeprop::sequential_trainer (mean loss over the batch; heavy-ball or Nesterov; L2).
#pragma once

#include <pipeprop/optim/sgd.hpp>
#include <pipeprop/sequential_trainer.hpp>

#include <string>

#include "train/mode.hpp"
#include "train/networks.hpp"
#include "train/training_loop.hpp"

namespace train {

/// Sequential mini-batch SGD. No options of its own.
class mode_sgd final : public mode {
public:
    static constexpr const char* mode_name = "sgd";

    [[nodiscard]] std::string name() const override { return mode_name; }
    [[nodiscard]] std::string description() const override {
        return "sequential mini-batch momentum SGD, batch size --batch (the reference)";
    }

    json_line run(const common_options& o) override {
        return with_network(o.network, [&]<class Net>() { return run_on_network<mode_sgd, Net>(*this, o); });
    }

    /// Training on network Net (instantiated per network in its own unit: run_on_network).
    template <class Net>
    json_line run_network(const common_options& o) {
        {
            const pipeprop::data::dataset_pair data = load_data<Net>(o);
            pipeprop::sequential_trainer_config c;
            c.max_batch = o.batch;
            c.optimizer = pipeprop::optim::sgd_config{
                .momentum = o.momentum, .weight_decay = o.weight_decay, .nesterov = o.nesterov};
            c.schedule = make_schedule(o, epoch_samples(o, data));
            c.seed = o.seed;
            pipeprop::sequential_trainer<Net> trainer(c);
            return run_training<Net>(trainer, o, data, mode_name).to_json();
        }
    }
};

}  // namespace train
