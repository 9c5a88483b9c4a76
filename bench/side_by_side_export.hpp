// bench/side_by_side_export.hpp: writes a network's parameter block as .npy files for the side-by-side comparisons
// with PyTorch and libtorch (bench/side_by_side_train.cpp, bench/llama_side_by_side_train.cpp).
//
// export_parameters<Net, T>(dir, w) writes, for every tensor of every node with parameters,
// dir/<node name>.<tensor>.npy in the layer's layout (its parameter_tensors(): dense / token_linear weight
// [out, in], conv weight [out, c, kh, kw], attention w_q ... w_o [D, D], embedding table [V, D], ...) and the list of
// them as dir/parameters.txt, one line "<node name> <tensor> <dims...>" per tensor in node order (node names as
// layer_stack::node_names: "layer_09", "layer_09.body_03", "layer_01.body_00.body_01"). The readers load exactly
// these and fail when a tensor is missing on either side or its shape differs.
#pragma once

#include <boost/mp11/algorithm.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xnpy.hpp>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/layer_stack.hpp"

namespace pipeprop::bench {

/// Writes every parameter tensor of w (Net's parameter block, value type T) as dir/<node name>.<tensor>.npy with
/// its shape, and the list of them as dir/parameters.txt (see the file comment). Throws std::runtime_error when
/// parameters.txt cannot be written.
template <class Net, class T>
void export_parameters(const std::filesystem::path& dir, std::span<const T> w) {
    using stack_type = pipeprop::layer_stack<Net, T>;
    std::ofstream manifest(dir / "parameters.txt");
    boost::mp11::mp_for_each<boost::mp11::mp_iota_c<stack_type::layer_count>>([&](auto I) {
        using layer = typename stack_type::template layer_type<I>;
        if constexpr (layer::parameter_count > 0) {
            std::size_t offset = stack_type::parameter_offset[I];
            const std::string node(stack_type::node_names[I]);
            for (const auto& t : layer::parameter_tensors()) {
                std::vector<std::size_t> shape(t.dims.begin(), t.dims.begin() + t.rank);
                const auto view = xt::adapt(w.data() + offset, t.size(), xt::no_ownership(), shape);
                const std::string tensor(t.name);
                xt::dump_npy((dir / (node + "." + tensor + ".npy")).string(), view);
                manifest << node << ' ' << tensor;
                for (const std::size_t d : shape) manifest << ' ' << d;
                manifest << '\n';
                offset += t.size();
            }
        }
    });
    if (!manifest.flush()) throw std::runtime_error("cannot write " + (dir / "parameters.txt").string());
}

}  // namespace pipeprop::bench
