// schedule_kind on descriptions made up here: core/ knows no schedule, only the shape of
// a description, so these tests need nothing from sched/.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "weft/core/schedule_kind.hpp"

namespace {

using weft::chunk_rule;
using weft::schedule_kind;

constexpr schedule_kind::description single{
    .name = "single", .chunks = {.min = 1, .max = 1, .default_count = 1, .why = "runs one stage per rank"},
    .min_microbatches_per_rank = 1};
constexpr schedule_kind::description paired{
    .name = "paired", .chunks = {.min = 2, .max = 2, .default_count = 2, .why = "places two stages per rank in a V"}};
constexpr schedule_kind::description looped{
    .name = "looped", .chunks = {.min = 1, .max = 0, .default_count = 2, .why = "runs any number of stages per rank"},
    .min_microbatches_per_rank = 2};
constexpr schedule_kind::description ranged{
    .name = "ranged", .chunks = {.min = 2, .max = 4, .default_count = 3, .why = "runs two to four stages per rank"}};
// Another description with the same name: the kinds compare by name, so it is the same schedule.
constexpr schedule_kind::description single_again = single;

static_assert(!schedule_kind{}.chosen());
static_assert(schedule_kind{}.name() == "none");
static_assert(schedule_kind{}.default_chunks() == 1);
static_assert(schedule_kind{single}.chosen());
static_assert(weft::to_string(schedule_kind{paired}) == "paired");
static_assert(schedule_kind{looped}.default_chunks() == 2);
static_assert(schedule_kind{ranged}.default_chunks() == 3);
static_assert(schedule_kind{single} == schedule_kind{single_again});
static_assert(schedule_kind{single} != schedule_kind{paired});
static_assert(schedule_kind{} == schedule_kind{});
static_assert(schedule_kind{} != schedule_kind{single});

static_assert(looped.chunks.allows(1) && looped.chunks.allows(1000) && !looped.chunks.allows(0));
static_assert(!ranged.chunks.allows(1) && ranged.chunks.allows(2) && ranged.chunks.allows(4));
static_assert(!ranged.chunks.allows(5));

// A layout that runs passes check_layout in a constant expression.
constexpr bool accepted = (schedule_kind{paired}.check_layout(4, 1, 2), schedule_kind{}.check_layout(4, 1, 7), true);
static_assert(accepted);

}  // namespace

TEST_CASE("check_layout names chunks or microbatches in today's wording", "[core][schedule_kind]") {
    CHECK_THROWS_WITH(schedule_kind{single}.check_layout(4, 8, 2),
                      "weft: chunks = 2 is invalid: schedule single runs one stage per rank; valid: 1");
    CHECK_THROWS_WITH(schedule_kind{paired}.check_layout(4, 8, 3),
                      "weft: chunks = 3 is invalid: schedule paired places two stages per rank in a V; valid: 2");
    CHECK_THROWS_WITH(schedule_kind{looped}.check_layout(4, 8, 0),
                      "weft: chunks = 0 is invalid: schedule looped runs any number of stages per rank; "
                      "valid: at least 1");
    CHECK_THROWS_WITH(schedule_kind{ranged}.check_layout(4, 8, 5), Catch::EndsWith("; valid: 2 to 4"));
    CHECK_THROWS_WITH(schedule_kind{single}.check_layout(4, 2, 1),
                      "weft: microbatches = 2 is invalid: schedule single needs at least as many micro-batches as "
                      "pipeline stages (pp = 4)");
    CHECK_THROWS_WITH(schedule_kind{looped}.check_layout(4, 7, 1),
                      "weft: microbatches = 7 is invalid: schedule looped needs at least 2 micro-batches per pipeline "
                      "stage (pp = 4)");
    CHECK_NOTHROW(schedule_kind{single}.check_layout(4, 4, 1));
    CHECK_NOTHROW(schedule_kind{looped}.check_layout(4, 8, 9));
    // With none chosen any layout passes: the engine's set decides later.
    CHECK_NOTHROW(schedule_kind{}.check_layout(4, 1, 3));
}

TEST_CASE("a schedule_kind prints as its name", "[core][schedule_kind]") {
    std::ostringstream out;
    out << schedule_kind{ranged} << ' ' << schedule_kind{};
    CHECK(out.str() == "ranged none");
    CHECK(chunk_rule{.min = 1, .max = 0}.valid_text() == "at least 1");
    CHECK(chunk_rule{.min = 2, .max = 2}.valid_text() == "2");
}
