// pipeprop/parameter_tensor.hpp: names and shapes of the tensors inside a layer's parameter block.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace pipeprop {

/// One named tensor inside a layer's contiguous parameter block (e.g. dense: "weight" [out, in], "bias" [out]).
/// Used for checkpoint file names and for reporting. Rank is at most 4; unused trailing dims are 1.
struct parameter_tensor {
    std::string_view name;  ///< Name within the layer, e.g. "weight" (checkpoint file names).
    std::size_t rank = 1;  ///< Number of dimensions used, 1 to 4.
    std::array<std::size_t, 4> dims{1, 1, 1, 1};  ///< Dimensions, row-major; unused trailing ones are 1.

    [[nodiscard]] constexpr std::size_t size() const noexcept {  ///< Elements: the product of dims.
        std::size_t n = 1;
        for (std::size_t i = 0; i < rank; ++i) n *= dims[i];
        return n;
    }
};

/// Sum of the sizes of a list of parameter tensors (elements, not bytes).
template <std::size_t N>
[[nodiscard]] constexpr std::size_t total_size(const std::array<parameter_tensor, N>& tensors) noexcept {
    std::size_t n = 0;
    for (const auto& t : tensors) n += t.size();
    return n;
}

}  // namespace pipeprop
