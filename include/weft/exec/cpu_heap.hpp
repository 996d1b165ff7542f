// Keeps the memory a CPU training step frees inside the process, so the next step reuses
// pages that are already mapped instead of faulting fresh zeroed ones in from the kernel.
//
// Why: a step allocates its activations and gradient temporaries (megabytes each) and
// frees them when the micro-batch's backward is done. glibc serves such blocks with mmap
// and gives them back with munmap, so every step pays a page fault plus a page clear per
// 4 KiB again: 10-15 % of a small GPT step on the CPU (docs/performance.md). Raising the
// mmap and trim thresholds makes glibc keep them on its heap. The cost is that the process
// holds on to its peak heap size, which a training process reaches every step anyway.
//
// This changes a process-wide allocator setting, so weft never calls it behind a user's
// back: training mains call it once at start-up (examples/train_gpt, benchmarks/bench_step).
#pragma once

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace weft::exec {

// Returns whether the setting took effect (false where the C library is not glibc, or
// where glibc refused it); training is correct either way, only slower.
inline bool retain_freed_memory() {
#if defined(__GLIBC__)
    constexpr int one_gib = 1 << 30;
    // Blocks up to 1 GiB come from the heap rather than from fresh mmap'd pages...
    const bool heap = mallopt(M_MMAP_THRESHOLD, one_gib) == 1;
    // ...and up to 1 GiB of free memory at the top of the heap is kept, not trimmed.
    const bool keep = mallopt(M_TRIM_THRESHOLD, one_gib) == 1;
    return heap && keep;
#else
    return false;
#endif
}

}  // namespace weft::exec
