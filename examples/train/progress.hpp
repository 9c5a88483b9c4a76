// examples/train/progress.hpp: training progress on stderr: a one-line bar redrawn in place on a terminal
// (samples/s, loss, ETA), plain log lines otherwise (pipes, CI logs), or nothing. stdout stays free for the result.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
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

/// Writes "m:ss" or "h:mm:ss" for a duration in seconds ("?" when unknown) into out[32].
inline void format_duration(double seconds, char (&out)[32]) {
    if (!(seconds >= 0) || seconds > 1e7) {
        std::snprintf(out, sizeof out, "?");
        return;
    }
    const auto s = static_cast<long>(seconds + 0.5);
    if (s >= 3600) std::snprintf(out, sizeof out, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
    else std::snprintf(out, sizeof out, "%ld:%02ld", s / 60, s % 60);
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

    /// Formats the progress line into line_ (fixed buffer: drawing does not allocate) and returns it.
    const char* line(std::size_t position, double mean_loss, clock::time_point now, bool bar) {
        const double elapsed = std::chrono::duration<double>(now - start_).count();
        const double done = static_cast<double>(position - start_pos_);
        const double rate = elapsed > 0 ? done / elapsed : 0.0;
        const double eta = rate > 0 ? static_cast<double>(total_ - position) / rate : -1.0;
        constexpr std::size_t width = 30;
        char bar_text[width + 4] = "";
        if (bar) {
            const std::size_t filled = total_ ? position * width / total_ : width;
            bar_text[0] = '[';
            for (std::size_t i = 0; i < width; ++i) bar_text[1 + i] = i < filled ? '#' : '.';
            bar_text[width + 1] = ']';
            bar_text[width + 2] = ' ';
            bar_text[width + 3] = '\0';
        }
        char duration[32];
        format_duration(position >= total_ ? elapsed : eta, duration);
        std::snprintf(line_, sizeof line_, "epoch %zu/%zu %s%zu/%zu samples, %.0f samples/s, loss %.4f, %s %s%s",
                      epoch_ + 1, epochs_, bar_text, position, total_, rate, mean_loss,
                      position >= total_ ? "took" : "ETA", duration, bar ? "   " : "");
        return line_;
    }

    progress_style style_;
    std::size_t epoch_, epochs_, total_, start_pos_, next_log_;
    clock::time_point start_, last_draw_;
    char line_[256] = "";
};

}  // namespace train
