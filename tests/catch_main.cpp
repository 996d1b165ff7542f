// The main() shared by weft's single-process Catch2 tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
