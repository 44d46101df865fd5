/* Lanes of envs for the C kernels (sim/core/native.py): a kernel handles W envs at once in GCC vector types, so
 * its per-env code reads as scalar code (the operators act lane by lane) and compiles to AVX-512 (W = 16), AVX2
 * (W = 8) or plain SSE (W = 4, any x86-64 or arm64), as the build flags say (native.simd_flags picks the CPU's).
 *
 * Every operation rounds as its scalar float32 twin: no fused multiply-adds (-ffp-contract=off), IEEE division
 * and square root. Only the transcendental functions differ by ulps: glibc's vector libmvec (<= 4 ulp) with AVX2
 * and AVX-512, the scalar libm lane by lane otherwise.
 */
#ifndef COVEY_SIMD_H
#define COVEY_SIMD_H

#include <math.h>
#include <stdint.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define W 16
#elif defined(__AVX2__)
#include <immintrin.h>
#define W 8
#else
#define W 4
#endif

typedef float vf __attribute__((vector_size(4 * W)));
typedef int32_t vi __attribute__((vector_size(4 * W))); /* comparisons give -1 (true) or 0 per lane */
typedef uint32_t vu __attribute__((vector_size(4 * W)));

static inline vf splat(float x) { return (vf){0} + x; }
static inline vf sel(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }
static inline vf bool_f(vi m) { return sel(m, splat(1.0f), splat(0.0f)); }
/* fmaxf / fminf for a second operand that is never NaN (a NaN first operand gives b, as fmaxf does). */
static inline vf vmax(vf a, vf b) { return sel(a > b, a, b); }
static inline vf vmin(vf a, vf b) { return sel(a < b, a, b); }
static inline vf vclamp(vf x, vf lo, vf hi) { return sel(x < lo, lo, sel(x > hi, hi, x)); }
static inline vf vabs(vf x) { return (vf)((vi)x & 0x7fffffff); }
static inline int any(vi m) {
    int r = 0;
    for (int i = 0; i < W; i++) r |= m[i];
    return r != 0;
}

#define LANEWISE1(name, f) \
    static inline vf name(vf x) { vf r; for (int i = 0; i < W; i++) r[i] = f(x[i]); return r; }
#define LANEWISE2(name, f) \
    static inline vf name(vf y, vf x) { vf r; for (int i = 0; i < W; i++) r[i] = f(y[i], x[i]); return r; }

/* glibc's vector math (libmvec): T is the vector register type, P the variant's name prefix (x86-64 vector ABI). */
#define LIBMVEC(T, P)                                                                  \
    T P##v_sinf(T);                                                                    \
    T P##v_cosf(T);                                                                    \
    T P##v_expf(T);                                                                    \
    T P##v_acosf(T);                                                                   \
    T P##v_logf(T);                                                                    \
    T P##vv_atan2f(T, T);                                                              \
    static inline vf vsin(vf x) { return (vf)P##v_sinf((T)x); }                        \
    static inline vf vcos(vf x) { return (vf)P##v_cosf((T)x); }                        \
    static inline vf vexp(vf x) { return (vf)P##v_expf((T)x); }                        \
    static inline vf vacos(vf x) { return (vf)P##v_acosf((T)x); }                      \
    static inline vf vlog(vf x) { return (vf)P##v_logf((T)x); }                        \
    static inline vf vatan2(vf y, vf x) { return (vf)P##vv_atan2f((T)y, (T)x); }

#if W == 16
LIBMVEC(__m512, _ZGVeN16)
static inline vf vsqrt(vf x) { return (vf)_mm512_sqrt_ps((__m512)x); }
#elif W == 8
LIBMVEC(__m256, _ZGVdN8)
static inline vf vsqrt(vf x) { return (vf)_mm256_sqrt_ps((__m256)x); }
#else
LANEWISE1(vsqrt, sqrtf)
LANEWISE1(vsin, sinf)
LANEWISE1(vcos, cosf)
LANEWISE1(vexp, expf)
LANEWISE1(vacos, acosf)
LANEWISE1(vlog, logf)
LANEWISE2(vatan2, atan2f)
#endif
LANEWISE2(fmod_lanes, fmodf)

/* fmodf(y, m) for m > 0, exactly: |y| < 2m (the common case) is one subtraction, exact by Sterbenz's lemma. */
static inline vf vfmod(vf y, float m) {
    if (any((vabs(y) >= 2 * m) | (y != y))) return fmod_lanes(y, splat(m));
    return sel(y >= m, y - m, sel(y <= -m, y + m, y));
}

/* Counter-based standard normals (native.normal, and kernels that draw their noise in place): numbers 2p and
 * 2p + 1 of a key's sequence come from pair p alone, so any split over blocks or threads gives the same numbers.
 * Each uniform is a hash of its counter (2p, 2p + 1) and the key (two rounds of C. Wellons' lowbias32 per 32-bit
 * word, 24 bits kept); Box-Muller turns a pair of uniforms into two normals (u1 in (0, 1]: the log is finite). */
static inline vu mix32(vu x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}
static inline void normal_pairs(vu pair, uint64_t key, vf* z0, vf* z1) {
    const uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    vu c = pair * 2u;
    vu a = mix32(mix32(c ^ k0) + k1), b = mix32(mix32((c + 1u) ^ k0) + k1);
    /* Signed conversions: AVX2 has no unsigned one (24-bit values fit either). */
    vf u1 = (__builtin_convertvector((vi)(a >> 8), vf) + 0.5f) * (1.0f / 16777216.0f);
    vf u2 = __builtin_convertvector((vi)(b >> 8), vf) * (1.0f / 16777216.0f);
    vf r = vsqrt(-2.0f * vlog(u1)), t = 6.28318530717958647692f * u2;
    *z0 = r * vcos(t);
    *z1 = r * vsin(t);
}

/* How many envs the block starting at env e0 holds: W, or fewer in the last block. */
static inline int block_envs(int64_t E, int64_t e0) { return (int)(E - e0 < W ? E - e0 : W); }

/* Loads and stores of one quantity for the lanes of a block: lane i is element base[i * stride], for the first n
 * lanes (the block's envs); the other lanes repeat lane n - 1, so they hold finite values and are never stored. */
static inline vf ld(const float* base, int64_t stride, int n) {
#if W == 16
    if (n == W) {
        const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                               _mm512_set1_epi32((int)stride));
        return (vf)_mm512_i32gather_ps(idx, base, 4);
    }
#elif W == 8
    if (n == W) {
        const __m256i idx = _mm256_mullo_epi32(_mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0), _mm256_set1_epi32((int)stride));
        return (vf)_mm256_i32gather_ps(base, idx, 4);
    }
#endif
    vf r;
    for (int i = 0; i < W; i++) r[i] = base[(i < n ? i : n - 1) * stride];
    return r;
}
static inline vi ld_i64(const int64_t* base, int64_t stride, int n) {
    vi r;
    for (int i = 0; i < W; i++) r[i] = (int32_t)base[(i < n ? i : n - 1) * stride];
    return r;
}
static inline void st(float* base, int64_t stride, int n, vf v) {
#if W == 16
    if (n == W) {
        const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                               _mm512_set1_epi32((int)stride));
        _mm512_i32scatter_ps(base, idx, (__m512)v, 4);
        return;
    }
#endif
    for (int i = 0; i < n; i++) base[i * stride] = v[i];
}

#endif
