// The backend object tests hand to the stages and layers they build directly. The CPU
// backends hold no state, so one object per backend type serves a whole test program.
#pragma once

namespace weft_test {

template <class Backend>
Backend& shared_backend() {
    static Backend backend;
    return backend;
}

}  // namespace weft_test
