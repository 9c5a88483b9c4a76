// examples/train/mode_sgd.hpp: --mode sgd, the sequential (non-pipelined) reference on pipeprop::sequential_trainer
// with batch size B = --batch (mean loss over the batch), the loss and the optimizer as the trainer's policies:
//   image networks: softmax cross-entropy, momentum SGD (heavy-ball or Nesterov; --weight-decay is L2);
//   text networks (llama-tiny): token_cross_entropy<float, L, 256> over next-token sequences of the text corpus
//     (mean over the batch's tokens), AdamW by default (--optimizer adamw: decoupled --weight-decay, --beta1,
//     --beta2, --eps; --lr defaults to 3e-3 there) or --optimizer sgd (momentum SGD as above).
// Options of this mode: --optimizer auto|sgd|adamw (auto: adamw for text networks, sgd for image networks; AdamW
// on the image networks is not offered yet), --beta1, --beta2, --eps. The JSON result gains optimizer (and for
// AdamW beta1, beta2, eps).
#pragma once

#include <fmt/format.h>

#include <pipeprop/loss/token_cross_entropy.hpp>
#include <pipeprop/optim/adamw.hpp>
#include <pipeprop/optim/sgd.hpp>
#include <pipeprop/sequential_trainer.hpp>

#include <cmath>
#include <cstdio>
#include <string>

#include "train/mode.hpp"
#include "train/networks.hpp"
#include "train/training_loop.hpp"

namespace train {

/// Sequential mini-batch training (the reference).
class mode_sgd final : public mode {
public:
    ~mode_sgd() override;  // pipeprop_train.cpp (the key function: see mode::~mode)
    static constexpr const char* mode_name = "sgd";
    /// Learning rate of AdamW on a text network when --lr is not given.
    static constexpr double default_adamw_lr = 3e-3;
    /// AdamW's defaults (shared with --mode sync): torch.optim.AdamW's beta1 and eps; beta2 below torch's 0.999 for
    /// short runs of a small model (as nanoGPT's character models).
    static constexpr double default_beta1 = 0.9, default_beta2 = 0.99, default_eps = 1e-8;

    [[nodiscard]] std::string name() const override { return mode_name; }
    [[nodiscard]] std::string description() const override {
        return "sequential mini-batch training, batch size --batch (the reference): momentum SGD, or AdamW for "
               "the text networks";
    }
    [[nodiscard]] bool supports_text_networks() const override { return true; }

    void add_options(CLI::Option_group& g) override {
        g.add_option("--optimizer", optimizer_,
                     "Optimizer: sgd (momentum SGD; --momentum, --nesterov, --weight-decay as L2), adamw (AdamW, "
                     "decoupled --weight-decay, --beta1/--beta2/--eps; --lr default 3e-3; text networks only for now), "
                     "auto (adamw for the text networks, sgd otherwise)")
            ->check(CLI::IsMember({"auto", "sgd", "adamw"}))
            ->capture_default_str();
        g.add_option("--beta1", beta1_, "AdamW: decay of the first moment, in [0, 1)")
            ->check(momentum_range())
            ->capture_default_str();
        g.add_option("--beta2", beta2_, "AdamW: decay of the second moment, in [0, 1)")
            ->check(momentum_range())
            ->capture_default_str();
        g.add_option("--eps", eps_, "AdamW: added to sqrt(v_hat), > 0")
            ->check(finite_number())
            ->check(CLI::Range(1e-30, 1.0))
            ->capture_default_str();
    }

    void validate(const common_options& o) const override {
        const bool text = is_text_network(o.network);
        if (optimizer_ == "adamw" && !text)
            throw CLI::ValidationError("--optimizer", "adamw is not available for the image networks yet (only for "
                                                      "the text networks); use --optimizer sgd");
        if (!std::isfinite(eps_)) throw CLI::ValidationError("--eps", "must be a finite number");
        if (text && optimizer_ != "sgd") reject_sgd_options_with_adamw(o);
    }

    json_line run(const common_options& o) override;  // in pipeprop_train.cpp (per-network code: see there)

    /// Training on network Net (instantiated per network in its own unit: run_on_network).
    template <class Net>
    json_line run_network(const common_options& o) {
        if constexpr (is_sequence_model<Net>) {
            return run_text<Net>(o);
        } else {
            const pipeprop::data::dataset_pair data = load_data<Net>(o);
            pipeprop::sequential_trainer_config c;
            c.max_batch = o.batch;
            c.optimizer = sgd_config(o);
            c.schedule = make_schedule(o, epoch_samples(o, data));
            c.momentum = o.momentum;
            c.weight_decay = o.weight_decay;
            c.seed = o.seed;
            set_activity(fmt::format("building the --mode sgd trainer (batch {})", o.batch));
            pipeprop::sequential_trainer<Net> trainer(c);
            json_line j = run_training<Net>(trainer, o, data, mode_name).to_json();
            j.add("optimizer", "sgd");
            return j;
        }
    }

private:
    static pipeprop::optim::sgd_config sgd_config(const common_options& o) {
        return {.nesterov = o.nesterov};
    }

    /// A sequence model on the text corpus: next-token sequences of the network's length, byte vocabulary, token loss.
    template <class Net>
    json_line run_text(const common_options& o) {
        using out = typename pipeprop::layer_stack<Net, float>::output_shape;
        constexpr std::size_t length = out::dims[0], vocabulary = out::dims[1];
        using loss = pipeprop::token_cross_entropy<float, length, vocabulary>;
        const pipeprop::data::text_dataset data = load_text_data(o, length, vocabulary);
        const std::size_t epoch_size = epoch_samples(o, data);
        if (optimizer_ == "sgd") {
            pipeprop::sequential_trainer_config c;
            c.max_batch = o.batch;
            c.optimizer = sgd_config(o);
            c.schedule = make_schedule(o, epoch_size);
            c.momentum = o.momentum;
            c.weight_decay = o.weight_decay;
            c.seed = o.seed;
            set_activity(fmt::format("building the --mode sgd trainer (batch {})", o.batch));
            pipeprop::sequential_trainer<Net, float, loss> trainer(c);
            json_line j = run_training<Net>(trainer, o, data, mode_name).to_json();
            j.add("optimizer", "sgd");
            return j;
        }
        common_options oa = o;  // AdamW's own learning-rate default
        if (!o.lr_given) oa.lr = default_adamw_lr;
        oa.momentum = 0.0;  // AdamW's momentum is beta1 (the result line reports what ran)
        pipeprop::basic_sequential_trainer_config<pipeprop::optim::adamw_config> c;
        c.max_batch = o.batch;
        c.optimizer = {.beta1 = beta1_, .beta2 = beta2_, .eps = eps_};
        c.schedule = make_schedule(oa, epoch_size);
        c.momentum = 0.0;  // AdamW's momentum is beta1
        c.weight_decay = o.weight_decay;
        c.seed = o.seed;
        note(o, fmt::format("optimizer: AdamW, lr {:g}, betas ({:g}, {:g}), eps {:g}, decoupled weight decay {:g}",
                            oa.lr, beta1_, beta2_, eps_, o.weight_decay));
        set_activity(fmt::format("building the --mode sgd trainer (batch {})", o.batch));
        pipeprop::sequential_trainer<Net, float, loss, pipeprop::optim::adamw<float>> trainer(c);
        json_line j = run_training<Net>(trainer, oa, data, mode_name).to_json();
        j.add("optimizer", "adamw").add("beta1", beta1_).add("beta2", beta2_).add("eps", eps_);
        return j;
    }

    std::string optimizer_ = "auto";
    double beta1_ = default_beta1;
    double beta2_ = default_beta2;
    double eps_ = default_eps;
};

}  // namespace train
