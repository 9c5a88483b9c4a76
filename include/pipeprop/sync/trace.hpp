// pipeprop/sync/trace.hpp: timelines of pipeline steps from op spans (sync/op_span.hpp): Chrome trace-event JSON
// (opens in Perfetto, ui.perfetto.dev, and chrome://tracing) and an SVG Gantt chart.
//
// The executors record spans in seconds; the simulator's spans are in the unit of its costs (seconds when the costs
// were measured). A trace_track names one source of spans (e.g. "measured" and "simulated") and its unit; each
// track becomes one trace process whose threads are the stages, so a measured step and its prediction can be
// compared in one view. Event format: the trace-event format's complete events ("ph": "X", ts and dur in
// microseconds) plus process_name / thread_name metadata events.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pipeprop/sync/op_span.hpp"

namespace pipeprop::sync {

/// One source of spans in a trace: a name (the trace process), the spans, and seconds per unit of their times
/// (1 for executor spans and measured costs; any positive value for unit-cost simulations).
struct trace_track {
    std::string name;  ///< The track's name (a trace process).
    std::vector<op_span> spans;  ///< Its spans.
    double seconds_per_unit = 1;  ///< Seconds per unit of the spans' times (> 0).
};

namespace detail {
inline std::string json_escape(std::string_view s) {
    std::string r;
    for (const char c : s) {
        switch (c) {
            case '"': r += "\\\""; break;
            case '\\': r += "\\\\"; break;
            case '\n': r += "\\n"; break;
            case '\t': r += "\\t"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
                    r += buf;
                } else {
                    r += c;
                }
        }
    }
    return r;
}
inline std::string xml_escape(std::string_view s) {
    std::string r;
    for (const char c : s) {
        switch (c) {
            case '<': r += "&lt;"; break;
            case '>': r += "&gt;"; break;
            case '&': r += "&amp;"; break;
            case '"': r += "&quot;"; break;
            default: r += c;
        }
    }
    return r;
}
// Shortest round-trip-safe text of a double (no locale).
inline std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}
// A reserved Chrome trace colour name per kind (Perfetto chooses its own colours by name).
constexpr std::string_view chrome_color(span_kind k) noexcept {
    switch (k) {
        case span_kind::forward: return "thread_state_running";
        case span_kind::backward_input: return "rail_response";
        case span_kind::backward_weight: return "rail_animation";
        case span_kind::backward_fused: return "rail_load";
        case span_kind::optimizer: return "terrible";
    }
    return "generic_work";
}
constexpr std::string_view svg_color(span_kind k) noexcept {
    switch (k) {
        case span_kind::forward: return "#4c9a2a";
        case span_kind::backward_input: return "#2a6fb0";
        case span_kind::backward_weight: return "#e0a030";
        case span_kind::backward_fused: return "#7a4fb0";
        case span_kind::optimizer: return "#b03030";
    }
    return "#888888";
}
}  // namespace detail

/// Writes the tracks as one Chrome trace-event JSON object {"displayTimeUnit": "ms", "traceEvents": [...]}:
/// per track a process (pid = track index) named after it, per stage a thread "stage s" (tid = s), per span a
/// complete event named "<kind> <micro-batch>" ("optimizer" alone) with category the kind and args {micro_batch,
/// step}. Throws std::invalid_argument for a seconds_per_unit <= 0.
inline void write_chrome_trace(std::ostream& os, const std::vector<trace_track>& tracks) {
    os << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
    bool first = true;
    auto sep = [&] {
        if (!first) os << ",\n";
        first = false;
    };
    for (std::size_t t = 0; t < tracks.size(); ++t) {
        const auto& tr = tracks[t];
        if (!(tr.seconds_per_unit > 0))
            throw std::invalid_argument("pipeprop::sync::write_chrome_trace: track '" + tr.name +
                                        "' has seconds_per_unit <= 0");
        sep();
        os << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << t << ",\"args\":{\"name\":\""
           << detail::json_escape(tr.name) << "\"}}";
        std::size_t stages = 0;
        for (const auto& sp : tr.spans) stages = std::max(stages, sp.stage + 1);
        for (std::size_t s = 0; s < stages; ++s) {
            sep();
            os << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << t << ",\"tid\":" << s
               << ",\"args\":{\"name\":\"stage " << s << "\"}}";
            sep();
            os << "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" << t << ",\"tid\":" << s
               << ",\"args\":{\"sort_index\":" << s << "}}";
        }
        const double us = tr.seconds_per_unit * 1e6;
        for (const auto& sp : tr.spans) {
            sep();
            os << "{\"name\":\"" << trace_name(sp.kind);
            if (sp.kind != span_kind::optimizer) os << ' ' << sp.micro_batch;
            os << "\",\"cat\":\"" << trace_name(sp.kind) << "\",\"ph\":\"X\",\"ts\":"
               << detail::number(sp.start * us) << ",\"dur\":" << detail::number((sp.end - sp.start) * us)
               << ",\"pid\":" << t << ",\"tid\":" << sp.stage << ",\"cname\":\"" << detail::chrome_color(sp.kind)
               << "\",\"args\":{\"micro_batch\":" << sp.micro_batch << ",\"step\":" << sp.step << "}}";
        }
    }
    os << "]}\n";
}

/// Writes an SVG Gantt chart of one track: one row per stage (stage 0 on top), one rectangle per span coloured by
/// kind (F green, p1 blue, p2 orange, fused p1+p2 purple, optimizer red) and labelled with its micro-batch when
/// wide enough (a tooltip gives kind, micro-batch, start and end), a time axis in the spans' own unit (`unit` is
/// only its label, e.g. "s" or "T"), a legend and the track name as title. 1000 px wide plus margins.
inline void write_svg_gantt(std::ostream& os, const trace_track& tr, std::string_view unit = "s") {
    std::size_t stages = 0;
    double t_end = 0;
    for (const auto& sp : tr.spans) {
        stages = std::max(stages, sp.stage + 1);
        t_end = std::max(t_end, sp.end);
    }
    if (t_end <= 0) t_end = 1;
    constexpr double left = 80, top = 40, row = 28, width = 1000, gap = 4;
    const double height = top + static_cast<double>(stages) * row + 70;
    const double scale = width / t_end;
    os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 20 << "\" height=\"" << height
       << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
    os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    os << "<text x=\"" << left << "\" y=\"20\" font-size=\"14\">" << detail::xml_escape(tr.name) << "</text>\n";
    for (std::size_t s = 0; s < stages; ++s) {
        const double y = top + static_cast<double>(s) * row;
        os << "<text x=\"8\" y=\"" << y + row / 2 + 4 << "\">stage " << s << "</text>\n";
        os << "<rect x=\"" << left << "\" y=\"" << y << "\" width=\"" << width << "\" height=\"" << row - gap
           << "\" fill=\"#f2f2f2\"/>\n";
    }
    for (const auto& sp : tr.spans) {
        const double x = left + sp.start * scale, w = std::max(0.5, (sp.end - sp.start) * scale);
        const double y = top + static_cast<double>(sp.stage) * row;
        os << "<rect x=\"" << detail::number(x) << "\" y=\"" << y << "\" width=\"" << detail::number(w)
           << "\" height=\"" << row - gap << "\" fill=\"" << detail::svg_color(sp.kind)
           << "\" stroke=\"white\" stroke-width=\"0.5\"><title>" << trace_name(sp.kind);
        if (sp.kind != span_kind::optimizer) os << " micro-batch " << sp.micro_batch;
        os << ": " << detail::number(sp.start) << " - " << detail::number(sp.end) << " " << detail::xml_escape(unit)
           << "</title></rect>\n";
        if (sp.kind != span_kind::optimizer && w >= 12)
            os << "<text x=\"" << detail::number(x + w / 2) << "\" y=\"" << y + row / 2 + 2
               << "\" text-anchor=\"middle\" fill=\"white\">" << sp.micro_batch << "</text>\n";
    }
    const double axis_y = top + static_cast<double>(stages) * row + 4;
    os << "<line x1=\"" << left << "\" y1=\"" << axis_y << "\" x2=\"" << left + width << "\" y2=\"" << axis_y
       << "\" stroke=\"black\"/>\n";
    for (int i = 0; i <= 10; ++i) {
        const double t = t_end * i / 10.0, x = left + t * scale;
        char label[32];
        std::snprintf(label, sizeof label, "%.3g", t);
        os << "<line x1=\"" << x << "\" y1=\"" << axis_y << "\" x2=\"" << x << "\" y2=\"" << axis_y + 4
           << "\" stroke=\"black\"/><text x=\"" << x << "\" y=\"" << axis_y + 16 << "\" text-anchor=\"middle\">"
           << label << "</text>\n";
    }
    os << "<text x=\"" << left + width << "\" y=\"" << axis_y + 30 << "\" text-anchor=\"end\">time ("
       << detail::xml_escape(unit) << ")</text>\n";
    double lx = left;
    for (auto k : {span_kind::forward, span_kind::backward_input, span_kind::backward_weight, span_kind::backward_fused,
                   span_kind::optimizer}) {
        os << "<rect x=\"" << lx << "\" y=\"" << axis_y + 36 << "\" width=\"12\" height=\"12\" fill=\""
           << detail::svg_color(k) << "\"/><text x=\"" << lx + 16 << "\" y=\"" << axis_y + 46 << "\">"
           << trace_name(k) << "</text>\n";
        lx += 90;
    }
    os << "</svg>\n";
}

namespace detail {
template <class Write>
void write_file(const std::string& path, const char* who, Write write) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f)
        throw std::runtime_error(std::string("pipeprop::sync::") + who + ": cannot open '" + path + "' for writing");
    write(f);
    f.flush();
    if (!f) throw std::runtime_error(std::string("pipeprop::sync::") + who + ": writing '" + path + "' failed");
}
}  // namespace detail

/// write_chrome_trace into the file at path (created or replaced). Throws std::runtime_error naming the path when
/// it cannot be written.
inline void write_chrome_trace_file(const std::string& path, const std::vector<trace_track>& tracks) {
    detail::write_file(path, "write_chrome_trace_file", [&](std::ostream& os) { write_chrome_trace(os, tracks); });
}
/// write_svg_gantt into the file at path. Throws std::runtime_error naming the path when it cannot be written.
inline void write_svg_gantt_file(const std::string& path, const trace_track& track, std::string_view unit = "s") {
    detail::write_file(path, "write_svg_gantt_file", [&](std::ostream& os) { write_svg_gantt(os, track, unit); });
}

}  // namespace pipeprop::sync
