// examples/train/progress.hpp: training progress on stderr: a one-line bar redrawn in place on a terminal
// (samples/s, loss, ETA), plain log lines otherwise (pipes, CI logs), or nothing. stdout stays free for the result.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <iterator>
#include <string>

namespace train {

/// How progress is shown.
enum class progress_style { bar, log, none };

/// progress_style from the --progress value; "auto" picks bar when stderr is a terminal, log otherwise.
inline progress_style progress_style_from(const std::string& name) {
    if (name == "bar") return progress_style::bar;
    if (name == "log") return progress_style::log;
    if (name == "none") return progress_style::none;
    return ::isatty(STDERR_FILENO) ? progress_style::bar : progress_style::log;
}

/// Appends "m:ss" or "h:mm:ss" for a duration in seconds ("?" when unknown) to out.
template <class Out>
void format_duration(double seconds, Out out) {
    if (!(seconds >= 0) || seconds > 1e7) {
        fmt::format_to(out, "?");
        return;
    }
    const auto s = static_cast<long>(seconds + 0.5);
    if (s >= 3600) fmt::format_to(out, "{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
    else fmt::format_to(out, "{}:{:02}", s / 60, s % 60);
}

/// Progress of one epoch. update() is cheap (a clock read) and is called after every batch; it draws at most
/// 10 times per second (bar) or at every tenth of the epoch (log). Loss shown: mean training loss per sample since
/// the start of the epoch (nats).
class epoch_progress {
public:
    epoch_progress(progress_style style, std::size_t epoch, std::size_t epochs, std::size_t epoch_samples,
                   std::size_t start_position)
        : style_(style),
          epoch_(epoch),
          epochs_(epochs),
          total_(epoch_samples),
          start_pos_(start_position),
          next_log_(start_position),
          start_(clock::now()),
          last_draw_(start_) {
        advance_log_mark();
    }

    /// Samples done in this epoch (position) and the mean loss over the samples of this run's part of the epoch.
    void update(std::size_t position, double mean_loss) {
        if (style_ == progress_style::none) return;
        const auto now = clock::now();
        if (style_ == progress_style::bar) {
            if (position < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
            last_draw_ = now;
            std::fprintf(stderr, "\r%s", line(position, mean_loss, now, true));
            if (position >= total_) std::fputc('\n', stderr);
            std::fflush(stderr);
        } else if (position >= next_log_ || position >= total_) {
            std::fprintf(stderr, "%s\n", line(position, mean_loss, now, false));
            std::fflush(stderr);
            while (next_log_ <= position && next_log_ < total_) advance_log_mark();
        }
    }

    /// Prints one message line (e.g. the epoch's evaluation) below the bar or among the log lines.
    void message(const std::string& text) const {
        if (style_ == progress_style::none) return;
        std::fprintf(stderr, "%s\n", text.c_str());
        std::fflush(stderr);
    }

private:
    using clock = std::chrono::steady_clock;

    void advance_log_mark() { next_log_ += total_ / 10 > 0 ? total_ / 10 : 1; }

    /// Formats the progress line into line_ and returns it (a fmt::memory_buffer: no length limit; after the first
    /// lines it reuses its storage, so drawing does not allocate).
    const char* line(std::size_t position, double mean_loss, clock::time_point now, bool bar) {
        const double elapsed = std::chrono::duration<double>(now - start_).count();
        const double done = static_cast<double>(position - start_pos_);
        const double rate = elapsed > 0 ? done / elapsed : 0.0;
        const double eta = rate > 0 ? static_cast<double>(total_ - position) / rate : -1.0;
        line_.clear();
        const auto out = std::back_inserter(line_);
        fmt::format_to(out, "epoch {}/{} ", epoch_ + 1, epochs_);
        if (bar) {
            constexpr std::size_t width = 30;
            const std::size_t filled = total_ ? position * width / total_ : width;
            line_.push_back('[');
            for (std::size_t i = 0; i < width; ++i) line_.push_back(i < filled ? '#' : '.');
            fmt::format_to(out, "] ");
        }
        fmt::format_to(out, "{}/{} samples, {:.0f} samples/s, loss {:.4f}, {} ", position, total_, rate, mean_loss,
                       position >= total_ ? "took" : "ETA");
        format_duration(position >= total_ ? elapsed : eta, out);
        if (bar) fmt::format_to(out, "   ");
        line_.push_back('\0');
        return line_.data();
    }

    progress_style style_;
    std::size_t epoch_, epochs_, total_, start_pos_, next_log_;
    clock::time_point start_, last_draw_;
    fmt::memory_buffer line_;
};

}  // namespace train
