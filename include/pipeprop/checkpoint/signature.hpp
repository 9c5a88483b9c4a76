// pipeprop/checkpoint/signature.hpp: what identifies the network a checkpoint belongs to (each layer's parameter
// tensor names and shapes), the exact tensor names of network nodes (layer_03.weight, layer_03.body_01.gamma) and
// checkpoint_error, the one exception of every checkpoint problem.
#pragma once

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <boost/mp11/algorithm.hpp>

#include "pipeprop/layer_stack.hpp"
#include "pipeprop/network.hpp"
#include "pipeprop/parameter_tensor.hpp"

namespace pipeprop {

/// Thrown for every checkpoint problem: missing / unreadable / corrupt files, unknown format version, a checkpoint
/// made for another network, a missing tensor or scalar, a failed save. what() names the directory or file.
class checkpoint_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Name and shape of one parameter tensor of a layer.
struct tensor_signature {
    std::string name;  ///< The tensor's name (parameter_tensor::name).
    std::vector<std::size_t> shape;  ///< The tensor's dimensions.
    friend bool operator==(const tensor_signature&, const tensor_signature&) = default;
};

/// Signature of a network: for each layer (in order) the names and shapes of its parameter tensors (empty for a
/// parameter-free layer). Two networks with equal signatures have interchangeable parameter blocks.
struct network_signature {
    std::vector<std::vector<tensor_signature>> layers;  ///< [layer][tensor]: the parameter tensors of every layer.
    [[nodiscard]] std::size_t layer_count() const noexcept { return layers.size(); }  ///< Number of layers.
    friend bool operator==(const network_signature&, const network_signature&) = default;
};

namespace detail {

inline std::string shape_to_string(const std::vector<std::size_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i > 0) s += ',';
        s += std::to_string(shape[i]);
    }
    s += ']';
    return s;
}

inline std::string layer_to_string(const std::vector<tensor_signature>& layer) {
    if (layer.empty()) return "no parameters";
    std::string s;
    for (const auto& t : layer) {
        if (!s.empty()) s += ' ';
        s += t.name;
        s += shape_to_string(t.shape);
    }
    return s;
}

inline std::size_t shape_size(const std::vector<std::size_t>& shape) {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

/// Product of the dimensions, or false when it overflows std::size_t.
inline bool checked_shape_size(const std::vector<std::size_t>& shape, std::size_t& n) noexcept {
    n = 1;
    for (auto d : shape)
        if (__builtin_mul_overflow(n, d, &n)) return false;
    return true;
}

/// Tensor and scalar names: non-empty, [A-Za-z0-9_.-], not starting with '.', not "manifest".
inline bool valid_name(std::string_view n) {
    if (n.empty() || n.front() == '.' || n == "manifest" || n.size() > 200) return false;
    return std::all_of(n.begin(), n.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
               c == '-';
    });
}

}  // namespace detail

/// Human-readable description of the first difference between the signature stored in a checkpoint and the one
/// expected; empty when they are equal.
[[nodiscard]] inline std::string describe_signature_mismatch(const network_signature& stored,
                                                             const network_signature& expected) {
    if (stored.layer_count() != expected.layer_count())
        return "the checkpoint was made for a network of " + std::to_string(stored.layer_count()) +
               " layers, this network has " + std::to_string(expected.layer_count()) + " layers";
    for (std::size_t i = 0; i < stored.layer_count(); ++i)
        if (stored.layers[i] != expected.layers[i])
            return "layer " + std::to_string(i) + " differs: the checkpoint has " +
                   detail::layer_to_string(stored.layers[i]) + ", this network has " +
                   detail::layer_to_string(expected.layers[i]);
    return {};
}

/// Parameter tensors of a bound layer L: L::parameter_tensors() when declared, else one tensor "parameters"
/// [parameter_count] (none for a parameter-free layer).
template <class L>
[[nodiscard]] std::vector<tensor_signature> layer_tensor_signatures() {
    std::vector<tensor_signature> out;
    if constexpr (L::parameter_count > 0) {
        if constexpr (requires { L::parameter_tensors(); }) {
            constexpr auto tensors = L::parameter_tensors();
            static_assert(total_size(tensors) == L::parameter_count,
                          "pipeprop: a layer's parameter_tensors() sizes must add up to its parameter_count.");
            for (const auto& t : tensors)
                out.push_back({std::string(t.name), std::vector<std::size_t>(t.dims.begin(), t.dims.begin() + t.rank)});
        } else {
            out.push_back({"parameters", {L::parameter_count}});
        }
    }
    return out;
}

/// Signature of network Net bound to value type T (see network_signature).
template <network_type Net, class T = float>
[[nodiscard]] network_signature signature_of() {
    using stack = layer_stack<Net, T>;
    network_signature s;
    s.layers.resize(stack::layer_count);
    boost::mp11::mp_for_each<boost::mp11::mp_iota_c<stack::layer_count>>([&](auto I) {
        s.layers[I] = layer_tensor_signatures<typename stack::template layer_type<I>>();
    });
    return s;
}

/// Name of a tensor of network node `node` (its hierarchical name, layer_stack::node_names: "layer_03" or
/// "layer_03.body_01"): "<node>.<tensor>[.<suffix>]", e.g. "layer_03.body_01.weight.velocity". For a network without
/// blocks this is network_tensor_name(i, layer_count, tensor, suffix).
[[nodiscard]] inline std::string node_tensor_name(std::string_view node, std::string_view tensor,
                                                  std::string_view suffix = {}) {
    std::string name(node);
    name += '.';
    name += tensor;
    if (!suffix.empty()) {
        name += '.';
        name += suffix;
    }
    return name;
}

/// Name of a network tensor in a checkpoint: "layer_<i>.<tensor>" with i zero-padded to at least two digits (to the
/// digits of layer_count - 1 when more), plus ".<suffix>" when suffix is not empty, e.g. "layer_03.weight",
/// "layer_03.weight.velocity". Exact: distinct (layer, tensor, suffix) triples give distinct names.
[[nodiscard]] inline std::string network_tensor_name(std::size_t layer, std::size_t layer_count,
                                                     std::string_view tensor, std::string_view suffix = {}) {
    const std::size_t width = std::max<std::size_t>(2, std::to_string(layer_count > 0 ? layer_count - 1 : 0).size());
    const std::string idx = std::to_string(layer);
    std::string node = "layer_";
    if (idx.size() < width) node.append(width - idx.size(), '0');
    node += idx;
    return node_tensor_name(node, tensor, suffix);
}

}  // namespace pipeprop
