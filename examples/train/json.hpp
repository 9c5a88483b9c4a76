// examples/train/json.hpp: a flat JSON object written as one line (the main program's result line and the
// per-epoch metrics lines). Keys keep insertion order; non-finite numbers become null.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace train {

/// Builder of a one-line JSON object: json_line().add("mode", "sgd").add("batch", 32).str()
/// == {"mode":"sgd","batch":32}. Strings are escaped per RFC 8259; doubles use the shortest text that reads back
/// exactly; NaN and infinities are written as null.
class json_line {
public:
    json_line& add(std::string_view key, std::string_view value) {
        key_(key);
        quote(value);
        return *this;
    }
    json_line& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
    json_line& add(std::string_view key, const std::string& value) { return add(key, std::string_view(value)); }
    json_line& add(std::string_view key, bool value) {
        key_(key);
        out_ += value ? "true" : "false";
        return *this;
    }
    template <class N>
        requires(std::is_arithmetic_v<N> && !std::is_same_v<N, bool>)
    json_line& add(std::string_view key, N value) {
        key_(key);
        if constexpr (std::is_floating_point_v<N>) {
            if (!std::isfinite(value)) {
                out_ += "null";
                return *this;
            }
        }
        fmt::format_to(std::back_inserter(out_), "{}", value);  // shortest text that reads back exactly
        return *this;
    }
    /// Adds an array of numbers (non-finite ones as null).
    json_line& add(std::string_view key, std::span<const double> values) {
        key_(key);
        out_ += '[';
        for (std::size_t i = 0; i < values.size(); ++i) {
            if (i > 0) out_ += ',';
            if (std::isfinite(values[i]))
                fmt::format_to(std::back_inserter(out_), "{}", values[i]);
            else
                out_ += "null";
        }
        out_ += ']';
        return *this;
    }
    /// Adds `null` for key.
    json_line& add_null(std::string_view key) {
        key_(key);
        out_ += "null";
        return *this;
    }
    /// The object as one line, without a line break.
    [[nodiscard]] std::string str() const { return out_ + "}"; }

private:
    void key_(std::string_view key) {
        out_ += out_.size() > 1 ? "," : "";
        quote(key);
        out_ += ':';
    }
    void quote(std::string_view s) {
        out_ += '"';
        for (const char ch : s) {
            const auto c = static_cast<unsigned char>(ch);
            switch (c) {
                case '"': out_ += "\\\""; break;
                case '\\': out_ += "\\\\"; break;
                case '\n': out_ += "\\n"; break;
                case '\r': out_ += "\\r"; break;
                case '\t': out_ += "\\t"; break;
                default:
                    if (c < 0x20) {
                        fmt::format_to(std::back_inserter(out_), "\\u{:04x}", static_cast<unsigned>(c));
                    } else {
                        out_ += ch;
                    }
            }
        }
        out_ += '"';
    }
    std::string out_ = "{";
};

}  // namespace train
