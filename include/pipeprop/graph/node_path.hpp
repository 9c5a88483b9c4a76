// pipeprop/graph/node_path.hpp: hierarchical names of the nodes of a flattened network.
//
// A network with blocks is flattened into one list of nodes (network.hpp). Each node keeps the path of the spec it
// came from, e.g. "layer_03.body_01" (the second layer of the body of the block at top-level position 3),
// "layer_03.shortcut_00", "layer_03.fork", "layer_03.add", or "layer_07" for a top-level layer. Checkpoints
// ("layer_03.body_01.weight"), traces, stats and error messages use these names. Indices are zero-padded to at least
// two digits, more when the level has more than 100 entries, so names sort and never prefix-match each other.
#pragma once

#include <cstddef>
#include <string_view>

#include <boost/mp11/list.hpp>

namespace pipeprop {

/// What a path part names.
enum class path_kind : char {
    layer = 'l',     ///< a top-level entry of the network: "layer_NN"
    body = 'b',      ///< an entry of a block's body: "body_NN"
    shortcut = 's',  ///< an entry of a block's projection shortcut: "shortcut_NN"
    fork = 'f',      ///< a block's fork node (its input goes to the body and to the shortcut): "fork"
    add = 'a',       ///< a block's add node (body output + shortcut output): "add"
};

/// One part of a node's path: Kind, index Index among Count entries of that level.
template <path_kind Kind, std::size_t Index = 0, std::size_t Count = 1>
struct path_part {};

/// A node's path: boost::mp11::mp_list<path_part<...>...>, outermost first.
template <class... Parts>
using node_path = boost::mp11::mp_list<Parts...>;

namespace detail {

struct fixed_name {
    char data[160]{};
    std::size_t size = 0;
    constexpr void append(std::string_view s) {
        for (char c : s) data[size++] = c;
    }
    constexpr void append_index(std::size_t i, std::size_t count) {
        std::size_t width = 2;
        for (std::size_t n = count > 0 ? count - 1 : 0; n >= 100; n /= 10) ++width;
        char digits[20]{};
        std::size_t k = 0;
        do {
            digits[k++] = static_cast<char>('0' + i % 10);
            i /= 10;
        } while (i > 0);
        for (std::size_t p = k; p < width; ++p) data[size++] = '0';
        while (k > 0) data[size++] = digits[--k];
    }
};

template <class Part>
struct append_part;
template <path_kind Kind, std::size_t Index, std::size_t Count>
struct append_part<path_part<Kind, Index, Count>> {
    static constexpr void to(fixed_name& n) {
        if (n.size > 0) n.append(".");
        switch (Kind) {
            case path_kind::layer: n.append("layer_"); n.append_index(Index, Count); break;
            case path_kind::body: n.append("body_"); n.append_index(Index, Count); break;
            case path_kind::shortcut: n.append("shortcut_"); n.append_index(Index, Count); break;
            case path_kind::fork: n.append("fork"); break;
            case path_kind::add: n.append("add"); break;
        }
    }
};

template <class Path>
struct node_name_storage;
template <class... Parts>
struct node_name_storage<boost::mp11::mp_list<Parts...>> {
    static constexpr fixed_name value = [] {
        fixed_name n;
        (append_part<Parts>::to(n), ...);
        return n;
    }();
};

}  // namespace detail

/// The name of a node path, e.g. "layer_03.body_01" (static storage; valid for the whole program).
template <class Path>
inline constexpr std::string_view node_name_v{detail::node_name_storage<Path>::value.data,
                                              detail::node_name_storage<Path>::value.size};

}  // namespace pipeprop
