// pipeprop/optim/optimizer_policy.hpp: the optimizer-policy contract of the sequential reference trainer and
// the engines: the state an optimizer keeps over one parameter block, how it steps, and what of it a checkpoint holds.
//
// An optimizer policy O (optim::sgd<T>: momentum SGD, heavy-ball or Nesterov, L2; optim::adamw<T>: AdamW with
// decoupled weight decay) provides:
//
//   using value_type  = T;                          // the parameters' type
//   using config_type = ...;                        // what stays fixed for a run (sgd_config: nesterov;
//                                                   // adamw_config: betas, eps)
//   static constexpr const char* name;              // "sgd", "adamw": stored in checkpoints as scalar "optimizer"
//   static constexpr std::array<const char*, K> state_buffer_names;  // K >= 1 per-parameter state buffers, e.g.
//                                                   // {"velocity"} or {"first_moment", "second_moment"}
//   O(std::size_t n, const config_type& c);         // zero state for n parameters; throws std::invalid_argument
//                                                   // for an invalid c (c.validate())
//   const config_type& config() const;
//   void check(const hyperparameters<double>& h) const;  // throws std::invalid_argument naming the field unless
//                                                   // an update with h is defined (optim::validate and the
//                                                   // optimizer's own limits: SGD momentum < 1, AdamW momentum 0)
//   void step(std::span<T> w, std::span<const T> g, const hyperparameters<double>& h);  // one update of w [n] with
//                                                   // the gradient g [n] of the MEAN batch loss and the update's
//                                                   // learning rate, momentum and weight decay h (scheduled by the
//                                                   // caller, optim/hyperparameters.hpp); no allocation; throws
//                                                   // std::invalid_argument for sizes other than n or an h check
//                                                   // rejects, changing nothing then
//   std::uint64_t step_count() const;  void set_step_count(std::uint64_t);  // updates applied (restored on resume)
//   std::span<T> state_buffer(std::size_t k);  std::span<const T> state_buffer(std::size_t k) const;  // [n], k < K
//
// A checkpoint holds every state buffer k as tensors "<node>.<tensor>.<state_buffer_names[k]>" laid out like the
// parameters, plus the step count (scalar step_count, from which AdamW's bias corrections follow): restoring them
// all makes a resumed run bit-identical to a straight one.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "pipeprop/optim/hyperparameters.hpp"

namespace pipeprop::optim {

/// The optimizer-policy concept (see the file comment).
template <class O>
concept optimizer_policy =
    requires {
        typename O::value_type;
        typename O::config_type;
        { O::name } -> std::convertible_to<std::string_view>;
        { O::state_buffer_names.size() } -> std::convertible_to<std::size_t>;
    } && std::is_floating_point_v<typename O::value_type> && (O::state_buffer_names.size() >= 1) &&
    std::constructible_from<O, std::size_t, const typename O::config_type&> &&
    requires(O& o, const O& co, std::span<typename O::value_type> w, std::span<const typename O::value_type> g,
             const hyperparameters<double>& h, std::size_t k, std::uint64_t steps) {
        { co.config() } -> std::convertible_to<const typename O::config_type&>;
        co.check(h);
        o.step(w, g, h);
        { co.step_count() } -> std::convertible_to<std::uint64_t>;
        o.set_step_count(steps);
        { o.state_buffer(k) } -> std::same_as<std::span<typename O::value_type>>;
        { co.state_buffer(k) } -> std::same_as<std::span<const typename O::value_type>>;
    };

}  // namespace pipeprop::optim
