// A list of types, and the few compile-time operations weft needs on one: its size, its
// first member, membership, a member's index, applying it to a template and visiting each
// member in order. weft writes a set of policies down once as a type_list and derives the
// rest (name lists, parsing, dispatch, any_of sets) from it.
#pragma once

#include <cstddef>
#include <type_traits>

namespace weft {

// Holds no values; it only carries Ts... around as one type.
template <class... Ts>
struct type_list {
    static constexpr std::size_t size = sizeof...(Ts);
};

namespace detail {

// Each primary template's only body is a static_assert, so a non-list argument gets one
// message that names what was expected rather than an "incomplete type" error.
template <class List, template <class...> class Template>
struct apply_list {
    static_assert(sizeof(List) == 0, "weft: apply_list_t<List, Template> needs a weft::type_list<...> as List");
};
template <class... Ts, template <class...> class Template>
struct apply_list<type_list<Ts...>, Template> {
    using type = Template<Ts...>;
};

template <class List>
struct list_front {
    static_assert(sizeof(List) == 0, "weft: list_front_t<List> needs a non-empty weft::type_list<...>");
};
template <class T, class... Ts>
struct list_front<type_list<T, Ts...>> {
    using type = T;
};

template <class List, class T>
struct list_contains {
    static_assert(sizeof(List) == 0, "weft: list_contains_v<List, T> needs a weft::type_list<...> as List");
};
template <class... Ts, class T>
struct list_contains<type_list<Ts...>, T> : std::bool_constant<(std::is_same_v<Ts, T> || ...)> {};

template <class List, class T>
struct list_index {
    static_assert(sizeof(List) == 0, "weft: list_index_v<List, T> needs a weft::type_list<...> as List");
};
template <class... Ts, class T>
struct list_index<type_list<Ts...>, T> {
    static_assert((std::is_same_v<Ts, T> || ...), "weft: list_index_v<List, T>: T is not a member of List");
    static constexpr std::size_t value = [] {
        std::size_t index = 0;
        // Stops at the first match: || short-circuits the fold.
        (void)((std::is_same_v<Ts, T> ? true : (++index, false)) || ...);
        return index;
    }();
};

}  // namespace detail

// Template<Ts...> for List = type_list<Ts...>, e.g. apply_list_t<schedule_list, any_of>.
template <class List, template <class...> class Template>
using apply_list_t = typename detail::apply_list<List, Template>::type;

// The first member of a non-empty list.
template <class List>
using list_front_t = typename detail::list_front<List>::type;

template <class List, class T>
inline constexpr bool list_contains_v = detail::list_contains<List, T>::value;

// Position of the first T in List (0-based); a static_assert when T is not a member.
template <class List, class T>
inline constexpr std::size_t list_index_v = detail::list_index<List, T>::value;

// Calls f(std::type_identity<T>{}) for each member T in order; usable in constexpr code.
template <class... Ts, class F>
constexpr void for_each_type(type_list<Ts...>, F&& f) {
    (f(std::type_identity<Ts>{}), ...);
}

}  // namespace weft
