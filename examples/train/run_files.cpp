// examples/train/run_files.cpp: the definitions of train/run_files.hpp, the main program's network-independent file
// input and output, in one translation unit.
#include "train/run_files.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "pipeprop/checkpoint.hpp"
#include "pipeprop/data/text_corpus.hpp"
#include "train/activity.hpp"
#include "train/checkpoint_checks.hpp"
#include "train/network_names.hpp"
#include "train/networks.hpp"
#include "train/rank_checkpoints.hpp"

namespace train {

pipeprop::checkpoint read_resume_checkpoint(const common_options& o, std::span<const std::string_view> node_names,
                                            const std::string& mode_name, bool& multi_rank,
                                            std::string& saved_layout) {
    multi_rank = is_rank_checkpoint(o.checkpoint_in);
    try {
        pipeprop::checkpoint read = multi_rank ? load_whole_rank_checkpoint(o.checkpoint_in, node_names, saved_layout)
                                               : pipeprop::load_checkpoint(o.checkpoint_in);
        if (!multi_rank && read.has_scalar("rank_layout"))
            throw pipeprop::checkpoint_error(o.checkpoint_in +
                                             ": one rank's part of a --transport mpi checkpoint (its other stages are "
                                             "not current); give the directory that holds its ranks.txt");
        require_same_network(read, o.network, o.network_type, o.checkpoint_in);
        check_resume_mode(read, mode_name, o.checkpoint_in, o);
        return read;
    } catch (const rank_manifest_error&) {
        throw;
    } catch (const pipeprop::checkpoint_error& e) {
        if (o.ranks != nullptr) throw rank_manifest_error(e.what());
        throw;
    }
}

void write_run_checkpoint(const pipeprop::checkpoint& c, const common_options& o, std::size_t epoch,
                          std::span<const std::string_view> node_names, const std::vector<std::string>& stages_by_rank) {
    if (o.ranks != nullptr)
        save_rank_checkpoint(c, node_names, o.checkpoint_out, epoch, stages_by_rank, *o.ranks);
    else
        pipeprop::save_checkpoint(c, o.checkpoint_out);
}

pipeprop::data::dataset_pair read_image_data(const common_options& o, pipeprop::data::image_geometry input) {
    const auto t0 = std::chrono::steady_clock::now();
    set_activity("loading the data from " + o.data);
    auto d = [&] {
        try {
            return pipeprop::data::load_image_dataset(o.data, input);
        } catch (const pipeprop::data_error& e) {
            if (std::string_view(e.what()).find("does not match the network input") == std::string_view::npos) throw;
            std::string inputs;  // which --network takes which image size
            for (const std::string& name : image_network_names())
                inputs += fmt::format("{}{} {}", inputs.empty() ? "" : ", ", name,
                                      is_resnet(name) ? std::string("1x28x28 or 3x32x32 (as --data holds)")
                                                      : with_network(name, []<class N>() {
                                                            return input_geometry<N>().to_string();
                                                        }));
            throw pipeprop::data_error(fmt::format("{} (--network {}; the networks take: {})", e.what(), o.network,
                                                   inputs));
        }
    }();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    note(o, fmt::format("data: {} training and {} test images {} ({}) from {} in {:.1f} s", d.train.count,
                        d.test.count, d.train.geometry.to_string(), d.format, o.data, s));
    return d;
}

pipeprop::data::text_dataset load_text_data(const common_options& o, std::size_t length,
                                                   std::size_t model_vocabulary) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string dir = o.data_given ? o.data : std::string(pipeprop::data::default_text_directory);
    set_activity("loading the text corpus from " + dir);
    pipeprop::data::text_dataset d(pipeprop::data::load_text_corpus(dir, model_vocabulary), length);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    note(o, fmt::format("data: {} training and {} validation sequences of {} tokens (byte vocabulary {}; {} files, "
                        "{} bytes, {} / {} fortunes) from {} in {:.1f} s",
                        d.train().count(), d.validation().count(), length, d.vocabulary_size(),
                        d.corpus().files.size(), d.corpus().file_bytes, d.corpus().train_fortunes,
                        d.corpus().validation_fortunes, dir, s));
    return d;
}

std::ofstream open_metrics(const common_options& o, bool resumed, std::size_t completed_epochs) {
    std::ofstream metrics;
    if (o.metrics.empty()) return metrics;
    std::error_code ec;
    if (resumed && std::filesystem::exists(o.metrics, ec)) {
        std::ifstream in(o.metrics);
        if (!in) throw std::runtime_error(o.metrics + ": cannot read the metrics file to append to it");
        std::string kept, line;
        std::size_t lines = 0, dropped = 0;
        while (std::getline(in, line)) {
            constexpr std::string_view prefix = "{\"epoch\":";
            std::size_t epoch = 0;
            const bool numbered = line.rfind(prefix, 0) == 0 &&
                                  std::from_chars(line.data() + prefix.size(), line.data() + line.size(), epoch).ec ==
                                      std::errc{};
            if (numbered && epoch > completed_epochs) {
                ++dropped;
                continue;
            }
            kept += line + '\n';
            ++lines;
        }
        if (in.bad()) throw std::runtime_error(o.metrics + ": reading the metrics file failed");
        in.close();
        const std::string tmp = o.metrics + ".tmp-" + std::to_string(::getpid());
        {
            std::ofstream out(tmp, std::ios::out | std::ios::trunc);
            out << kept << std::flush;
            if (!out) throw std::runtime_error(tmp + ": cannot write the metrics file");
        }
        std::filesystem::rename(tmp, o.metrics, ec);
        if (ec) throw std::runtime_error(o.metrics + ": cannot replace the metrics file: " + ec.message());
        note(o, fmt::format("metrics: appending to {} after its {} line(s) up to epoch {}{}", o.metrics, lines,
                            completed_epochs,
                            dropped > 0 ? fmt::format(" ({} line(s) of later epochs dropped)", dropped) : ""));
        metrics.open(o.metrics, std::ios::out | std::ios::app);
    } else {
        metrics.open(o.metrics, std::ios::out | std::ios::trunc);
    }
    if (!metrics) throw std::runtime_error(o.metrics + ": cannot open the metrics file for writing");
    return metrics;
}

}  // namespace train
