// A flat JSON object's numeric fields: {"forward_ms_per_sample": 1.5, "ms": 41.2, "name": "x"}
// read into name -> number. Enough for the planner's two inputs, a cost model file and a
// step log line (train::format_step_json), which are flat objects of numbers; strings,
// booleans and null are read and left out, a nested object or array is refused.
#pragma once

#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "weft/core/error.hpp"

namespace weft::plan {

namespace detail {

class flat_json_reader {
public:
    flat_json_reader(std::string_view text, std::string_view where) : text_(text), where_(where) {}

    [[nodiscard]] std::map<std::string, double> object() {
        std::map<std::string, double> fields;
        expect('{');
        if (peek() == '}') {
            ++at_;
            return finish(fields);
        }
        while (true) {
            const std::string key = string();
            expect(':');
            skip_space();
            const char c = at_ < text_.size() ? text_[at_] : '\0';
            if (c == '"') {
                static_cast<void>(string());
            } else if (c == '{' || c == '[') {
                fail("field \"" + key + "\" is an object or array; the planner reads flat objects of numbers");
            } else if (word("null") || word("true") || word("false")) {
            } else {
                fields[key] = number(key);
            }
            const char next = peek();
            ++at_;
            if (next == '}') return finish(fields);
            if (next != ',') fail("expected ',' or '}' at offset " + std::to_string(at_ - 1));
        }
    }

private:
    [[noreturn]] void fail(const std::string& why) const {
        throw invalid_argument(where_, std::string(text_.substr(0, 80)), "must be one flat JSON object: " + why);
    }
    void skip_space() {
        while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_])) != 0) ++at_;
    }
    [[nodiscard]] char peek() {
        skip_space();
        return at_ < text_.size() ? text_[at_] : '\0';
    }
    void expect(char c) {
        if (peek() != c) fail(std::string("expected '") + c + "' at offset " + std::to_string(at_));
        ++at_;
    }
    [[nodiscard]] bool word(std::string_view w) {
        if (text_.substr(at_, w.size()) != w) return false;
        at_ += w.size();
        return true;
    }
    [[nodiscard]] std::string string() {
        expect('"');
        std::string out;
        while (at_ < text_.size() && text_[at_] != '"') {
            if (text_[at_] == '\\' && at_ + 1 < text_.size()) ++at_;  // escapes kept as their character
            out += text_[at_++];
        }
        if (at_ >= text_.size()) fail("a string is not closed");
        ++at_;
        return out;
    }
    [[nodiscard]] double number(const std::string& key) {
        const std::size_t start = at_;
        while (at_ < text_.size() && std::string_view("+-0123456789.eE").find(text_[at_]) != std::string_view::npos)
            ++at_;
        const std::string digits(text_.substr(start, at_ - start));
        char* end = nullptr;
        const double value = digits.empty() ? 0.0 : std::strtod(digits.c_str(), &end);
        if (digits.empty() || end != digits.c_str() + digits.size())
            fail("field \"" + key + "\" is not a number");
        return value;
    }
    [[nodiscard]] std::map<std::string, double> finish(std::map<std::string, double>& fields) {
        if (peek() != '\0') fail("text follows the object at offset " + std::to_string(at_));
        return std::move(fields);
    }

    std::string_view text_;
    std::string where_;
    std::size_t at_ = 0;
};

}  // namespace detail

// The numeric fields of the one flat JSON object `text`; `where` names the input in errors
// ("--costs costs.json"). Strings, booleans and null are skipped.
[[nodiscard]] inline std::map<std::string, double> read_flat_json(std::string_view text,
                                                                  std::string_view where = "json") {
    return detail::flat_json_reader(text, where).object();
}

}  // namespace weft::plan
