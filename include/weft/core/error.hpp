// weft::error and the helpers that build its messages.
// Every error weft raises names the parameter, the value it received and what
// would have been valid, so a user can fix the call without reading the source.
#pragma once

#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace weft {

// The one exception type weft throws for bad input and failed operations.
class error : public std::runtime_error {
public:
    explicit error(const std::string& message) : std::runtime_error(std::string("weft: ").append(message)) {}
};

// A message without weft::error's "weft: ", to quote it inside another message (or throw it
// again as a weft::error without doubling the prefix).
[[nodiscard]] inline std::string unprefixed(std::string_view message) {
    constexpr std::string_view prefix = "weft: ";
    if (message.substr(0, prefix.size()) == prefix) message.remove_prefix(prefix.size());
    return std::string(message);
}
[[nodiscard]] inline std::string unprefixed(const std::exception& e) { return unprefixed(std::string_view(e.what())); }

namespace detail {

template <class T>
std::string to_display_string(const T& value) {
    if constexpr (std::is_convertible_v<const T&, std::string_view>) {
        // Appended piecewise: GCC 12 at -O3 warns falsely (-Wrestrict, bug 105329)
        // on chained operator+ of string literals and strings.
        std::string quoted;
        quoted.reserve(std::string_view(value).size() + 2);
        quoted.push_back('"');
        quoted.append(std::string_view(value));
        quoted.push_back('"');
        return quoted;
    } else {
        std::ostringstream out;
        out << value;
        return out.str();
    }
}

}  // namespace detail

// Builds the canonical message: "<parameter> = <value> is invalid: <expected>".
template <class T>
[[nodiscard]] error invalid_argument(std::string_view parameter, const T& value,
                                     std::string_view expected) {
    std::string message(parameter);
    message.append(" = ").append(detail::to_display_string(value)).append(" is invalid: ").append(expected);
    return error(message);
}

// Throws invalid_argument(...) unless `condition` holds. Usable in constexpr
// functions: the throw is only reached (and only then an error) when it fails.
template <class T>
constexpr void require(bool condition, std::string_view parameter, const T& value,
                       std::string_view expected) {
    if (!condition) throw invalid_argument(parameter, value, expected);
}

}  // namespace weft
