/* cable_load's reset of a few envs from their draws (CableLoadEnv._reset_envs without the history): the
 * randomised parameters, the static hover of the team around a level load (geometry.hover_equilibrium), the INDI
 * filters' steady state, the goal, the fault and the disturbance. Scalar C, one env after another: an auto-reset
 * restarts a few envs a step, and what this replaces cost ~0.4 ms a call in dynamo's and inductor's wrappers.
 *
 * The torch code is the reference (tests/test_cable_load_native.py); float32 as it, in its order of operations,
 * so the two agree to round-off (libm's sinf/cosf/atan2f/expf against torch's). Rows are written in place.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "vec3.h"

/* The scalars' enum R_*, the draws (draws_t: NULL where the config draws none), the state written (enum O_*: each
 * [E, ...]; the bool, int64 and delay-buffer outputs are arguments of their own) and the argument list: generated
 * from native.py's RESET declaration (sim/core/native.py writes the header before it builds). */
#include "reset_layout.h"

static void zero(float* p, int64_t n) { memset(p, 0, (size_t)n * sizeof(float)); }

void cable_load_reset(RESET_ARGS) {
    const draws_t dr = *d;
    const int randomized = p[R_RANDOMIZED] != 0.0, fault = p[R_FAULT] != 0.0, disturbed = p[R_DISTURBANCE] != 0.0;
    const float g = (float)p[R_GRAVITY];
    const float r_c[3] = {(float)p[R_CABLE_ATTACH], (float)p[R_CABLE_ATTACH + 1], (float)p[R_CABLE_ATTACH + 2]};
    for (int64_t i = 0; i < k; i++) {
        const int64_t e = rows[i];
        float mass;
        if (randomized) {
            mass = dr.load_mass[i];
            for (int j = 0; j < 3; j++)
                out[O_LOAD_INERTIA][3 * e + j] = mass * (float)p[R_INERTIA_DIAG + j] * dr.load_inertia_scale[i];
            for (int64_t n = 0; n < N; n++) {
                const int64_t en = e * N + n, in = i * N + n;
                out[O_CABLE_LENGTH][en] = (float)p[R_CABLE_LENGTH] * dr.cable_length_scale[in];
                out[O_THRUST_SCALE][en] = dr.thrust_scale[in];
                out[O_TAU_SCALE][en] = dr.tau_scale[in];
                out[O_MOTOR_DECAY][en] = expf(-(float)p[R_DT] / ((float)p[R_TAU] * dr.tau_scale[in]));
                if (p[R_MAV_MASS_SCALED] != 0.0) {
                    const float s = dr.mav_mass_scale[in];
                    out[O_MAV_MASS][en] = (float)p[R_MAV_MASS] * s;
                    for (int j = 0; j < 3; j++) out[O_MAV_INERTIA][3 * en + j] = (float)p[R_MAV_INERTIA + j] * s;
                }
                if (p[R_THRUST_LIMIT_SCALED] != 0.0)
                    out[O_SPEED_MAX][en] = (float)p[R_SPEED_MAX] * sqrtf(dr.thrust_limit_scale[in]);
            }
            delay[e] = dr.delay[i];
        } else {
            mass = (float)p[R_LOAD_MASS];
            for (int j = 0; j < 3; j++) out[O_LOAD_INERTIA][3 * e + j] = mass * (float)p[R_INERTIA_DIAG + j];
        }
        out[O_LOAD_MASS][e] = mass;

        /* Start: a level load with the team in static hover above it (hover_equilibrium). */
        const float start[3] = {dr.start_xy[2 * i], dr.start_xy[2 * i + 1], (float)p[R_START_HEIGHT]};
        const float tension = mass * g / (float)p[R_TENSION_DIV];
        for (int j = 0; j < 3; j++) {
            out[O_START_POS][3 * e + j] = start[j];
            out[O_LOAD_POS][3 * e + j] = start[j];
            out[O_LOAD_VEL][3 * e + j] = 0.0f;
            out[O_LOAD_W][3 * e + j] = 0.0f;
        }
        const float identity[4] = {1.0f, 0.0f, 0.0f, 0.0f};
        memcpy(out[O_LOAD_QUAT] + 4 * e, identity, sizeof identity);
        for (int64_t n = 0; n < N; n++) {
            const int64_t en = e * N + n;
            const float* dir = cable_dirs + 3 * n;
            const float stretched = out[O_CABLE_LENGTH][en] + tension / (float)p[R_STIFFNESS];
            float pull[3], thrust_vec[3], z_des[3], axis[3], q[4], pos[3], f_body[3], torque[3];
            for (int j = 0; j < 3; j++) pull[j] = -dir[j] * tension; /* the cable's force on the MAV */
            const float weight = out[O_MAV_MASS][en] * g;
            for (int j = 0; j < 3; j++) thrust_vec[j] = -pull[j] + (j == 2 ? weight : 0.0f);
            const float thrust = sqrtf(thrust_vec[0] * thrust_vec[0] + thrust_vec[1] * thrust_vec[1] +
                                       thrust_vec[2] * thrust_vec[2]);
            for (int j = 0; j < 3; j++) z_des[j] = thrust_vec[j] / thrust;
            /* The minimal rotation taking e_z to z_des (yaw stays zero). */
            axis[0] = -z_des[1];
            axis[1] = z_des[0];
            axis[2] = 0.0f;
            const float sin_a = sqrtf(axis[0] * axis[0] + axis[1] * axis[1]);
            const float clamped = sin_a > 1e-9f ? sin_a : 1e-9f;
            const float half = 0.5f * atan2f(sin_a, z_des[2]);
            q[0] = cosf(half);
            for (int j = 0; j < 3; j++) q[1 + j] = sinf(half) * (axis[j] / clamped);
            qrot3(q, r_c, pos);
            for (int j = 0; j < 3; j++) {
                const float attach_world = start[j] + attach[3 * n + j];
                pos[j] = attach_world + dir[j] * stretched - pos[j];
            }
            const float conj[4] = {q[0], -q[1], -q[2], -q[3]};
            qrot3(conj, pull, f_body);
            cross3(r_c, f_body, torque);
            for (int j = 0; j < 3; j++) torque[j] = -torque[j];
            /* Rotor speeds (wrench_to_speed_cmd), then for this vehicle's true thrust coefficient. */
            const float wrench[4] = {thrust, torque[0], torque[1], torque[2]};
            const float root_scale = sqrtf(out[O_THRUST_SCALE][en]);
            for (int64_t r = 0; r < R; r++) {
                float f = 0.0f;
                for (int j = 0; j < 4; j++) f += wrench[j] * (float)p[R_PINV + 4 * r + j];
                f = fminf(fmaxf(f, (float)p[R_THRUST_MIN]), (float)p[R_THRUST_MAX]);
                out[O_ROTOR_SPEED][en * R + r] = sqrtf(f / (float)p[R_K_F]) / root_scale;
            }
            const float m = out[O_MAV_MASS][en];
            float z_b[3];
            const float e_z[3] = {0.0f, 0.0f, 1.0f};
            qrot3(q, e_z, z_b);
            for (int j = 0; j < 3; j++) {
                out[O_MAV_POS][3 * en + j] = pos[j];
                out[O_FORMATION][3 * en + j] = pos[j] - start[j];
                out[O_SPEC_FORCE][3 * en + j] = z_b[j] * (thrust / m) + pull[j] / m;
                out[O_TORQUE_F][3 * en + j] = torque[j];
            }
            memcpy(out[O_MAV_QUAT] + 4 * en, q, sizeof q);
            zero(out[O_MAV_VEL] + 3 * en, 3);
            zero(out[O_MAV_W] + 3 * en, 3);
            zero(out[O_ANG_ACC_F] + 3 * en, 3);
            zero(out[O_PREV_VEL] + 3 * en, 3);
            zero(out[O_PREV_W] + 3 * en, 3);
            out[O_TENSION][en] = tension;
            out[O_HOVER_TENSION][en] = tension;
            out[O_THRUST_F][en] = thrust;
            out[O_YAW_REF][en] = atan2f(2 * (q[0] * q[3] + q[1] * q[2]), 1 - 2 * (q[2] * q[2] + q[3] * q[3]));
            out[O_ALIVE][en] = 1.0f;
            failed[en] = 0;
        }

        /* The goal pose relative to the start (quat_from_euler). */
        const float goal[3] = {start[0] + dr.goal_xy[2 * i], start[1] + dr.goal_xy[2 * i + 1], start[2] + dr.goal_z[i]};
        memcpy(out[O_GOAL_POS] + 3 * e, goal, sizeof goal);
        const float scale[3] = {(float)p[R_TILT], (float)p[R_TILT], (float)p[R_YAW]};
        float c[3], s[3];
        for (int j = 0; j < 3; j++) {
            const float angle = dr.goal_rpy[3 * i + j] * scale[j];
            c[j] = cosf(angle / 2);
            s[j] = sinf(angle / 2);
        }
        float* gq = out[O_GOAL_QUAT] + 4 * e;
        gq[0] = c[0] * c[1] * c[2] + s[0] * s[1] * s[2];
        gq[1] = s[0] * c[1] * c[2] - c[0] * s[1] * s[2];
        gq[2] = c[0] * s[1] * c[2] + s[0] * c[1] * s[2];
        gq[3] = c[0] * c[1] * s[2] - s[0] * s[1] * c[2];

        /* Fault: one MAV loses thrust at a random time. */
        out[O_TIME][e] = 0.0f;
        out[O_FAULT_TIME][e] = INFINITY;
        if (fault) {
            out[O_FAULT_TIME][e] = dr.fault_hit[i] < (float)p[R_FAULT_P] ? dr.fault_time[i] : INFINITY;
            fault_agent[e] = dr.fault_agent[i];
        }
        if (disturbed) {
            const float* v = dr.disturbance_dir + 3 * i;
            float norm = sqrtf(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
            norm = norm > 1e-9f ? norm : 1e-9f;
            const float magnitude = dr.disturbance_frac[i] * mass * g;
            for (int j = 0; j < 3; j++) out[O_DIST_AMP][3 * e + j] = v[j] / norm * magnitude;
            out[O_DIST_PHASE][e] = dr.disturbance_phase[i];
        }

        /* The policy interface's memory. */
        if (delay_buf) zero(delay_buf + e * D * N * A, D * N * A);
        zero(out[O_LAST_ACTION] + e * N * A, N * A);
        zero(out[O_PREV_ACTION] + e * N * A, N * A);
        zero(out[O_CMD] + e * N * A, N * A);
        zero(out[O_ATTACH_INT] + e * N * 3, N * 3);
    }
}
