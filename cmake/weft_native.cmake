# Build weft's own programs (examples, benchmarks) for the instruction set of the machine that
# builds them. Eigen chooses its SIMD kernels at compile time: built for plain x86-64 (SSE2),
# a GPT step runs several times slower than built for the AVX2 and FMA units the CPU has, and
# a user who builds the README's way should get the fast one.
#
# WEFT_NATIVE=OFF builds them for the compiler's default target instead, for packages that run
# on other machines. Nothing here reaches a program that includes weft: its own flags decide.
option(WEFT_NATIVE
       "Compile weft's examples and benchmarks for this machine's CPU (-march=native) where the compiler accepts it; OFF for portable packages"
       ON)

if(WEFT_NATIVE)
    include(CheckCXXCompilerFlag)
    check_cxx_compiler_flag(-march=native WEFT_HAS_MARCH_NATIVE)
    if(NOT WEFT_HAS_MARCH_NATIVE)
        message(STATUS "weft: ${CMAKE_CXX_COMPILER_ID} refuses -march=native; the examples and benchmarks are built for its default target")
    endif()
endif()

# Every executable defined so far in the calling directory, built for the host. Called at the
# end of examples/ and benchmarks/, so a new program there is covered without a line of its own.
function(weft_build_directory_for_host)
    if(NOT WEFT_NATIVE OR NOT WEFT_HAS_MARCH_NATIVE)
        return()
    endif()
    get_property(targets DIRECTORY PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
        get_target_property(type ${target} TYPE)
        if(type STREQUAL "EXECUTABLE")
            # Host C++ only: nvcc's device code has its own architectures.
            # -ffp-contract=off: with FMA units GCC fuses a * b + c where it sees one (its
            # default), in a loop's scalar head and tail but not always in its vector body, so an
            # element's AdamW update would depend on its address: a resumed run, whose buffers
            # lie elsewhere, would leave the uninterrupted one in the 8th digit
            # (example_train_gpt_checkpoint_resume). Eigen's own FMA kernels are unaffected. GCC 12 flags
            # _mm512_undefined_ps() (avx512fintrin.h's deliberate `__Y = __Y`) inside Eigen's
            # AVX-512 packets, as maybe-uninitialized at -O2 and above and as uninitialized at
            # -O1 (the ci-release preset), on a CPU with AVX-512: both are in the system header.
            target_compile_options(${target} PRIVATE
                $<$<COMPILE_LANGUAGE:CXX>:-march=native -ffp-contract=off>
                $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-maybe-uninitialized -Wno-uninitialized>)
        endif()
    endforeach()
endfunction()
