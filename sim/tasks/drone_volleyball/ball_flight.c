/* The ball's flights that the scripted skills simulate, in C, one ball after another over OpenMP threads:
 * - volleyball_ball_flight: ballistics.predict_ball, T steps of sim.physics.ball.ball_flight_step, each position and
 *   velocity kept;
 * - volleyball_drag_flight: ballistics._flight, the end position of a flight of S steps of a per-ball dt (the drag
 *   correction of a hit's launch velocity).
 *
 * Why: the scripted skills, the rule-based strategy and the scripted team predict the ball every control step (~150
 * steps of ~10 small torch ops), and plan each hit on 90 more. At one env (the ROS sim bridge) that was ~7 ms of a
 * ~12 ms step, all of it per-op overhead; here it is tens of microseconds.
 *
 * The torch code is the reference, and this matches it to the bit (tests/test_volleyball_native.py): float32 in its
 * order of operations, each scalar rounded to float as torch rounds a Python number, and |v| as torch's CPU
 * vector_norm forms it, fmaf(z, z, fmaf(y, y, x * x)) then sqrtf. No other op is fused (-ffp-contract=off).
 * Shapes: pos, vel [E, 3], dt [E], out_pos, out_vel [E, T, 3], out_end [E, 3], all contiguous.
 */
#include <math.h>
#include <stdint.h>

#include "ball_flight_layout.h"

static inline float norm3(const float* v) { return sqrtf(fmaf(v[2], v[2], fmaf(v[1], v[1], v[0] * v[0]))); }

/* One step of sim.physics.ball.ball_flight_step's splitting, in its order, on p and v in place: v /= 1 + kh |v|;
 * p += h v; p_z -= drop; v_z -= gdt; v /= 1 + kh |v|. Each kernel forms the scalars kh (k h / 2), drop (g h^2 / 2)
 * and gdt (g h) as its torch reference rounds them. */
static inline void flight_step(float* p, float* v, float kh, float h, float drop, float gdt) {
    float s = 1.0f + kh * norm3(v);
    for (int i = 0; i < 3; i++) v[i] = v[i] / s;
    for (int i = 0; i < 3; i++) p[i] = p[i] + h * v[i];
    p[2] = p[2] - drop;
    v[2] = v[2] - gdt;
    s = 1.0f + kh * norm3(v);
    for (int i = 0; i < 3; i++) v[i] = v[i] / s;
}

void volleyball_ball_flight(BALL_FLIGHT_ARGS) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t e = 0; e < E; e++) {
        float p[3] = {pos[3 * e], pos[3 * e + 1], pos[3 * e + 2]};
        float v[3] = {vel[3 * e], vel[3 * e + 1], vel[3 * e + 2]};
        float* op = out_pos + 3 * T * e;
        float* ov = out_vel + 3 * T * e;
        for (int64_t t = 0; t < T; t++) {
            flight_step(p, v, half_kdt, dt, drop, gdt);  /* the scalars as Python's doubles rounded to float */
            for (int i = 0; i < 3; i++) {
                op[3 * t + i] = p[i];
                ov[3 * t + i] = v[i];
            }
        }
    }
}

/* ballistics._flight: its dt is a float32 tensor, so the scalars are formed in float, in its order ((0.5 k) dt,
 * ((0.5 dt) dt) g, dt g). */
void volleyball_drag_flight(DRAG_FLIGHT_ARGS) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t e = 0; e < E; e++) {
        float p[3] = {pos[3 * e], pos[3 * e + 1], pos[3 * e + 2]};
        float v[3] = {vel[3 * e], vel[3 * e + 1], vel[3 * e + 2]};
        const float h = dt[e], kh = half_k * h, drop = (0.5f * h) * h * gravity, gdt = h * gravity;
        for (int64_t t = 0; t < S; t++) flight_step(p, v, kh, h, drop, gdt);
        for (int i = 0; i < 3; i++) out_end[3 * e + i] = p[i];
    }
}
