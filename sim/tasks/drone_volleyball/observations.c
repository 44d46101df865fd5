/* drone_volleyball's observations in C (a match's skill, policy and critic-state entries; DroneVolleyballEnv's
 * _skill_obs, VolleyballMatchEnv._policy_obs and _state), one env after another over OpenMP threads.
 *
 * Why: the entries are short runs (3, 6, 1 floats) at strides of 34, 54 and 111 floats, which inductor writes with
 * scalar code at 2-3 ns a float (a 3v3 step at 4096 envs writes 5.1 M of them: ~11 ms at 1 thread, the largest
 * part of a compiled step). Here each env's quantities are formed once and its rows written in order.
 *
 * The torch code is the reference (tests/test_volleyball_native.py); float32 as it, in its order of operations, so
 * the two agree to round-off. Drones 0..n-1 are team A, n..2n-1 team B; team B's frame is the world rotated 180 deg
 * about z (court.mirror: x and y negated). Shapes: D = 2n drones, K skills, k envs written (rows[i] is the env of
 * output row i; NULL: row i is env i); inputs [E, D, ...] / [E, ...] contiguous; outputs [k, D, ...] contiguous.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "vec3.h"

/* MAX_DRONES, MAX_STATE (the critic state's entries at most), inputs_t (the env's tensors, [E, D, ...] per drone and
 * [E] the rally's: pos, quat, vel, ang_vel, ball_pos, ball_vel, target (world frame), skill_id, touched, last_action,
 * then the rules' last_team, touches, last_toucher, serving_team, server, episode_step, served) and the argument list:
 * generated from native.py's LAYOUT declaration (sim/core/native.py writes the header before it builds). */
#include "observations_layout.h"

/* quaternion.quat_to_matrix then matrix_to_6d: the first two columns. */
static void rot6(const float* q, float* out) {
    const float w = q[0], x = q[1], y = q[2], z = q[3];
    out[0] = 1 - 2 * (y * y + z * z);
    out[1] = 2 * (x * y + w * z);
    out[2] = 2 * (x * z - w * y);
    out[3] = 2 * (x * y - w * z);
    out[4] = 1 - 2 * (x * x + z * z);
    out[5] = 2 * (y * z + w * x);
}

/* court.mirror: v in the frame of a team (flip: team B's, x and y negated). */
static void put3(float* out, const float* v, bool flip) {
    const float s = flip ? -1.0f : 1.0f;
    out[0] = v[0] * s;
    out[1] = v[1] * s;
    out[2] = v[2];
}

void volleyball_observations(OBSERVATIONS_ARGS) {
    const int D = 2 * n;
    const int S = 29 + num_skills;  /* skill entries */
    const int P = S + 3 * (D - 1) + 5; /* policy entries */
    const int G = 16 * D + 6;        /* the critic's scene part, one per frame */
    const int C = G + 6 + n;         /* critic-state entries */
    const inputs_t in = *inputs;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t r = 0; r < k; r++) {
        const int64_t e = rows ? rows[r] : r;
        const float* pos = in.pos + e * D * 3;
        const float* quat = in.quat + e * D * 4;
        const float* vel = in.vel + e * D * 3;
        const float* ball = in.ball_pos + e * 3;
        const float* ball_vel = in.ball_vel + e * 3;
        const float* target = in.target + e * D * 3;
        float rot[MAX_DRONES][6];
        for (int d = 0; d < D; d++) rot6(quat + d * 4, rot[d]);

        /* The critic's scene in each team's frame (VolleyballMatchEnv._state's parts). */
        float scene[2][MAX_STATE];
        for (int f = 0; f < 2; f++) {
            float* g = scene[f];
            for (int d = 0; d < D; d++, g += 13) {
                put3(g, pos + d * 3, f);
                memcpy(g + 3, rot[d], 6 * sizeof(float));
                put3(g + 9, vel + d * 3, f);
                g[12] = (d / n == f) ? 1.0f : 0.0f;
            }
            put3(g, ball, f);
            put3(g + 3, ball_vel, f);
            g += 6;
            for (int d = 0; d < D; d++) put3(g + 3 * d, target + d * 3, f);
        }

        const int64_t last_team = in.last_team[e], last_toucher = in.last_toucher[e];
        const int64_t serving_team = in.serving_team[e], server = in.server[e];
        const bool served = in.served[e];
        const float touches = (float)in.touches[e] / max_touches;
        const float time_left = 1.0f - (float)in.episode_step[e] / max_episode_steps;
        const int64_t ball_half = ball[0] >= 0.0f ? 1 : 0;

        for (int d = 0; d < D; d++) {
            const int team = d / n;
            const bool flip = team == 1;
            const int64_t i = e * D + d;
            const float* q = quat + d * 4;
            float* sk = skill + (r * D + d) * S;
            float* po = policy + (r * D + d) * P;
            float* st = state + (r * D + d) * C;

            /* skill (DroneVolleyballEnv._skill_obs) */
            put3(sk, pos + d * 3, flip);
            if (flip) { /* the attitude in team B's frame: quat_mul((0, 0, 0, 1), q) */
                const float qt[4] = {0.0f * q[0] - 0.0f * q[1] - 0.0f * q[2] - 1.0f * q[3],
                                     0.0f * q[1] + 0.0f * q[0] + 0.0f * q[3] - 1.0f * q[2],
                                     0.0f * q[2] - 0.0f * q[3] + 0.0f * q[0] + 1.0f * q[1],
                                     0.0f * q[3] + 0.0f * q[2] - 0.0f * q[1] + 1.0f * q[0]};
                rot6(qt, sk + 3);
            } else {
                memcpy(sk + 3, rot[d], 6 * sizeof(float));
            }
            put3(sk + 9, vel + d * 3, flip);
            memcpy(sk + 12, in.ang_vel + i * 3, 3 * sizeof(float));
            const float offset[3] = {0.0f, 0.0f, paddle_offset};
            float center[3], to_ball[3], to_target[3];
            qrot3(q, offset, center);
            for (int c = 0; c < 3; c++) {
                to_ball[c] = ball[c] - (pos[d * 3 + c] + center[c]);
                to_target[c] = target[d * 3 + c] - pos[d * 3 + c];
            }
            put3(sk + 15, to_ball, flip);
            put3(sk + 18, ball_vel, flip);
            put3(sk + 21, to_target, flip);
            for (int s = 0; s < num_skills; s++) sk[24 + s] = in.skill_id[i] == s ? 1.0f : 0.0f;
            sk[24 + num_skills] = in.touched[i] ? 1.0f : 0.0f;
            memcpy(sk + 25 + num_skills, in.last_action + i * 4, 4 * sizeof(float));

            /* the rally features (DroneVolleyballEnv._rally_features) */
            const float rally[5] = {
                last_team == team ? touches : 0.0f,
                last_toucher == d ? 1.0f : 0.0f,
                (serving_team == team && !served) ? 1.0f : 0.0f,
                server == d ? 1.0f : 0.0f,
                ball_half == team ? 1.0f : 0.0f,
            };

            /* policy (VolleyballMatchEnv._policy_obs): skill, teammates then opponents (relative), the rally */
            memcpy(po, sk, S * sizeof(float));
            float* o = po + S;
            for (int pass = 0; pass < 2; pass++) { /* teammates, then opponents, each in drone order */
                for (int j = 0; j < D; j++) {
                    if (j == d || (pass == 0) != (j / n == team)) continue;
                    float rel[3];
                    for (int c = 0; c < 3; c++) rel[c] = pos[j * 3 + c] - pos[d * 3 + c];
                    put3(o, rel, flip);
                    o += 3;
                }
            }
            memcpy(o, rally, 5 * sizeof(float));

            /* critic state (VolleyballMatchEnv._state): the scene in my team's frame, the rally, time, my slot */
            memcpy(st, scene[team], G * sizeof(float));
            memcpy(st + G, rally, 5 * sizeof(float));
            st[G + 5] = time_left;
            for (int s = 0; s < n; s++) st[G + 6 + s] = (d % n == s) ? 1.0f : 0.0f;
        }
    }
}
