// The action IR and its PyTorch text form.
#include <catch2/catch.hpp>

#include <string>

#include "weft/sched/action.hpp"

using weft::sched::action;
using weft::sched::action_kind;
using weft::sched::parse_action;

static_assert(weft::sched::to_string(action{action_kind::F, 2, 0}) == "2F0");
static_assert(weft::sched::to_string(action{action_kind::REDUCE_GRAD, 0, -1}) == "0REDUCE_GRAD");
static_assert(parse_action("3SEND_F1") == action{action_kind::SEND_F, 3, 1});
static_assert(parse_action("12RECV_B345") == action{action_kind::RECV_B, 12, 345});

TEST_CASE("is_compute and is_comm classify every kind", "[sched][action]") {
    using enum action_kind;
    for (auto k : {F, B, I, W, OVERLAP_F_B}) {
        CHECK(weft::sched::is_compute(k));
        CHECK_FALSE(weft::sched::is_comm(k));
    }
    for (auto k : {SEND_F, RECV_F, SEND_B, RECV_B}) {
        CHECK(weft::sched::is_comm(k));
        CHECK_FALSE(weft::sched::is_compute(k));
    }
    for (auto k : {REDUCE_GRAD, UNSHARD, RESHARD}) {
        CHECK_FALSE(weft::sched::is_comm(k));
        CHECK_FALSE(weft::sched::is_compute(k));
        CHECK_FALSE(weft::sched::has_microbatch(k));
    }
}

TEST_CASE("action text matches PyTorch's _Action form", "[sched][action]") {
    using weft::sched::to_string;
    using enum action_kind;
    CHECK(to_string(action{F, 2, 0}) == "2F0");
    CHECK(to_string(action{I, 1, 3}) == "1I3");
    CHECK(to_string(action{W, 0, 3}) == "0W3");
    CHECK(to_string(action{B, 10, 27}) == "10B27");
    CHECK(to_string(action{SEND_F, 3, 1}) == "3SEND_F1");
    CHECK(to_string(action{RECV_F, 4, 1}) == "4RECV_F1");
    CHECK(to_string(action{SEND_B, 1, 0}) == "1SEND_B0");
    CHECK(to_string(action{RECV_B, 0, 0}) == "0RECV_B0");
    CHECK(to_string(action{REDUCE_GRAD, 0, -1}) == "0REDUCE_GRAD");
    CHECK(to_string(action{UNSHARD, 5, -1}) == "5UNSHARD");
    CHECK(to_string(action{RESHARD, 5, -1}) == "5RESHARD");
    CHECK(to_string(action{OVERLAP_F_B, 1, 2}) == "1OVERLAP_F_B2");
}

TEST_CASE("every action kind survives a text round trip", "[sched][action]") {
    for (std::size_t k = 0; k < weft::sched::action_kind_names.size(); ++k) {
        const auto kind = static_cast<action_kind>(k);
        for (int stage : {0, 7, 123}) {
            for (int mb : {0, 9, 4567}) {
                const action a{kind, stage, weft::sched::has_microbatch(kind) ? mb : -1};
                const std::string text = weft::sched::to_string(a);
                INFO(text);
                CHECK(parse_action(text) == a);
                CHECK(weft::sched::to_string(parse_action(text)) == text);
            }
        }
    }
}

TEST_CASE("parse_action rejects malformed text, naming it and the valid form", "[sched][action]") {
    const char* bad[] = {"",       "F0",          "0",          "0X1",       "0f1",
                         "0F",     "0REDUCE_GRAD1", "0F0 ",     " 0F0",      "-1F0",
                         "0F-1",   "0SEND_F",     "0F0B",       "0SENDF1",   "0F1234567890",
                         "12345678901F0"};
    for (const char* text : bad) {
        INFO(text);
        try {
            (void)parse_action(text);
            FAIL("accepted " << text);
        } catch (const weft::error& e) {
            const std::string message = e.what();
            CHECK(message.find(std::string("\"") + text + "\"") != std::string::npos);
            CHECK(message.find("action") != std::string::npos);
            CHECK(message.find("2F0") != std::string::npos);
        }
    }
    CHECK_THROWS_WITH(parse_action("0X1"), Catch::Contains("\"X\" is not an action kind"));
    CHECK_THROWS_WITH(parse_action("0F"), Catch::Contains("needs a microbatch"));
    CHECK_THROWS_WITH(parse_action("0UNSHARD3"), Catch::Contains("takes no microbatch"));
}
