// pipeprop/checkpoint/network_tensors.hpp: a network's parameter block (or a buffer of the same layout: velocity,
// moments) and running-state block as named checkpoint tensors, one per layer tensor (names independent of any
// stage cut), and back.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/mp11/algorithm.hpp>

#include "pipeprop/checkpoint/content.hpp"
#include "pipeprop/checkpoint/signature.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/network.hpp"

namespace pipeprop {

namespace detail {
/// Calls f(offset, name, shape) for every parameter tensor of Net (value type T), in block order, its name
/// node_tensor_name(node, tensor, suffix).
template <network_type Net, class T, class F>
void for_each_parameter_tensor(std::string_view suffix, F&& f) {
    using stack = layer_stack<Net, T>;
    const network_signature sig = signature_of<Net, T>();
    for (std::size_t i = 0; i < sig.layer_count(); ++i) {
        std::size_t off = stack::parameter_offset[i];
        for (const auto& t : sig.layers[i]) {
            f(off, node_tensor_name(stack::node_names[i], t.name, suffix), t.shape);
            off += shape_size(t.shape);
        }
    }
}
inline void check_block(std::size_t got, std::size_t want, const char* who) {
    if (got != want)
        throw checkpoint_error(std::string("pipeprop::") + who + ": block has " + std::to_string(got) +
                               " values, the network " + std::to_string(want));
}

/// Calls f(offset, name, shape) for every tensor of the state block of layer_stack Stack, in block order.
template <class Stack, class F>
void for_each_state_tensor(F&& f) {
    boost::mp11::mp_for_each<boost::mp11::mp_iota_c<Stack::layer_count>>([&](auto I) {
        using L = typename Stack::template layer_type<I>;
        constexpr std::size_t n = state_count_v<L>;
        if constexpr (n > 0) {
            std::size_t off = Stack::state_offset[I];
            if constexpr (requires { L::state_tensors(); }) {
                constexpr auto tensors = L::state_tensors();
                static_assert(total_size(tensors) == n,
                              "pipeprop: a layer's state_tensors() sizes must add up to its state_count.");
                for (const auto& t : tensors) {
                    f(off, node_tensor_name(Stack::node_names[I], t.name),
                      std::vector<std::size_t>(t.dims.begin(), t.dims.begin() + t.rank));
                    off += t.size();
                }
            } else {
                f(off, node_tensor_name(Stack::node_names[I], "state"), std::vector<std::size_t>{n});
            }
        }
    });
}
}  // namespace detail

/// Adds the parameter block w [layer_stack<Net, T>::parameter_count] of network Net as one tensor per parameter
/// tensor, named node_tensor_name(node name, tensor, suffix) (e.g. suffix "velocity" for an optimizer state laid out
/// like the parameters). Throws checkpoint_error for a wrong block size or a duplicate name.
template <network_type Net, class T>
void add_network_tensors(checkpoint& c, std::span<const T> w, std::string_view suffix = {}) {
    detail::check_block(w.size(), layer_stack<Net, T>::parameter_count, "add_network_tensors");
    detail::for_each_parameter_tensor<Net, T>(suffix, [&](std::size_t off, std::string name, const auto& shape) {
        c.add_tensor<T>(name, shape, w.subspan(off, detail::shape_size(shape)));
    });
}

/// Reads a block laid out like Net's parameters from the tensors add_network_tensors wrote (same suffix) into
/// w [parameter_count]. Throws checkpoint_error naming the first missing or mismatching tensor.
template <network_type Net, class T>
void read_network_tensors(const checkpoint& c, std::span<T> w, std::string_view suffix = {}) {
    detail::check_block(w.size(), layer_stack<Net, T>::parameter_count, "read_network_tensors");
    detail::for_each_parameter_tensor<Net, T>(suffix, [&](std::size_t off, std::string name, const auto& shape) {
        c.read_tensor<T>(name, shape, w.subspan(off, detail::shape_size(shape)));
    });
}

/// Adds the running-state block s [layer_stack<Net, T>::state_count] of network Net's stateful layers
/// (layer_concept.hpp), one tensor per stateful node named "<node>.<state tensor>" (the layer's state_tensors(), or
/// "<node>.state" [state_count] when it names none). Nothing is added for a network without state. Throws
/// checkpoint_error for a wrong block size or a duplicate name.
template <network_type Net, class T>
void add_network_state(checkpoint& c, std::span<const T> s) {
    using stack = layer_stack<Net, T>;
    detail::check_block(s.size(), stack::state_count, "add_network_state");
    detail::for_each_state_tensor<stack>([&](std::size_t off, std::string name, std::vector<std::size_t> shape) {
        const std::size_t n = detail::shape_size(shape);
        c.add_tensor<T>(name, shape, s.subspan(off, n));
    });
}

/// Reads what add_network_state wrote into s [state_count]. Throws checkpoint_error naming the first missing or
/// mismatching tensor.
template <network_type Net, class T>
void read_network_state(const checkpoint& c, std::span<T> s) {
    using stack = layer_stack<Net, T>;
    detail::check_block(s.size(), stack::state_count, "read_network_state");
    detail::for_each_state_tensor<stack>([&](std::size_t off, std::string name, std::vector<std::size_t> shape) {
        const std::size_t n = detail::shape_size(shape);
        c.read_tensor<T>(name, shape, s.subspan(off, n));
    });
}

}  // namespace pipeprop
