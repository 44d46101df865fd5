/* Scalar float32 vector and quaternion helpers for the scalar C kernels (sim/core/native.py: the reset of a few
 * envs, per-env observation passes), in the operation order of sim.physics.quaternion's torch code, so that they
 * round as it does (no fused multiply-adds: -ffp-contract=off). Quaternions are (w, x, y, z). Kernels over vector
 * lanes of envs use simd.h instead.
 */
#ifndef COVEY_VEC3_H
#define COVEY_VEC3_H

/* quaternion.cross: a x b. */
static inline void cross3(const float* a, const float* b, float* out) {
    out[0] = a[1] * b[2] - a[2] * b[1];
    out[1] = a[2] * b[0] - a[0] * b[2];
    out[2] = a[0] * b[1] - a[1] * b[0];
}

/* quaternion.quat_rotate: v + w t + u x t, t = 2 u x v. */
static inline void qrot3(const float* q, const float* v, float* out) {
    float t[3], c[3];
    cross3(q + 1, v, t);
    for (int i = 0; i < 3; i++) t[i] = 2.0f * t[i];
    cross3(q + 1, t, c);
    for (int i = 0; i < 3; i++) out[i] = v[i] + q[0] * t[i] + c[i];
}

#endif
