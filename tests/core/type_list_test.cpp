// weft::type_list and its operations, all at compile time.
#include <catch2/catch.hpp>

#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "weft/core/type_list.hpp"

namespace {

using three = weft::type_list<int, double, char>;

static_assert(three::size == 3);
static_assert(weft::type_list<>::size == 0);
static_assert(std::is_same_v<weft::apply_list_t<three, std::tuple>, std::tuple<int, double, char>>);
static_assert(std::is_same_v<weft::list_front_t<three>, int>);
static_assert(weft::list_contains_v<three, double>);
static_assert(!weft::list_contains_v<three, float>);
static_assert(!weft::list_contains_v<weft::type_list<>, int>);
static_assert(weft::list_index_v<three, int> == 0);
static_assert(weft::list_index_v<three, char> == 2);
static_assert(weft::list_index_v<weft::type_list<int, char, int>, int> == 0);  // the first match

// for_each_type runs in constant expressions too.
constexpr std::size_t total_size = [] {
    std::size_t sum = 0;
    weft::for_each_type(three{}, [&sum]<class T>(std::type_identity<T>) { sum += sizeof(T); });
    return sum;
}();
static_assert(total_size == sizeof(int) + sizeof(double) + sizeof(char));

}  // namespace

TEST_CASE("for_each_type visits the members in order", "[core][type_list]") {
    std::vector<std::string> seen;
    weft::for_each_type(three{}, [&seen]<class T>(std::type_identity<T>) {
        if constexpr (std::is_same_v<T, int>) seen.push_back("int");
        else if constexpr (std::is_same_v<T, double>) seen.push_back("double");
        else seen.push_back("char");
    });
    CHECK(seen == std::vector<std::string>{"int", "double", "char"});
}
