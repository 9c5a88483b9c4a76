// pipeprop/checkpoint/content.hpp: the content of a checkpoint in memory: network signature, named tensors (float32
// or float64, any shape) and key/value scalars; require_signature.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "pipeprop/checkpoint/signature.hpp"

namespace pipeprop {

/// One tensor of a checkpoint: exact name, shape (row-major; may be rank 0) and values (float32 or float64).
struct checkpoint_tensor {
    std::string name;  ///< Exact name, the key add_tensor stored it under.
    std::vector<std::size_t> shape;  ///< Row-major dimensions (empty: a scalar).
    /// The values, float32 or float64, product(shape) of them.
    std::variant<std::vector<float>, std::vector<double>> values;

    /// "float32" or "float64" (the numpy dtype of its .npy file).
    [[nodiscard]] std::string_view dtype() const noexcept {
        return std::holds_alternative<std::vector<float>>(values) ? "float32" : "float64";
    }
};

/// Content of a checkpoint: network signature, named tensors (unique, exact names, in insertion order) and scalars
/// (unique keys; values stored as text; numbers round-trip exactly). Not thread-safe; setup-time object (allocates).
class checkpoint {
public:
    /// Signature of the network the state belongs to (empty: not tied to a network).
    network_signature signature;

    /// Adds tensor `name` [shape] with values [product of shape] (T = float or double: stored as float32 / float64).
    /// Throws checkpoint_error for an invalid or duplicate name (names: [A-Za-z0-9_.-], not starting with '.') or a
    /// value count that does not match the shape.
    template <class T>
    void add_tensor(std::string name, std::vector<std::size_t> shape, std::span<const T> values) {
        static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                      "pipeprop::checkpoint: tensors are float or double.");
        if (!detail::valid_name(name))
            throw checkpoint_error("pipeprop::checkpoint: invalid tensor name '" + name +
                                   "' (use letters, digits, '_', '.', '-'; not starting with '.')");
        if (index_.contains(name)) throw checkpoint_error("pipeprop::checkpoint: duplicate tensor name '" + name + "'");
        if (detail::shape_size(shape) != values.size())
            throw checkpoint_error("pipeprop::checkpoint: tensor '" + name + "' has " + std::to_string(values.size()) +
                                   " values but shape " + detail::shape_to_string(shape));
        index_.emplace(name, tensors_.size());
        tensors_.push_back({std::move(name), std::move(shape), std::vector<T>(values.begin(), values.end())});
    }

    /// True when a tensor named `name` is stored.
    [[nodiscard]] bool has_tensor(const std::string& name) const { return index_.contains(name); }
    /// All tensors, in the order they were added.
    [[nodiscard]] const std::vector<checkpoint_tensor>& tensors() const noexcept { return tensors_; }

    /// The tensor with exactly this name. Throws checkpoint_error naming it when absent.
    [[nodiscard]] const checkpoint_tensor& tensor(const std::string& name) const {
        const auto it = index_.find(name);
        if (it == index_.end()) throw checkpoint_error("pipeprop::checkpoint: no tensor named '" + name + "'");
        return tensors_[it->second];
    }

    /// Copies tensor `name` into out. Throws checkpoint_error when absent, when its shape differs from `shape`, when
    /// it is stored in the other floating-point type, or when it holds a NaN or infinite value (no trainer saves
    /// those: a diverged run stops before its checkpoint is written, so such a file is corrupt).
    template <class T>
    void read_tensor(const std::string& name, const std::vector<std::size_t>& shape, std::span<T> out) const {
        const checkpoint_tensor& t = tensor(name);
        if (t.shape != shape)
            throw checkpoint_error("pipeprop::checkpoint: tensor '" + name + "' has shape " +
                                   detail::shape_to_string(t.shape) + ", expected " + detail::shape_to_string(shape));
        const auto* v = std::get_if<std::vector<T>>(&t.values);
        if (v == nullptr)
            throw checkpoint_error("pipeprop::checkpoint: tensor '" + name + "' is stored as " +
                                   std::string(t.dtype()) + ", expected " +
                                   (std::is_same_v<T, float> ? "float32" : "float64"));
        if (v->size() != out.size())
            throw checkpoint_error("pipeprop::checkpoint: tensor '" + name + "' has " + std::to_string(v->size()) +
                                   " values, the destination " + std::to_string(out.size()));
        const auto bad = std::find_if(v->begin(), v->end(), [](T x) { return !std::isfinite(x); });
        if (bad != v->end())
            throw checkpoint_error("pipeprop::checkpoint: tensor '" + name + "' holds " +
                                   (std::isnan(*bad) ? "NaN" : "an infinite value") + " at index " +
                                   std::to_string(bad - v->begin()) +
                                   " (a trainer never saves one: the checkpoint is corrupt)");
        std::copy(v->begin(), v->end(), out.begin());
    }

    /// Sets scalar `key` (overwrites). Values may not contain line breaks. Throws checkpoint_error for an invalid
    /// key (same rule as tensor names) or value.
    void set_scalar(const std::string& key, const std::string& value) {
        if (!detail::valid_name(key)) throw checkpoint_error("pipeprop::checkpoint: invalid scalar key '" + key + "'");
        if (value.find_first_of("\r\n") != std::string::npos)
            throw checkpoint_error("pipeprop::checkpoint: scalar '" + key + "' contains a line break");
        scalars_[key] = value;
    }
    /// As above, from a C string.
    void set_scalar(const std::string& key, const char* value) { set_scalar(key, std::string(value)); }
    /// Integers and floating-point values are stored in their shortest exact text form (std::to_chars).
    template <class N>
        requires std::is_arithmetic_v<N>
    void set_scalar(const std::string& key, N value) {
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof buf, value);
        set_scalar(key, std::string(buf, r.ptr));
    }

    /// True when a scalar `key` is stored.
    [[nodiscard]] bool has_scalar(const std::string& key) const { return scalars_.contains(key); }
    /// All scalars, by key.
    [[nodiscard]] const std::map<std::string, std::string>& scalars() const noexcept { return scalars_; }

    /// Scalar `key` as text. Throws checkpoint_error naming the key when absent.
    [[nodiscard]] const std::string& scalar(const std::string& key) const {
        const auto it = scalars_.find(key);
        if (it == scalars_.end()) throw checkpoint_error("pipeprop::checkpoint: no scalar named '" + key + "'");
        return it->second;
    }
    /// Scalar `key` parsed as N (integer or floating point, exact). Throws checkpoint_error when absent or when the
    /// whole text is not a number of type N.
    template <class N>
        requires std::is_arithmetic_v<N>
    [[nodiscard]] N scalar_as(const std::string& key) const {
        const std::string& s = scalar(key);
        N v{};
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (r.ec != std::errc{} || r.ptr != s.data() + s.size())
            throw checkpoint_error("pipeprop::checkpoint: scalar '" + key + "' = '" + s + "' is not a valid " +
                                   (std::is_integral_v<N> ? "integer" : "number"));
        return v;
    }

private:
    std::vector<checkpoint_tensor> tensors_;
    std::map<std::string, std::size_t> index_;
    std::map<std::string, std::string> scalars_;
};

/// Throws checkpoint_error "<where>: checkpoint does not fit this network: <first difference>" unless the
/// checkpoint's signature equals `expected`.
inline void require_signature(const checkpoint& c, const network_signature& expected, const std::string& where) {
    const std::string diff = describe_signature_mismatch(c.signature, expected);
    if (!diff.empty()) throw checkpoint_error(where + ": checkpoint does not fit this network: " + diff);
}

}  // namespace pipeprop
