// examples/train/sync_options.hpp: the values of two options of --mode sync (train/mode_sync.hpp): --stages (split
// points or a balanced cut: parse_stages) and --trace (the JSON and SVG files of one PATH: trace_paths).
#pragma once

#include <CLI/CLI.hpp>

#include <pipeprop/pipeline_layout.hpp>

#include <cstddef>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace train {

/// The parsed --stages value: explicit split points, or a balanced cut into `balanced_stages` stages.
struct stage_spec {
    std::vector<std::size_t> split_points;
    std::size_t balanced_stages = 0;  ///< > 0: balanced cut into this many stages
};

/// Parses --stages ("balanced", "balanced:P" or "a,b,c"); checks it against a network of `layers` layers.
/// Throws CLI::ValidationError naming the problem.
inline stage_spec parse_stages(const std::string& text, std::size_t layers) {
    stage_spec s;
    auto number = [&](const std::string& t) -> std::size_t {
        std::size_t used = 0, v = 0;
        try {
            v = std::stoul(t, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (t.empty() || used != t.size() || t[0] == '-')
            throw CLI::ValidationError("--stages", "'" + t + "' is not a layer position (expected balanced, "
                                                             "balanced:P or comma-separated split points)");
        return v;
    };
    if (text == "balanced" || text.rfind("balanced:", 0) == 0) {
        s.balanced_stages = text == "balanced" ? 2 : number(text.substr(9));
        if (s.balanced_stages == 0 || s.balanced_stages > layers)
            throw CLI::ValidationError("--stages", "balanced:" + std::to_string(s.balanced_stages) +
                                                       " needs between 1 and " + std::to_string(layers) +
                                                       " stages (the network has " + std::to_string(layers) +
                                                       " layers)");
        return s;
    }
    std::size_t start = 0;
    while (start <= text.size()) {
        const std::size_t comma = text.find(',', start);
        const std::size_t len = comma == std::string::npos ? std::string::npos : comma - start;
        s.split_points.push_back(number(text.substr(start, len)));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    try {
        (void)pipeprop::partition_at(layers, s.split_points);
    } catch (const std::invalid_argument& e) {
        throw CLI::ValidationError("--stages", e.what());
    }
    return s;
}

/// The two files of --trace PATH: {Chrome trace JSON, SVG Gantt chart}. PATH ending in ".svg" names the SVG and
/// the JSON is PATH with extension ".json"; any other PATH names the JSON and the SVG is PATH with its extension (if
/// any) replaced by ".svg". The two are never the same file (--trace X.svg wrote the JSON and then the SVG
/// over it).
struct trace_files {
    std::string json, svg;
};
inline trace_files trace_paths(const std::string& path) {
    const auto slash = path.rfind('/');
    const auto dot = path.rfind('.');
    const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
    const std::string stem = has_ext ? path.substr(0, dot) : path;
    if (has_ext && path.substr(dot) == ".svg") return {stem + ".json", path};
    return {path, stem + ".svg"};
}

}  // namespace train
