// Makes this process (and what it forks or execs) look like a container that refuses
// cross-process reads: a seccomp filter answers process_vm_readv and process_vm_writev with
// EPERM, as Docker's default profile does without CAP_SYS_PTRACE. For the tests of
// weft/comm/mpi_single_copy.hpp; Linux only.
#pragma once

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>

namespace weft_tests {

#if defined(__x86_64__)
inline constexpr unsigned this_audit_arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
inline constexpr unsigned this_audit_arch = AUDIT_ARCH_AARCH64;
#else
#error "deny_single_copy.hpp knows x86-64 and AArch64"
#endif

// Returns false (errno set) where the kernel refuses the filter.
inline bool deny_single_copy() {
    sock_filter program[] = {
        // Another architecture's system call numbers mean other calls: let those through.
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, this_audit_arch, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    sock_fprog filter{static_cast<unsigned short>(sizeof program / sizeof program[0]), program};
    // Without privileges a filter needs no_new_privs (which exec keeps).
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter) == 0;
}

}  // namespace weft_tests
