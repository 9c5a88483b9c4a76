// pipeprop/layer_storage.hpp: the layer objects of a network, one array per distinct node type.
//
// layer_storage<LayerList> holds one object per node of LayerList (a boost::mp11::mp_list of node types) without a
// per-position tuple, whose compile-time cost is quadratic in the number of nodes: the nodes of each distinct type
// live in one std::array, and address(i) is node i's address, found through a table made once per type.
#pragma once

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include <array>
#include <cstddef>
#include <tuple>
#include <utility>

namespace pipeprop {

/// The layer objects of the nodes LayerList (see the file comment). Copyable; a copy holds its own objects.
template <class LayerList>
class layer_storage {
    using layer_list = boost::mp11::mp_rename<LayerList, boost::mp11::mp_list>;
    static constexpr std::size_t layer_count = boost::mp11::mp_size<layer_list>::value;
    using unique_types = boost::mp11::mp_unique<layer_list>;
    static constexpr std::size_t type_count = boost::mp11::mp_size<unique_types>::value;

    template <class... Us, class... Ls>
    static constexpr std::array<std::size_t, layer_count> type_index_of(boost::mp11::mp_list<Us...>,
                                                                        boost::mp11::mp_list<Ls...>) {
        return {boost::mp11::mp_find<boost::mp11::mp_list<Us...>, Ls>::value...};
    }
    // type_index[i]: node i's type in unique_types; slot[i]: its index among the nodes of that type.
    static constexpr std::array<std::size_t, layer_count> type_index = type_index_of(unique_types{}, layer_list{});
    static constexpr std::array<std::size_t, layer_count> slot = [] {
        std::array<std::size_t, layer_count> s{};
        std::array<std::size_t, type_count> seen{};
        for (std::size_t i = 0; i < layer_count; ++i) s[i] = seen[type_index[i]]++;
        return s;
    }();
    template <std::size_t K>
    static constexpr std::size_t count_of_type = [] {
        std::size_t n = 0;
        for (std::size_t t : type_index) n += t == K;
        return n;
    }();
    template <class>
    struct arrays_of;
    template <std::size_t... K>
    struct arrays_of<std::index_sequence<K...>> {
        using type = std::tuple<std::array<boost::mp11::mp_at_c<unique_types, K>, count_of_type<K>>...>;
        using address_fn = const void* (*)(const type&, std::size_t);
        static constexpr std::array<address_fn, type_count> address{
            [](const type& a, std::size_t i) -> const void* { return &std::get<K>(a)[i]; }...};
    };
    using arrays = arrays_of<std::make_index_sequence<type_count>>;

public:
    layer_storage() { bind(); }
    ///@{
    /// Copies the layer objects and rebinds the copy's type-erased pointers to its own objects.
    layer_storage(const layer_storage& o) : objects_(o.objects_) { bind(); }
    layer_storage& operator=(const layer_storage& o) {
        ///@}
        objects_ = o.objects_;
        bind();
        return *this;
    }

    /// The address of node i's object (i < the number of nodes).
    [[nodiscard]] const void* address(std::size_t i) const noexcept { return address_[i]; }
    /// The addresses of all nodes' objects, [number of nodes] (valid while this object lives).
    [[nodiscard]] const void* const* addresses() const noexcept { return address_.data(); }

private:
    void bind() noexcept {
        for (std::size_t i = 0; i < layer_count; ++i) address_[i] = arrays::address[type_index[i]](objects_, slot[i]);
    }

    typename arrays::type objects_{};
    std::array<const void*, layer_count> address_{};
};

}  // namespace pipeprop
