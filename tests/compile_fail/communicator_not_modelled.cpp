// Must NOT compile: a type without the communicator interface, used where a
// communicator is required, has to stop the build with weft's one readable message.
// With -DWEFT_COMPILE_FAIL_CONTROL a real communicator is used instead and the file
// compiles, which shows the failure comes from the concept check and nothing else.
#include <cstddef>

#include "weft/comm/communicator.hpp"

#ifdef WEFT_COMPILE_FAIL_CONTROL
#include "weft/comm/local.hpp"
using candidate = weft::comm::local;
#else
// Close to a communicator (rank and size) but with no request, sends or collectives.
struct not_a_communicator {
    int rank() const { return 0; }
    int size() const { return 1; }
};
using candidate = not_a_communicator;
#endif

// sizeof needs the complete type, which instantiates the static_assert.
std::size_t weft_compile_fail_probe() { return sizeof(weft::comm::require_communicator<candidate>); }
