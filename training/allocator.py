"""Keep freed memory in the process: glibc's heap settings for a training loop that reallocates the same tensors.

Each PPO minibatch allocates and frees the same few tens of MB of activations and gradients. By default glibc serves
blocks that large with fresh ``mmap`` pages (or trims its heap back to the OS when they are freed), so every
minibatch page-faults its activations in again: on the 2-core reference machine that cost 10-14% of a cable_load
update (benchmarks/README.md). :func:`keep_freed_memory` serves blocks of up to 32 MiB from the heap, stops the
heap from shrinking, and grows it in large steps, so the pages are faulted in once and reused. The process keeps
its peak heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 * 1024**2  # the most glibc's own adaptive threshold reaches on 64-bit systems
TRIM_THRESHOLD = 2**31 - 1  # the heap is not trimmed below this much free memory at its top: never in practice
TOP_PAD = 256 * 1024**2  # extra bytes per heap extension


def keep_freed_memory() -> str:
    """Apply the settings above where the C library is glibc; returns what was done, for the run banner."""
    if not sys.platform.startswith("linux"):
        return "allocator: the platform's"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return "allocator: the C library's"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    done = [
        mallopt(param, value)
        for param, value in (
            (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            (M_TOP_PAD, TOP_PAD),
        )
    ]
    return "allocator: freed memory kept (glibc)" if all(done) else f"allocator: glibc refused some settings {done}"
