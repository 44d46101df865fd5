/* Standard normal float32 numbers from a 64-bit key, counter-based: out[i] depends only on (key, i), so any
 * thread count gives the same numbers (sim/core/native.py: normal()).
 *
 * torch's CPU randn draws its uniforms from one mt19937 stream, serially (~3.4 ns a number here, the same
 * with 2 threads). Here each pair of uniforms is a hash of the pair's counter and the key (two rounds of
 * C. Wellons' lowbias32 per 32-bit word, 24 bits kept), turned into two normals by Box-Muller; the loop
 * vectorises through glibc's vector logf/cosf (libmvec) and splits over OpenMP threads.
 * Built with -ffast-math (the vector math calls need it); nothing here meets a NaN or an inf: u1 is in
 * (0, 1], so the log is finite.
 */
#include <math.h>
#include <stdint.h>

static inline uint32_t mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

#define BLOCK 4096

void covey_normal(int64_t n, const uint64_t* key_ptr, float* out, int nthreads) {
    /* The key by pointer: read from a tensor, with no host conversion in Python (env.step counts those). */
    const uint64_t key = *key_ptr;
    const uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    const int64_t half = (n + 1) / 2; /* out[i] and out[i + half] come from pair i */
    const float two_pi = 6.28318530717958647692f, quarter = 1.57079632679489662f;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t start = 0; start < half; start += BLOCK) {
        const int m = (int)(half - start < BLOCK ? half - start : BLOCK);
        const int full = start + m + half <= n ? m : m - 1; /* an odd n: the last pair has no second number */
        float* lo = out + start;
        float* hi = out + half + start;
        const uint32_t base = (uint32_t)(2 * start);
#pragma omp simd
        for (int j = 0; j < m; j++) {
            uint32_t c = base + 2u * (uint32_t)j;
            uint32_t a = mix32(mix32(c ^ k0) + k1), b = mix32(mix32((c + 1u) ^ k0) + k1);
            /* 24-bit uniforms: u1 in (0, 1], u2 in [0, 1). Signed conversions: AVX2 has no unsigned one. */
            float u1 = ((float)(int32_t)(a >> 8) + 0.5f) * (1.0f / 16777216.0f);
            float u2 = (float)(int32_t)(b >> 8) * (1.0f / 16777216.0f);
            float r = sqrtf(-2.0f * logf(u1)), t = two_pi * u2;
            lo[j] = r * cosf(t);
            /* sin(t) as cos(t - pi/2): a sin and a cos of one argument would fuse into a sincos, which does
             * not vectorise. */
            if (j < full) hi[j] = r * cosf(t - quarter);
        }
    }
}
