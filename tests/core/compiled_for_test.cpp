// What a program says it was built for (core/compiled_for.hpp): the macro reads the flags of the
// file that uses it, and the description names the CPU's extensions the build leaves unused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "weft/core/compiled_for.hpp"

#ifdef WEFT_TEST_AVX2_FILE
// compiled_for_avx2.cpp, compiled with -mavx2 -mfma.
const char* compiled_for_in_avx2_file();
#endif

TEST_CASE("WEFT_COMPILED_FOR names the architecture and the extensions of the file's flags", "[core]") {
    const std::string here = WEFT_COMPILED_FOR;
#if defined(__x86_64__)
    CHECK(here.rfind("x86-64", 0) == 0);
#endif
    CHECK(!here.empty());
#ifdef WEFT_TEST_AVX2_FILE
    // Another file of the same program, compiled for more, says so: each file reads its own flags.
    const std::string avx2 = compiled_for_in_avx2_file();
    INFO(avx2);
    CHECK(avx2.rfind("x86-64", 0) == 0);
    CHECK(avx2.find(" AVX2") != std::string::npos);
    CHECK(avx2.find(" FMA") != std::string::npos);
    CHECK(avx2.find(" AVX ") != std::string::npos);
#endif
}

TEST_CASE("the build target's description names the CPU's extensions the build does not use", "[core]") {
    CHECK(weft::describe_build_target("x86-64", {}) == "built for x86-64");
    CHECK(weft::describe_build_target("x86-64 AVX AVX2 FMA", {"AVX", "AVX2", "FMA"}) ==
          "built for x86-64 AVX AVX2 FMA");
    CHECK(weft::describe_build_target("x86-64 SSE4.2", {"SSE4.2", "AVX", "AVX2", "FMA", "AVX-512"}) ==
          "built for x86-64 SSE4.2; the CPU also has AVX AVX2 FMA AVX-512 (unused: build with -march=native)");
    // "AVX" is not taken for a part of "AVX2" or "AVX-512".
    CHECK(weft::describe_build_target("x86-64 AVX2", {"AVX", "AVX2"}) ==
          "built for x86-64 AVX2; the CPU also has AVX (unused: build with -march=native)");
}

TEST_CASE("the CPU's extensions are among those the build target names", "[core]") {
    const std::vector<std::string> known = {"SSE4.2", "AVX", "AVX2", "FMA", "AVX-512"};
    for (const std::string& extension : weft::cpu_instruction_sets()) {
        INFO(extension);
        CHECK(std::find(known.begin(), known.end(), extension) != known.end());
    }
}
