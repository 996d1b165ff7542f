// Compiled with -mavx2 -mfma (tests/core/CMakeLists.txt), for compiled_for_test.cpp. It only
// hands out the address of the macro's text (no code the compiler could vectorize), so the file
// runs on any x86-64 CPU.
#include "weft/core/compiled_for.hpp"

const char* compiled_for_in_avx2_file();
const char* compiled_for_in_avx2_file() { return WEFT_COMPILED_FOR; }
