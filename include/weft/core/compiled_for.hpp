// What a program was compiled for, for its header line: the instruction-set extensions the
// compiler could use, and those the running CPU has beyond them. A GEMM built for plain x86-64
// runs several times slower than one built for the AVX2 and FMA units the CPU has, and a user
// reading a slow step time should see at once which build they ran.
//
// WEFT_COMPILED_FOR is a macro, not a function: it reads the compiler's predefined macros in
// the file that uses it (the program's main file), whereas one inline function compiled with
// different flags in two files would be one definition, kept from either.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#define WEFT_DETAIL_ISA_ARCH "x86-64"
#elif defined(__aarch64__) || defined(_M_ARM64)
#define WEFT_DETAIL_ISA_ARCH "AArch64"
#else
#define WEFT_DETAIL_ISA_ARCH "generic"
#endif
#ifdef __SSE4_2__
#define WEFT_DETAIL_ISA_SSE42 " SSE4.2"
#else
#define WEFT_DETAIL_ISA_SSE42 ""
#endif
#ifdef __AVX__
#define WEFT_DETAIL_ISA_AVX " AVX"
#else
#define WEFT_DETAIL_ISA_AVX ""
#endif
#ifdef __AVX2__
#define WEFT_DETAIL_ISA_AVX2 " AVX2"
#else
#define WEFT_DETAIL_ISA_AVX2 ""
#endif
#ifdef __FMA__
#define WEFT_DETAIL_ISA_FMA " FMA"
#else
#define WEFT_DETAIL_ISA_FMA ""
#endif
#ifdef __AVX512F__
#define WEFT_DETAIL_ISA_AVX512 " AVX-512"
#else
#define WEFT_DETAIL_ISA_AVX512 ""
#endif
#ifdef __ARM_FEATURE_SVE
#define WEFT_DETAIL_ISA_SVE " SVE"
#else
#define WEFT_DETAIL_ISA_SVE ""
#endif

// "x86-64 SSE4.2 AVX AVX2 FMA AVX-512" for a file compiled with -march=native on such a CPU;
// "x86-64" for the baseline.
#define WEFT_COMPILED_FOR                                                                                    \
    (WEFT_DETAIL_ISA_ARCH WEFT_DETAIL_ISA_SSE42 WEFT_DETAIL_ISA_AVX WEFT_DETAIL_ISA_AVX2 WEFT_DETAIL_ISA_FMA \
         WEFT_DETAIL_ISA_AVX512 WEFT_DETAIL_ISA_SVE)

namespace weft {

// The extensions among those WEFT_COMPILED_FOR names that the running CPU has (x86-64 with GCC
// or Clang, which can ask it; elsewhere none are known).
[[nodiscard]] inline std::vector<std::string> cpu_instruction_sets() {
    std::vector<std::string> out;
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) out.emplace_back("SSE4.2");
    if (__builtin_cpu_supports("avx")) out.emplace_back("AVX");
    if (__builtin_cpu_supports("avx2")) out.emplace_back("AVX2");
    if (__builtin_cpu_supports("fma")) out.emplace_back("FMA");
    if (__builtin_cpu_supports("avx512f")) out.emplace_back("AVX-512");
#endif
    return out;
}

// "built for <compiled>", and where the CPU has more: "; the CPU also has <those> (unused:
// build with -march=native)". `compiled` is WEFT_COMPILED_FOR of the program's main file.
[[nodiscard]] inline std::string describe_build_target(std::string_view compiled, const std::vector<std::string>& cpu) {
    std::string out = "built for ";
    out += compiled;
    std::string unused;
    const std::string with_spaces = " " + std::string(compiled) + " ";
    for (const std::string& extension : cpu)
        if (with_spaces.find(" " + extension + " ") == std::string::npos) unused += " " + extension;
    if (!unused.empty()) out += "; the CPU also has" + unused + " (unused: build with -march=native)";
    return out;
}

}  // namespace weft
