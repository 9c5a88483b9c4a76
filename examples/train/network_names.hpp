// examples/train/network_names.hpp: the names --network accepts, and the network type key a name, --norm and --data
// select (the types themselves: networks.hpp).
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace train {

/// Names of the image classification networks, in the order shown in the help (every mode trains them).
inline std::vector<std::string> image_network_names() {
    return {"cnn", "cnn32", "cnn-on", "mlp", "resnet20", "resnet32", "resnet44", "resnet56", "resnet110"};
}
/// True for the ResNets, whose normalization (--norm) and input size (from --data) select the network type.
inline bool is_resnet(std::string_view name) {
    return name == "resnet20" || name == "resnet32" || name == "resnet44" || name == "resnet56" || name == "resnet110";
}
/// True when `dir` holds CIFAR-10 binary batches (data_batch_1.bin in dir or dir/cifar-10-batches-bin, as
/// pipeprop::data::load_image_dataset looks for them).
inline bool holds_cifar10(const std::string& dir) {
    std::error_code ec;
    const std::filesystem::path d(dir);
    return std::filesystem::is_regular_file(d / "data_batch_1.bin", ec) ||
           std::filesystem::is_regular_file(d / "cifar-10-batches-bin" / "data_batch_1.bin", ec);
}
/// The network type key with_network dispatches on: --network, plus for a ResNet "-on" with --norm on and "-cifar"
/// when --data holds CIFAR-10 (resnet20, resnet20-on, resnet20-cifar, resnet20-on-cifar, the same for resnet56).
inline std::string network_type_key(const std::string& network, const std::string& norm, const std::string& data) {
    if (!is_resnet(network)) return network;
    return network + (norm == "on" ? "-on" : "") + (holds_cifar10(data) ? "-cifar" : "");
}
/// True for the network type keys --mode sync trains: all but the ResNets other than resnet20 (1x28x28, group norm),
/// which train in --mode sgd and --mode pb only (compile time: examples/pipeprop_train.cmake).
inline bool sync_mode_trains(std::string_view key) { return !key.starts_with("resnet") || key == "resnet20"; }
/// Names of the text (next-token) networks (modes whose supports_text_networks() is true).
inline std::vector<std::string> text_network_names() { return {"llama-tiny", "llama-4x128"}; }
/// Names accepted by --network, in the order shown in the help.
inline std::vector<std::string> network_names() {
    auto names = image_network_names();
    for (auto& n : text_network_names()) names.push_back(n);
    return names;
}
/// True for a text network name (train::with_text_network).
inline bool is_text_network(std::string_view name) {
    const auto names = text_network_names();
    return std::find(names.begin(), names.end(), name) != names.end();
}
}  // namespace train
