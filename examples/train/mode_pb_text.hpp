// examples/train/mode_pb_text.hpp: --mode pb on the text networks (llama-tiny, llama-4x128): the definition of
// mode_pb::run_text, included by train/mode_pb.hpp after the class (not on its own). Both optimizers' instantiations
// are compiled in the network's unit (examples/pipeprop_train.cmake), with its other modes.
#pragma once

#include <fmt/format.h>

#include <string>

#include "train/mode_pb.hpp"

namespace train {

// Defined outside the class, so that it is not inline: the extern template declaration below then keeps the AdamW
// instantiation out of the llama-tiny unit (an inline function is instantiated wherever it is called, for inlining,
// extern or not).
template <class Net, class Optimizer>
json_line mode_pb::run_text(const common_options& o) {
    namespace pol = pipeprop::pb::policy;
    const std::string m = mitigation(o);
    using out = typename pipeprop::layer_stack<Net, float>::output_shape;
    constexpr std::size_t length = out::dims[0], vocabulary = out::dims[1];
    using loss = pb_loss_t<Net>;
    const pipeprop::data::text_dataset data = load_text_data(o, length, vocabulary);
    if constexpr (pipeprop::pb::is_adamw<Optimizer, float>) {
        common_options oa = o;  // AdamW's own learning-rate default, as in --mode sgd
        if (!o.lr_given) oa.lr = mode_sgd::default_adamw_lr;
        oa.momentum = 0.0;
        const double b1 = number_of(beta1_opt_, beta1_), b2 = number_of(beta2_opt_, beta2_),
                     eps = number_of(eps_opt_, eps_);
        const pipeprop::optim::adamw_config c{.beta1 = b1, .beta2 = b2, .eps = eps};
        note(o, fmt::format("optimizer: AdamW, lr {:g}, betas ({:g}, {:g}), eps {:g}, decoupled weight decay {:g}",
                            oa.lr, b1, b2, eps, o.weight_decay));
        json_line j = m == "none"       ? run_with<Net, pol::none, loss, Optimizer>(oa, data, c)
                      : m == "stash"    ? run_with<Net, pol::weight_stashing, loss, Optimizer>(oa, data, c)
                      : m == "lwp_opt"  ? run_with<Net, pb_policies::lwp_opt, loss, Optimizer>(oa, data, c)
                      : m == "nesterov" ? run_with<Net, pb_policies::nesterov, loss, Optimizer>(oa, data, c)
                      : m == "2bw"      ? run_with<Net, pb_policies::two_bw, loss, Optimizer>(oa, data, c)
                                        : run_with<Net, pol::pipemare, loss, Optimizer>(oa, data, c);
        return j.add("optimizer", "adamw").add("beta1", b1).add("beta2", b2).add("eps", eps);
    } else {
        return run_policy<Net, loss>(o, m, data).add("optimizer", "sgd");
    }
}

}  // namespace train
