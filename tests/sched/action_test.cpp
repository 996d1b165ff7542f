// The action IR and its PyTorch text form.
#include <catch2/catch.hpp>

#include <string>
#include <utility>

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
    CHECK(to_string(weft::sched::overlap_f_b({F, 0, 7}, {B, 7, 3})) == "(0F7;7B3)OVERLAP_F_B");
    CHECK(to_string(weft::sched::overlap_f_b({F, 2, 0}, {I, 5, 1})) == "(2F0;5I1)OVERLAP_F_B");
}

TEST_CASE("every action kind survives a text round trip", "[sched][action]") {
    for (std::size_t k = 0; k < weft::sched::action_kind_names.size(); ++k) {
        const auto kind = static_cast<action_kind>(k);
        if (kind == action_kind::OVERLAP_F_B) continue;  // its own test below
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

// OVERLAP_F_B: DualPipe's overlapped pair, written as PyTorch writes it.
static_assert(parse_action("(0F7;7B3)OVERLAP_F_B") ==
              weft::sched::overlap_f_b({action_kind::F, 0, 7}, {action_kind::B, 7, 3}));
static_assert(weft::sched::to_string(parse_action("(12F0;3I45)OVERLAP_F_B")) ==
              "(12F0;3I45)OVERLAP_F_B");
static_assert(weft::sched::forward_part(parse_action("(0F7;7B3)OVERLAP_F_B")) ==
              action{action_kind::F, 0, 7});
static_assert(weft::sched::backward_part(parse_action("(0F7;7I3)OVERLAP_F_B")) ==
              action{action_kind::I, 7, 3});
// The new fields default, so {kind, stage, microbatch} keeps meaning what it did.
static_assert(action{action_kind::F, 1, 2} == action{action_kind::F, 1, 2, action_kind::B, -1, -1});

TEST_CASE("OVERLAP_F_B pairs a forward with a backward and round-trips as text",
          "[sched][action]") {
    using enum action_kind;
    using weft::sched::backward_part;
    using weft::sched::forward_part;
    using weft::sched::overlap_f_b;
    for (action_kind backward_kind : {B, I}) {
        for (int fs : {0, 7, 123}) {
            for (int fmb : {0, 9, 4567}) {
                const action a = overlap_f_b({F, fs, fmb}, {backward_kind, fs + 3, fmb / 2});
                CHECK(a.kind == OVERLAP_F_B);
                CHECK(forward_part(a) == action{F, fs, fmb});
                CHECK(backward_part(a) == action{backward_kind, fs + 3, fmb / 2});
                const std::string text = weft::sched::to_string(a);
                INFO(text);
                CHECK(parse_action(text) == a);
                CHECK(weft::sched::to_string(parse_action(text)) == text);
            }
        }
    }
    CHECK_THROWS_WITH(overlap_f_b({B, 0, 0}, {B, 1, 0}),
                      Catch::Contains("overlap_f_b forward = \"0B0\"") && Catch::Contains("must be an F"));
    CHECK_THROWS_WITH(overlap_f_b({F, 0, 0}, {W, 1, 0}),
                      Catch::Contains("overlap_f_b backward = \"1W0\"") &&
                          Catch::Contains("must be a B or an I"));
    CHECK_THROWS_WITH(overlap_f_b({F, 0, 0}, {F, 1, 0}), Catch::Contains("must be a B or an I"));
}

TEST_CASE("parse_action rejects malformed OVERLAP_F_B text", "[sched][action]") {
    const std::pair<const char*, const char*> bad[] = {
        {"0OVERLAP_F_B1", "names its two parts"},
        {"(0F7;7B3)", "must end in \")OVERLAP_F_B\""},
        {"(0F7;7B3)OVERLAP_F_B1", "must end in"},
        {"(0F7;7B3", "must end in"},
        {"(0F7 7B3)OVERLAP_F_B", "separated by ';'"},
        {"(0B7;7F3)OVERLAP_F_B", "first part of an OVERLAP_F_B must be an F"},
        {"(0F7;7W3)OVERLAP_F_B", "second part of an OVERLAP_F_B must be a B or an I"},
        {"(0F7;7B)OVERLAP_F_B", "needs a microbatch"},
        {"(0F7;X)OVERLAP_F_B", "does not start with a stage number"},
        {"(0F7;7B3;1F0)OVERLAP_F_B", "unexpected text"},
        {"((0F7;7B3)OVERLAP_F_B;1B0)OVERLAP_F_B", "must end in"},
    };
    for (const auto& [text, reason] : bad) {
        INFO(text);
        try {
            (void)parse_action(text);
            FAIL("accepted " << text);
        } catch (const weft::error& e) {
            const std::string message = e.what();
            CHECK(message.find(std::string("\"") + text + "\"") != std::string::npos);
            CHECK(message.find(reason) != std::string::npos);
            CHECK(message.find("(0F7;7B3)OVERLAP_F_B") != std::string::npos);
        }
    }
}
