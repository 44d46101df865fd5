/* Standard normal float32 numbers from a 64-bit key, counter-based: out[i] depends only on (key, i), so any
 * thread count gives the same numbers (sim/core/native.py: normal(); the generator is simd.h's normal_pairs).
 *
 * torch's CPU randn draws its uniforms from one mt19937 stream, serially (~3.4 ns a number here, the same with 2
 * threads); here W pairs at a time, split over OpenMP threads.
 */
#include <stdint.h>
#include <string.h>

#include "simd.h"

#define BLOCK 4096 /* pairs per OpenMP chunk */

void covey_normal(int64_t n, const uint64_t* key_ptr, float* out, int nthreads) {
    /* The key by pointer: read from a tensor, with no host conversion in Python (env.step counts those). */
    const uint64_t key = *key_ptr;
    const int64_t pairs = (n + 1) / 2;
    vu lane;
    vi lo_mask, hi_mask; /* interleave z0 and z1: (z0[0], z1[0], z0[1], z1[1], ...) */
    for (int i = 0; i < W; i++) {
        lane[i] = (uint32_t)i;
        lo_mask[i] = (i % 2 ? W : 0) + i / 2;
        hi_mask[i] = (i % 2 ? W : 0) + W / 2 + i / 2;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t start = 0; start < pairs; start += BLOCK) {
        const int64_t end = start + BLOCK < pairs ? start + BLOCK : pairs;
        for (int64_t p = start; p < end; p += W) {
            vf z0, z1;
            normal_pairs(lane + (uint32_t)p, key, &z0, &z1);
            const int64_t m = end - p < W ? end - p : W;
            if (m == W && 2 * (p + W) <= n) {
                vf lo = __builtin_shuffle(z0, z1, lo_mask), hi = __builtin_shuffle(z0, z1, hi_mask);
                memcpy(out + 2 * p, &lo, sizeof lo);
                memcpy(out + 2 * p + W, &hi, sizeof hi);
                continue;
            }
            for (int64_t i = 0; i < m; i++) {
                const int64_t k = 2 * (p + i);
                out[k] = z0[i];
                if (k + 1 < n) out[k + 1] = z1[i];
            }
        }
    }
}
