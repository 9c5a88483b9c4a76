// pipeprop/checkpoint.hpp: checkpoints as a directory of .npy files (xtensor's npy I/O, readable by numpy.load)
// plus a small text manifest, written atomically.
//
// Generic content: a list of named tensors (float32 or float64, any shape) and key/value scalars, plus the signature
// of the network it belongs to (layer count; each layer's parameter tensor names and shapes). Trainers and pipeline
// engines store their state through it (parameters, velocities, step counts, data position, per-stage extras).
//
// Layout of a checkpoint directory <dir>:
//   manifest.txt                      format tag, signature, tensor list, scalars (see save_checkpoint)
//   <tensor name>.npy                 one file per tensor, e.g. layer_03.weight.npy, layer_03.weight.velocity.npy
// Names are exact keys: lookups never match prefixes ("layer_1" never matches "layer_10"; network tensor names use
// zero-padded layer indices, so the two cannot even share a prefix with a dot after it).
//
// Atomicity (shared/docs/pitfalls.md item 10): save_checkpoint writes everything into <dir>.tmp-<pid> (files
// fsync'ed, manifest last), then swaps it with <dir> in one rename (renameat2 RENAME_EXCHANGE on Linux) and removes
// the old content. A failed or interrupted save leaves the previous checkpoint intact. A process killed during a save
// leaves its <dir>.tmp-<pid> (or <dir>.old-<pid>) behind: the next save removes those of processes that no longer
// exist (kill(pid, 0) fails with ESRCH), never those of a live process (a concurrent writer). This assumes the writers
// of one checkpoint path share a PID namespace (one host); a leftover of a reused pid is kept until that pid ends.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <xtensor/xadapt.hpp>
#include <xtensor/xnpy.hpp>

#include <boost/mp11/algorithm.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
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
    std::string name;
    std::vector<std::size_t> shape;
    friend bool operator==(const tensor_signature&, const tensor_signature&) = default;
};

/// Signature of a network: for each layer (in order) the names and shapes of its parameter tensors (empty for a
/// parameter-free layer). Two networks with equal signatures have interchangeable parameter blocks.
struct network_signature {
    std::vector<std::vector<tensor_signature>> layers;
    [[nodiscard]] std::size_t layer_count() const noexcept { return layers.size(); }
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

/// One tensor of a checkpoint: exact name, shape (row-major; may be rank 0) and values (float32 or float64).
struct checkpoint_tensor {
    std::string name;
    std::vector<std::size_t> shape;
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

    [[nodiscard]] bool has_tensor(const std::string& name) const { return index_.contains(name); }
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
    void set_scalar(const std::string& key, const char* value) { set_scalar(key, std::string(value)); }
    /// Integers and floating-point values are stored in their shortest exact text form (std::to_chars).
    template <class N>
        requires std::is_arithmetic_v<N>
    void set_scalar(const std::string& key, N value) {
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof buf, value);
        set_scalar(key, std::string(buf, r.ptr));
    }

    [[nodiscard]] bool has_scalar(const std::string& key) const { return scalars_.contains(key); }
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

namespace detail {
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
    using stack = layer_stack<Net, T>;
    if (w.size() != stack::parameter_count)
        throw checkpoint_error("pipeprop::add_network_tensors: block has " + std::to_string(w.size()) +
                               " values, the network " + std::to_string(stack::parameter_count));
    const network_signature sig = signature_of<Net, T>();
    for (std::size_t i = 0; i < sig.layer_count(); ++i) {
        std::size_t off = stack::parameter_offset[i];
        for (const auto& t : sig.layers[i]) {
            const std::size_t n = detail::shape_size(t.shape);
            c.add_tensor<T>(node_tensor_name(stack::node_names[i], t.name, suffix), t.shape, w.subspan(off, n));
            off += n;
        }
    }
}

/// Reads a block laid out like Net's parameters from the tensors add_network_tensors wrote (same suffix) into
/// w [parameter_count]. Throws checkpoint_error naming the first missing or mismatching tensor.
template <network_type Net, class T>
void read_network_tensors(const checkpoint& c, std::span<T> w, std::string_view suffix = {}) {
    using stack = layer_stack<Net, T>;
    if (w.size() != stack::parameter_count)
        throw checkpoint_error("pipeprop::read_network_tensors: block has " + std::to_string(w.size()) +
                               " values, the network " + std::to_string(stack::parameter_count));
    const network_signature sig = signature_of<Net, T>();
    for (std::size_t i = 0; i < sig.layer_count(); ++i) {
        std::size_t off = stack::parameter_offset[i];
        for (const auto& t : sig.layers[i]) {
            const std::size_t n = detail::shape_size(t.shape);
            c.read_tensor<T>(node_tensor_name(stack::node_names[i], t.name, suffix), t.shape, w.subspan(off, n));
            off += n;
        }
    }
}

/// Adds the running-state block s [layer_stack<Net, T>::state_count] of network Net's stateful layers
/// (layer_concept.hpp), one tensor per stateful node named "<node>.<state tensor>" (the layer's state_tensors(), or
/// "<node>.state" [state_count] when it names none). Nothing is added for a network without state. Throws
/// checkpoint_error for a wrong block size or a duplicate name.
template <network_type Net, class T>
void add_network_state(checkpoint& c, std::span<const T> s) {
    using stack = layer_stack<Net, T>;
    if (s.size() != stack::state_count)
        throw checkpoint_error("pipeprop::add_network_state: block has " + std::to_string(s.size()) +
                               " values, the network " + std::to_string(stack::state_count));
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
    if (s.size() != stack::state_count)
        throw checkpoint_error("pipeprop::read_network_state: block has " + std::to_string(s.size()) +
                               " values, the network " + std::to_string(stack::state_count));
    detail::for_each_state_tensor<stack>([&](std::size_t off, std::string name, std::vector<std::size_t> shape) {
        const std::size_t n = detail::shape_size(shape);
        c.read_tensor<T>(name, shape, s.subspan(off, n));
    });
}

namespace detail {

inline constexpr std::string_view checkpoint_format_tag = "pipeprop-checkpoint";
inline constexpr int checkpoint_format_version = 1;
inline constexpr const char* manifest_name = "manifest.txt";

/// Writes bytes to path and fsyncs the file. Throws checkpoint_error naming the file and errno's text.
inline void write_file_synced(const std::filesystem::path& path, std::string_view bytes) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw checkpoint_error(path.string() + ": cannot create file: " + std::strerror(errno));
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const std::string err = std::strerror(errno);
            ::close(fd);
            throw checkpoint_error(path.string() + ": write failed: " + err);
        }
        done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) {
        const std::string err = std::strerror(errno);
        ::close(fd);
        throw checkpoint_error(path.string() + ": fsync failed: " + err);
    }
    if (::close(fd) != 0) throw checkpoint_error(path.string() + ": close failed: " + std::strerror(errno));
}

/// fsync of a directory (makes renames and new entries durable); best effort.
inline void sync_directory(const std::filesystem::path& dir) noexcept {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)::fsync(fd);
        ::close(fd);
    }
}

template <class T>
std::string npy_bytes(const checkpoint_tensor& t, const std::vector<T>& v) {
    auto view = xt::adapt(v.data(), v.size(), xt::no_ownership(), t.shape);
    return xt::dump_npy(view);
}

inline std::string manifest_text(const checkpoint& c) {
    std::ostringstream m;
    m << checkpoint_format_tag << ' ' << checkpoint_format_version << '\n';
    m << "layers " << c.signature.layer_count() << '\n';
    for (std::size_t i = 0; i < c.signature.layer_count(); ++i) {
        m << "layer " << i;
        for (const auto& t : c.signature.layers[i]) m << ' ' << t.name << shape_to_string(t.shape);
        m << '\n';
    }
    for (const auto& t : c.tensors()) m << "tensor " << t.name << ' ' << t.dtype() << ' ' << shape_to_string(t.shape) << '\n';
    for (const auto& [k, v] : c.scalars()) m << "scalar " << k << ' ' << v << '\n';
    m << "end\n";
    return m.str();
}

/// Parses "name[d0,d1,...]" (or "[...]" alone when name_out is null).
inline bool parse_named_shape(std::string_view tok, std::string* name_out, std::vector<std::size_t>& shape) {
    const auto open = tok.find('[');
    if (open == std::string_view::npos || tok.back() != ']') return false;
    if (name_out != nullptr) {
        *name_out = std::string(tok.substr(0, open));
        if (!valid_name(*name_out)) return false;
    } else if (open != 0) {
        return false;
    }
    std::string_view dims = tok.substr(open + 1, tok.size() - open - 2);
    shape.clear();
    while (!dims.empty()) {
        const auto comma = dims.find(',');
        const std::string_view d = dims.substr(0, comma);
        std::size_t v = 0;
        const auto r = std::from_chars(d.data(), d.data() + d.size(), v);
        if (r.ec != std::errc{} || r.ptr != d.data() + d.size()) return false;
        shape.push_back(v);
        if (comma == std::string_view::npos) break;
        dims.remove_prefix(comma + 1);
        if (dims.empty()) return false;
    }
    return true;
}

/// The parts of a .npy header (NEP 1: magic "\x93NUMPY", version 1.0 / 2.0 / 3.0, little-endian header length,
/// then a Python dict literal) that decide how many bytes follow: dtype text and shape.
struct npy_header {
    std::size_t data_offset = 0;  ///< bytes before the data
    std::string descr;            ///< e.g. "<f4"
    std::vector<std::size_t> shape;
};

/// Reads and parses the .npy header of `file` (of `file_size` bytes) without allocating anything the header
/// declares beyond the header text itself, whose length is checked against the file size first. Throws
/// checkpoint_error naming the file for a malformed header.
inline npy_header read_npy_header(const std::filesystem::path& file, std::uintmax_t file_size,
                                  std::string_view dtype_name) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw checkpoint_error(file.string() + ": cannot open the file");
    auto bad = [&](const std::string& why) {
        return checkpoint_error(file.string() + ": not a valid " + std::string(dtype_name) + " .npy file (" + why + ")");
    };
    unsigned char pre[12] = {};
    in.read(reinterpret_cast<char*>(pre), 10);
    if (in.gcount() != 10 || std::memcmp(pre, "\x93NUMPY", 6) != 0) throw bad("no .npy magic string");
    npy_header h;
    std::uintmax_t header_len = 0;
    if (pre[6] == 1 && pre[7] == 0) {
        header_len = std::uintmax_t(pre[8]) | (std::uintmax_t(pre[9]) << 8);
        h.data_offset = 10;
    } else if ((pre[6] == 2 || pre[6] == 3) && pre[7] == 0) {
        in.read(reinterpret_cast<char*>(pre + 10), 2);
        if (in.gcount() != 2) throw bad("truncated header");
        header_len = std::uintmax_t(pre[8]) | (std::uintmax_t(pre[9]) << 8) | (std::uintmax_t(pre[10]) << 16) |
                     (std::uintmax_t(pre[11]) << 24);
        h.data_offset = 12;
    } else {
        throw bad("unsupported format version " + std::to_string(pre[6]) + "." + std::to_string(pre[7]));
    }
    if (header_len > file_size - h.data_offset)
        throw bad("the header length " + std::to_string(header_len) + " exceeds the file size " +
                  std::to_string(file_size));
    std::string text(static_cast<std::size_t>(header_len), '\0');
    in.read(text.data(), static_cast<std::streamsize>(header_len));
    if (static_cast<std::uintmax_t>(in.gcount()) != header_len) throw bad("truncated header");
    h.data_offset += static_cast<std::size_t>(header_len);
    // 'descr': '<f4'
    const auto d = text.find("'descr'");
    const auto q1 = d == std::string::npos ? d : text.find('\'', text.find(':', d));
    const auto q2 = q1 == std::string::npos ? q1 : text.find('\'', q1 + 1);
    if (q2 == std::string::npos) throw bad("no 'descr' in the header");
    h.descr = text.substr(q1 + 1, q2 - q1 - 1);
    // 'shape': (d0, d1, ...)
    const auto s = text.find("'shape'");
    const auto open = s == std::string::npos ? s : text.find('(', s);
    const auto close = open == std::string::npos ? open : text.find(')', open);
    if (close == std::string::npos) throw bad("no 'shape' in the header");
    std::string_view dims(text.data() + open + 1, close - open - 1);
    while (!dims.empty()) {
        while (!dims.empty() && dims.front() == ' ') dims.remove_prefix(1);
        if (dims.empty()) break;
        std::size_t v = 0;
        const auto r = std::from_chars(dims.data(), dims.data() + dims.size(), v);
        if (r.ec != std::errc{}) throw bad("malformed shape in the header");
        h.shape.push_back(v);
        dims.remove_prefix(static_cast<std::size_t>(r.ptr - dims.data()));
        while (!dims.empty() && dims.front() == ' ') dims.remove_prefix(1);
        if (!dims.empty() && dims.front() != ',') throw bad("malformed shape in the header");
        if (!dims.empty()) dims.remove_prefix(1);
    }
    return h;
}

/// Loads the values of a .npy file that the manifest lists with dtype T and `shape`. Before xtensor reads the file
/// (and allocates what its header declares), the header is parsed and checked: dtype, shape equal to the manifest's,
/// and header + data size exactly the file size (overflow-checked). So a lying header allocates nothing.
template <class T>
std::vector<T> load_npy_values(const std::filesystem::path& file, const std::vector<std::size_t>& shape) {
    std::error_code ec;
    const auto file_size = std::filesystem::file_size(file, ec);
    if (ec) throw checkpoint_error(file.string() + ": missing tensor file (" + ec.message() + ")");
    std::size_t n = 0, data_bytes = 0;
    if (!checked_shape_size(shape, n) || __builtin_mul_overflow(n, sizeof(T), &data_bytes))
        throw checkpoint_error(file.string() + ": the manifest's shape " + shape_to_string(shape) +
                               " overflows the address space");
    if (file_size < data_bytes + 10)
        throw checkpoint_error(file.string() + ": truncated .npy file (" + std::to_string(file_size) +
                               " bytes for " + std::to_string(n) + " values)");
    const npy_header h = read_npy_header(file, file_size, std::is_same_v<T, float> ? "float32" : "float64");
    const char* want_descr = std::is_same_v<T, float> ? "<f4" : "<f8";
    if (h.descr != want_descr)
        throw checkpoint_error(file.string() + ": dtype '" + h.descr + "' in the .npy header, the manifest says " +
                               (std::is_same_v<T, float> ? "float32 ('<f4')" : "float64 ('<f8')"));
    if (h.shape != shape)
        throw checkpoint_error(file.string() + ": the .npy header declares shape " + shape_to_string(h.shape) +
                               ", the manifest " + shape_to_string(shape));
    if (file_size != h.data_offset + data_bytes)
        throw checkpoint_error(file.string() + ": " + std::to_string(file_size) + " bytes, but its header (" +
                               std::to_string(h.data_offset) + " bytes) and " + std::to_string(n) + " values need " +
                               std::to_string(h.data_offset + data_bytes) + " (truncated .npy file, or bytes after it)");
    std::ifstream in(file, std::ios::binary);
    if (!in) throw checkpoint_error(file.string() + ": cannot open the file");
    try {
        auto arr = xt::load_npy<T>(in);
        if (!in) throw checkpoint_error(file.string() + ": truncated .npy file");
        const std::vector<std::size_t> got(arr.shape().begin(), arr.shape().end());
        if (got != shape)
            throw checkpoint_error(file.string() + ": shape " + shape_to_string(got) + " differs from the manifest's " +
                                   shape_to_string(shape));
        return std::vector<T>(arr.begin(), arr.end());
    } catch (const checkpoint_error&) {
        throw;
    } catch (const std::exception& e) {
        throw checkpoint_error(file.string() + ": not a valid " + (std::is_same_v<T, float> ? "float32" : "float64") +
                               " .npy file (" + e.what() + ")");
    }
}

}  // namespace detail

namespace detail {
/// Removes <parent>/<name>.tmp-<pid> and <name>.old-<pid> left by save_checkpoint in processes that no longer exist
/// (a kill during a save). Keeps this process's, a live process's, and everything else. Best effort (no throw).
inline void remove_stale_save_directories(const std::filesystem::path& parent, const std::string& name) noexcept {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string entry = it->path().filename().string();
        for (const std::string kind : {".tmp-", ".old-"}) {
            const std::string prefix = name + kind;
            if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) continue;
            const std::string_view digits = std::string_view(entry).substr(prefix.size());
            long long pid = 0;
            const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
            if (r.ec != std::errc{} || r.ptr != digits.data() + digits.size() || pid <= 0 || pid == ::getpid() ||
                pid > std::numeric_limits<pid_t>::max())
                continue;
            if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
                std::error_code rm;
                fs::remove_all(it->path(), rm);
            }
        }
    }
}

/// save_checkpoint with a hook called after each file of the temporary directory is written (tests use it to
/// simulate a failure in the middle of a save).
template <class AfterFile>
void save_checkpoint_impl(const checkpoint& c, const std::filesystem::path& dir, AfterFile&& after_file) {
    namespace fs = std::filesystem;
    if (dir.empty()) throw checkpoint_error("pipeprop::save_checkpoint: empty checkpoint path");
    const fs::path target = dir.has_filename() ? dir : dir.parent_path();
    std::error_code ec;
    const bool exists = fs::exists(fs::symlink_status(target, ec));
    if (exists && (!fs::is_directory(target, ec) || !fs::is_regular_file(target / detail::manifest_name, ec)))
        throw checkpoint_error(target.string() +
                               ": exists and is not a pipeprop checkpoint directory; refusing to replace it");
    const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
    const fs::path tmp = parent / (target.filename().string() + ".tmp-" + std::to_string(::getpid()));
    try {
        fs::create_directories(parent);
        remove_stale_save_directories(parent, target.filename().string());
        fs::remove_all(tmp);
        fs::create_directory(tmp);
        for (const auto& t : c.tensors()) {
            const std::string bytes = std::visit([&](const auto& v) { return detail::npy_bytes(t, v); }, t.values);
            detail::write_file_synced(tmp / (t.name + ".npy"), bytes);
            after_file(tmp / (t.name + ".npy"));
        }
        detail::write_file_synced(tmp / detail::manifest_name, detail::manifest_text(c));
        after_file(tmp / detail::manifest_name);
        detail::sync_directory(tmp);
    } catch (const std::exception& e) {
        fs::remove_all(tmp, ec);
        throw checkpoint_error(target.string() + ": saving the checkpoint failed (previous checkpoint kept): " +
                               e.what());
    }
    if (!exists) {
        if (::rename(tmp.c_str(), target.c_str()) != 0) {
            const std::string err = std::strerror(errno);
            fs::remove_all(tmp, ec);
            throw checkpoint_error(target.string() + ": cannot move the new checkpoint into place: " + err);
        }
    } else {
        bool swapped = false;
#ifdef RENAME_EXCHANGE
        swapped = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0;
#endif
        if (!swapped) {
            // Filesystem without RENAME_EXCHANGE: move the old one aside, the new one in, then drop the old one.
            const fs::path old = parent / (target.filename().string() + ".old-" + std::to_string(::getpid()));
            fs::remove_all(old, ec);
            if (::rename(target.c_str(), old.c_str()) != 0 || ::rename(tmp.c_str(), target.c_str()) != 0) {
                const std::string err = std::strerror(errno);
                if (!fs::exists(target, ec)) (void)::rename(old.c_str(), target.c_str());
                fs::remove_all(tmp, ec);
                throw checkpoint_error(target.string() + ": cannot move the new checkpoint into place: " + err);
            }
            fs::remove_all(old, ec);
        } else {
            fs::remove_all(tmp, ec);  // now holds the previous checkpoint
        }
    }
    detail::sync_directory(parent);
}
}  // namespace detail

/// Checks, without writing anything, that save_checkpoint(c, dir) can create or replace `dir`: `dir` is not an
/// existing path other than a pipeprop checkpoint directory, and the nearest existing ancestor of its parent (the
/// save creates missing directories) is a writable directory. For a program that wants to fail before a long run
/// rather than at its first save. Throws checkpoint_error naming the path and the reason.
inline void check_checkpoint_destination(const std::filesystem::path& dir) {
    namespace fs = std::filesystem;
    if (dir.empty()) throw checkpoint_error("pipeprop::check_checkpoint_destination: empty checkpoint path");
    const fs::path target = dir.has_filename() ? dir : dir.parent_path();
    std::error_code ec;
    if (fs::exists(fs::symlink_status(target, ec)) &&
        (!fs::is_directory(target, ec) || !fs::is_regular_file(target / detail::manifest_name, ec)))
        throw checkpoint_error(target.string() +
                               ": exists and is not a pipeprop checkpoint directory; refusing to replace it");
    fs::path ancestor = target.has_parent_path() ? target.parent_path() : fs::path(".");
    while (!fs::exists(fs::status(ancestor, ec))) {
        if (!ancestor.has_parent_path() || ancestor.parent_path() == ancestor) {
            ancestor = ".";
            break;
        }
        ancestor = ancestor.parent_path();
    }
    if (!fs::is_directory(ancestor, ec))
        throw checkpoint_error(target.string() + ": cannot save a checkpoint here: " + ancestor.string() +
                               " is not a directory");
    if (::access(ancestor.c_str(), W_OK | X_OK) != 0)
        throw checkpoint_error(target.string() + ": cannot save a checkpoint here: the directory " +
                               ancestor.string() + " is not writable (" + std::strerror(errno) + ")");
}

/// Saves `c` as directory `dir` (see the file comment), replacing an earlier checkpoint at `dir` atomically.
/// The manifest (manifest.txt) is line-based text:
///   pipeprop-checkpoint 1
///   layers <L>
///   layer <i> [<tensor>[<dims,...>] ...]          (one line per layer; nothing after i for parameter-free layers)
///   tensor <name> <float32|float64> [<dims,...>]  (one line per tensor; its data is <name>.npy)
///   scalar <key> <value>                          (one line per scalar)
///   end
/// Throws checkpoint_error naming the path when `dir` exists but is not a pipeprop checkpoint (it is never
/// replaced), or when writing, syncing or renaming fails; the previous checkpoint then survives unchanged.
/// Also removes the temporary directories of earlier saves to `dir` whose process no longer exists (file comment).
inline void save_checkpoint(const checkpoint& c, const std::filesystem::path& dir) {
    detail::save_checkpoint_impl(c, dir, [](const std::filesystem::path&) {});
}

/// Loads the checkpoint in directory `dir`: parses the manifest, then reads and checks every tensor (.npy format,
/// dtype and shape as the manifest states). Throws checkpoint_error naming the path when the directory or the
/// manifest is missing, the format tag or version is unknown, a manifest line is malformed, or a tensor file is
/// missing, truncated or does not match the manifest.
[[nodiscard]] inline checkpoint load_checkpoint(const std::filesystem::path& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw checkpoint_error(dir.string() + ": checkpoint directory not found");
    const fs::path manifest = dir / detail::manifest_name;
    std::ifstream in(manifest);
    if (!in) throw checkpoint_error(dir.string() + ": not a pipeprop checkpoint (no readable manifest.txt)");
    checkpoint c;
    std::string line;
    std::size_t line_no = 0;
    auto bad = [&](const std::string& why) -> checkpoint_error {
        return checkpoint_error(manifest.string() + ":" + std::to_string(line_no) + ": " + why);
    };
    if (!std::getline(in, line)) throw checkpoint_error(manifest.string() + ": empty manifest");
    ++line_no;
    {
        std::istringstream first(line);
        std::string tag;
        int version = 0;
        if (!(first >> tag) || tag != detail::checkpoint_format_tag)
            throw bad("not a pipeprop checkpoint manifest (first line '" + line + "')");
        if (!(first >> version) || version != detail::checkpoint_format_version)
            throw bad("unsupported checkpoint format version '" + line.substr(tag.size()) + "' (this build reads " +
                      std::to_string(detail::checkpoint_format_version) + ")");
    }
    std::size_t declared_layers = 0;
    bool have_layers = false, ended = false;
    struct pending {
        std::string name, dtype;
        std::vector<std::size_t> shape;
    };
    std::vector<pending> tensors;
    while (std::getline(in, line)) {
        ++line_no;
        if (ended) throw bad("content after 'end'");
        std::istringstream ls(line);
        std::string kind;
        ls >> kind;
        if (kind == "end") {
            ended = true;
        } else if (kind == "layers") {
            if (have_layers || !(ls >> declared_layers)) throw bad("malformed 'layers' line");
            have_layers = true;
        } else if (kind == "layer") {
            std::size_t i = 0;
            if (!have_layers || !(ls >> i) || i != c.signature.layers.size() || i >= declared_layers)
                throw bad("malformed or out-of-order 'layer' line");
            std::vector<tensor_signature> layer;
            std::string tok;
            while (ls >> tok) {
                tensor_signature t;
                if (!detail::parse_named_shape(tok, &t.name, t.shape)) throw bad("malformed tensor '" + tok + "'");
                layer.push_back(std::move(t));
            }
            c.signature.layers.push_back(std::move(layer));
        } else if (kind == "tensor") {
            pending p;
            std::string shape_tok, extra;
            if (!(ls >> p.name >> p.dtype >> shape_tok) || (ls >> extra) || !detail::valid_name(p.name) ||
                (p.dtype != "float32" && p.dtype != "float64") ||
                !detail::parse_named_shape(shape_tok, nullptr, p.shape))
                throw bad("malformed 'tensor' line");
            tensors.push_back(std::move(p));
        } else if (kind == "scalar") {
            std::string key;
            if (!(ls >> key) || !detail::valid_name(key)) throw bad("malformed 'scalar' line");
            std::string value;
            std::getline(ls, value);
            if (!value.empty() && value.front() == ' ') value.erase(0, 1);
            c.set_scalar(key, value);
        } else {
            throw bad("unknown entry '" + kind + "'");
        }
    }
    if (!ended) throw checkpoint_error(manifest.string() + ": truncated manifest (no 'end' line)");
    if (c.signature.layers.size() != declared_layers)
        throw checkpoint_error(manifest.string() + ": declares " + std::to_string(declared_layers) + " layers but lists " +
                               std::to_string(c.signature.layers.size()));
    for (const auto& p : tensors) {
        const fs::path file = dir / (p.name + ".npy");
        if (p.dtype == "float32") {
            const auto v = detail::load_npy_values<float>(file, p.shape);
            c.add_tensor<float>(p.name, p.shape, v);
        } else {
            const auto v = detail::load_npy_values<double>(file, p.shape);
            c.add_tensor<double>(p.name, p.shape, v);
        }
    }
    return c;
}

}  // namespace pipeprop
