/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/* The BPF target's uapi asm header, as the kernel generates it for architectures that use the
 * generic one (arm64, riscv): BPF is 64-bit and bpf2go builds it little-endian (-target bpfel). */
#include <asm-generic/types.h>
