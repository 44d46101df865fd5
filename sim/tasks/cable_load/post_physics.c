/* cable_load's post-physics pass as one loop over the envs: the CPU fast path of
 * CableLoadEnv._post_physics (sim/tasks/cable_load/native.py builds and calls it).
 *
 * The torch code in env.py (_update_observation_buffers, _observations, _terminations, _rewards and
 * MultiAgentEnv's non-finite guard) is the reference: the same expressions in the same float32
 * arithmetic, tested against it (tests/test_cable_load_native.py). inductor compiles that pass into one
 * kernel too, but a scalar one that rereads its inputs per output entry (the row-major observation
 * stores keep it from vectorising); here each env's state is read once into registers.
 *
 * Layouts: every array is contiguous, float32 unless said; E envs, N MAVs, H history frames of F
 * entries, S state entries, A = 5 action components. Outputs are written whole (no read-modify-write),
 * so they may be fresh uninitialised tensors.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_MAVS 6
#define A 5

/* Scalars of the pass, in this order (doubles; native.py packs them). */
enum {
    P_MAX_STEPS, P_LEAD, P_ERR_CLIP, P_LEAK, P_DT, P_INT_LIMIT, P_FAULT,
    P_W_POS, P_W_ORI, P_W_SMOOTH, P_W_RATE, P_W_CABLE, P_W_FORM, P_W_TERM, P_POS_SIGMA, P_ORI_SIGMA,
    P_MIN_HEIGHT, P_COS_TILT, P_LOAD_HALF, P_CLEARANCE, P_MIN_DIST, P_CABLE_DIST, P_BOUNDS_XY, P_BOUNDS_Z,
    P_COUNT
};

typedef struct { float v[3]; } vec3;

static inline vec3 v3(const float* p) { vec3 r = {{p[0], p[1], p[2]}}; return r; }
static inline vec3 sub(vec3 a, vec3 b) { vec3 r = {{a.v[0] - b.v[0], a.v[1] - b.v[1], a.v[2] - b.v[2]}}; return r; }
static inline vec3 add(vec3 a, vec3 b) { vec3 r = {{a.v[0] + b.v[0], a.v[1] + b.v[1], a.v[2] + b.v[2]}}; return r; }
static inline float dot(vec3 a, vec3 b) { return a.v[0] * b.v[0] + a.v[1] * b.v[1] + a.v[2] * b.v[2]; }
static inline vec3 cross(vec3 a, vec3 b) {
    vec3 r = {{a.v[1] * b.v[2] - a.v[2] * b.v[1], a.v[2] * b.v[0] - a.v[0] * b.v[2], a.v[0] * b.v[1] - a.v[1] * b.v[0]}};
    return r;
}
static inline float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* quat_rotate: v + w t + u x t, t = 2 u x v (sim/physics/quaternion.py). */
static inline vec3 qrot(const float* q, vec3 v) {
    vec3 u = {{q[1], q[2], q[3]}};
    vec3 t = cross(u, v);
    for (int k = 0; k < 3; k++) t.v[k] *= 2.0f;
    vec3 c = cross(u, t);
    vec3 r = {{v.v[0] + q[0] * t.v[0] + c.v[0], v.v[1] + q[0] * t.v[1] + c.v[1], v.v[2] + q[0] * t.v[2] + c.v[2]}};
    return r;
}

static inline void qmul(const float* a, const float* b, float* out) {
    out[0] = a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3];
    out[1] = a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2];
    out[2] = a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1];
    out[3] = a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0];
}

/* matrix_to_6d(quat_to_matrix(q)): the matrix's first two columns. */
static inline void rot6d(const float* q, float* out) {
    float w = q[0], x = q[1], y = q[2], z = q[3];
    out[0] = 1 - 2 * (y * y + z * z);
    out[1] = 2 * (x * y + w * z);
    out[2] = 2 * (x * z - w * y);
    out[3] = 2 * (x * y - w * z);
    out[4] = 1 - 2 * (x * x + z * z);
    out[5] = 2 * (y * z + w * x);
}

static inline float yaw(const float* q) {
    return atan2f(2 * (q[0] * q[3] + q[1] * q[2]), 1 - 2 * (q[2] * q[2] + q[3] * q[3]));
}

/* torch.remainder for a positive divisor (Python's %). */
static inline float remainder_pos(float a, float b) {
    float r = fmodf(a, b);
    return (r != 0.0f && r < 0.0f) ? r + b : r;
}

static inline float norm3(vec3 a) { return sqrtf(dot(a, a)); }

/* Sum of n floats in 8 independent chains: one chain would wait on each add's latency. */
static inline float sum_f(const float* x, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) acc[k] += x[j + k];
    for (; j < n; j++) acc[0] += x[j];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}


#define FRAME_ENV 21 /* the per-env part of a frame, before the MAV's own entries */

/* The per-env part of a policy frame (and of the state): goal_pos_rel, load_rot, goal_rot_rel, load_vel,
 * load_ang_vel. */
static void load_terms(int64_t e, const float* lpos, const float* lquat, const float* lvel, const float* lw,
                       const float* goal_pos, const float* goal_quat, float* out) {
    const float* lq = lquat + 4 * e;
    float lq_conj[4] = {lq[0], -lq[1], -lq[2], -lq[3]}, goal_rel[4];
    qmul(lq_conj, goal_quat + 4 * e, goal_rel);
    for (int k = 0; k < 3; k++) out[k] = goal_pos[3 * e + k] - lpos[3 * e + k];
    rot6d(lq, out + 3);
    rot6d(goal_rel, out + 9);
    for (int k = 0; k < 3; k++) out[15 + k] = lvel[3 * e + k];
    for (int k = 0; k < 3; k++) out[18 + k] = lw[3 * e + k];
}

/* The critic's state of env e (_state): its global part once, copied for every MAV with its one-hot id.
 * ``per_env`` holds the env's load_terms. Returns the sum of what it wrote (for the non-finite guard). */
static float write_state(int64_t e, int64_t N, int64_t S, int fault, float max_steps, const float* dpos,
                         const float* dquat, const float* dvel, const float* dw, const float* lpos,
                         const float* tension, const float* per_env, const int64_t* episode_step,
                         const uint8_t* failed, float* state) {
    float glob[256];
    const int64_t G = S - N;
    const float* lp = lpos + 3 * e;
    int64_t g = 0;
    for (int64_t n = 0; n < N; n++)
        for (int k = 0; k < 3; k++) glob[g++] = dpos[3 * (e * N + n) + k] - lp[k];
    for (int64_t n = 0; n < N; n++)
        for (int k = 0; k < 3; k++) glob[g++] = dvel[3 * (e * N + n) + k];
    for (int64_t n = 0; n < N; n++) {
        rot6d(dquat + 4 * (e * N + n), glob + g);
        g += 6;
    }
    for (int64_t n = 0; n < N; n++)
        for (int k = 0; k < 3; k++) glob[g++] = dw[3 * (e * N + n) + k];
    for (int64_t n = 0; n < N; n++) glob[g++] = tension[e * N + n];
    for (int k = 0; k < FRAME_ENV; k++) glob[g++] = per_env[k];
    glob[g++] = 1.0f - (float)episode_step[e] / max_steps;
    if (fault)
        for (int64_t n = 0; n < N; n++) glob[g++] = (float)failed[e * N + n];
    float glob_sum = sum_f(glob, G), total = 0.0f;
    for (int64_t n = 0; n < N; n++) {
        float* row = state + (e * N + n) * S;
        memcpy(row, glob, (size_t)G * sizeof(float));
        for (int64_t i = 0; i < N; i++) row[G + i] = (float)(i == n);
        total += glob_sum + 1.0f;
    }
    return total;
}

/* The state alone, every env (_state): for the observations after an auto-reset. */
void cable_load_state(int64_t E, int64_t N, int64_t S, int nthreads, const float* dpos, const float* dquat,
                      const float* dvel, const float* dw, const float* lpos, const float* lquat, const float* lvel,
                      const float* lw, const float* goal_pos, const float* goal_quat, const float* tension,
                      const uint8_t* failed, const int64_t* episode_step, float* state, const double* p) {
    const int fault = p[P_FAULT] != 0.0;
    const float max_steps = (float)p[P_MAX_STEPS];
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t e = 0; e < E; e++) {
        float per_env[FRAME_ENV];
        load_terms(e, lpos, lquat, lvel, lw, goal_pos, goal_quat, per_env);
        write_state(e, N, S, fault, max_steps, dpos, dquat, dvel, dw, lpos, tension, per_env, episode_step, failed,
                    state);
    }
}

void cable_load_post_physics(
    int64_t E, int64_t N, int64_t H, int64_t F, int64_t S, int nthreads,
    const float* dpos, const float* dquat, const float* dvel, const float* dw,
    const float* lpos, const float* lquat, const float* lvel, const float* lw,
    const float* goal_pos, const float* goal_quat, const float* start_pos,
    const float* attach, const float* nominal, const float* cable_attach,
    const float* tension, const float* hover_tension, const float* formation_offset,
    const float* last_action, const float* prev_action,
    const float* integ_in, float* integ_out,
    const uint8_t* failed, const int64_t* episode_step,
    const float* hist_in, float* hist_out,
    const float* noise, const float* noise_std,
    float* state, float* reward, float* terms, uint8_t* terminated, uint8_t* reasons, uint8_t* bad,
    const double* p)
{
    const float max_steps = (float)p[P_MAX_STEPS], lead = (float)p[P_LEAD], err_clip = (float)p[P_ERR_CLIP];
    const float leak = (float)p[P_LEAK], dt = (float)p[P_DT], int_limit = (float)p[P_INT_LIMIT];
    const int fault = p[P_FAULT] != 0.0;
    const float w_term = (float)p[P_W_TERM];
    const float pi = 3.14159265358979323846f;

#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t e = 0; e < E; e++) {
        const float* lp = lpos + 3 * e;
        const float* lq = lquat + 4 * e;
        const float* gq = goal_quat + 4 * e;
        vec3 lpv = v3(lp), gpv = v3(goal_pos + 3 * e);
        float total = 0.0f; /* the non-finite guard's sum over this env's observations and rewards */

        float per_env[FRAME_ENV];
        load_terms(e, lpos, lquat, lvel, lw, goal_pos, goal_quat, per_env);
        float lq_conj[4] = {lq[0], -lq[1], -lq[2], -lq[3]};
        vec3 gp_rel = sub(gpv, lpv);

        /* The goal carrot (_goal_carrot): the goal with its heading within `lead` of the load's. */
        float yaw_err = remainder_pos(yaw(gq) - yaw(lq) + pi, 2 * pi) - pi;
        float half = (clampf(yaw_err, -lead, lead) - yaw_err) / 2;
        float turn[4] = {cosf(half), 0.0f, 0.0f, sinf(half)}, carrot[4];
        qmul(turn, gq, carrot);

        /* Per MAV: positions, cable points (for the cable distances) and what every output reads. */
        vec3 dp[MAX_MAVS], cable_top[MAX_MAVS], cable_seg[MAX_MAVS];
        int alive[MAX_MAVS];
        for (int64_t n = 0; n < N; n++) {
            const int64_t en = e * N + n;
            dp[n] = v3(dpos + 3 * en);
            alive[n] = !failed[en];
            cable_top[n] = add(dp[n], qrot(dquat + 4 * en, v3(cable_attach)));
            cable_seg[n] = sub(add(lpv, qrot(lq, v3(attach + 3 * n))), cable_top[n]);
        }

        /* Observation frames, the history push and the attachment-error integral. */
        for (int64_t n = 0; n < N; n++) {
            const int64_t en = e * N + n;
            const float* q = dquat + 4 * en;
            vec3 att = v3(attach + 3 * n);
            vec3 err = sub(add(gpv, qrot(carrot, att)), add(lpv, qrot(lq, att)));
            vec3 slot = add(gpv, qrot(carrot, v3(nominal + 3 * n)));
            float frame[64];
            memcpy(frame, per_env, sizeof per_env);
            float* m = frame + FRAME_ENV;
            for (int k = 0; k < 3; k++) {
                float i = leak * integ_in[3 * en + k] + dt * clampf(err.v[k], -err_clip, err_clip);
                integ_out[3 * en + k] = clampf(i, -int_limit, int_limit);
                m[k] = dp[n].v[k] - lp[k];
                m[3 + k] = dvel[3 * en + k];
                m[12 + k] = dw[3 * en + k];
                m[15 + k] = att.v[k];
                m[18 + k] = slot.v[k] - dp[n].v[k];
                m[21 + k] = integ_out[3 * en + k];
            }
            rot6d(q, m + 6);
            for (int k = 0; k < A; k++) m[24 + k] = last_action[A * en + k];
            const float* old = hist_in + en * H * F;
            float* out = hist_out + en * H * F;
            memcpy(out, old + F, (size_t)((H - 1) * F) * sizeof(float));
            float* newest = out + (H - 1) * F;
            if (noise)
                for (int64_t j = 0; j < F; j++) newest[j] = frame[j] + noise[en * F + j] * noise_std[j];
            else
                memcpy(newest, frame, (size_t)F * sizeof(float));
            total += sum_f(out, H * F);
        }

        total += write_state(e, N, S, fault, max_steps, dpos, dquat, dvel, dw, lpos, tension, per_env, episode_step,
                             failed, state);

        /* Terminations (_terminations). */
        int finite = isfinite(lp[0]) && isfinite(lp[1]) && isfinite(lp[2]);
        int crash = 0, too_close = 0, cable_hit = 0, mav_out = 0;
        for (int64_t n = 0; n < N; n++) {
            const float* q = dquat + 4 * (e * N + n);
            finite = finite && isfinite(dp[n].v[0]) && isfinite(dp[n].v[1]) && isfinite(dp[n].v[2]);
            float tilt_cos = 1 - 2 * (q[1] * q[1] + q[2] * q[2]);
            crash |= ((dp[n].v[2] < (float)p[P_MIN_HEIGHT]) | (tilt_cos < (float)p[P_COS_TILT])) & alive[n];
            vec3 rel = sub(dp[n], v3(start_pos + 3 * e));
            int out = (fabsf(rel.v[0]) > (float)p[P_BOUNDS_XY]) | (fabsf(rel.v[1]) > (float)p[P_BOUNDS_XY]) |
                      (fabsf(rel.v[2]) > (float)p[P_BOUNDS_Z]);
            mav_out |= out & alive[n];
            for (int64_t j = 0; j < N; j++) {
                if (j == n || !alive[n] || !alive[j]) continue;
                too_close |= norm3(sub(dp[n], dp[j])) < (float)p[P_MIN_DIST];
                vec3 seg = cable_seg[j], r = sub(dp[n], cable_top[j]);
                float t = clampf(dot(r, seg) / fmaxf(dot(seg, seg), 1e-9f), 0.0f, 1.0f);
                vec3 off = {{r.v[0] - t * seg.v[0], r.v[1] - t * seg.v[1], r.v[2] - t * seg.v[2]}};
                cable_hit |= norm3(off) < (float)p[P_CABLE_DIST];
            }
        }
        crash |= !finite;
        int load_ground = lp[2] - (float)p[P_LOAD_HALF] < (float)p[P_CLEARANCE];
        vec3 lrel = sub(lpv, v3(start_pos + 3 * e));
        int load_out = (fabsf(lrel.v[0]) > (float)p[P_BOUNDS_XY]) | (fabsf(lrel.v[1]) > (float)p[P_BOUNDS_XY]) |
                       (fabsf(lrel.v[2]) > (float)p[P_BOUNDS_Z]);
        int out_of_bounds = mav_out | load_out;
        int term = crash | load_ground | too_close | cable_hit | out_of_bounds;
        reasons[0 * E + e] = (uint8_t)crash;
        reasons[1 * E + e] = (uint8_t)load_ground;
        reasons[2 * E + e] = (uint8_t)too_close;
        reasons[3 * E + e] = (uint8_t)cable_hit;
        reasons[4 * E + e] = (uint8_t)out_of_bounds;

        /* Rewards (_rewards): raw terms times their weights, summed in the config's order. */
        float pos_err = norm3(gp_rel);
        float dq = fminf(fabsf(lq[0] * gq[0] + lq[1] * gq[1] + lq[2] * gq[2] + lq[3] * gq[3]), 1.0f);
        float ori_err = 2.0f * acosf(dq);
        float w_pos = (float)p[P_W_POS] * expf(-pos_err / (float)p[P_POS_SIGMA]);
        float w_ori = (float)p[P_W_ORI] * expf(-ori_err / (float)p[P_ORI_SIGMA]);
        float w_end = w_term * (float)term;
        float sums[7] = {0, 0, 0, 0, 0, 0, 0};
        float rew[MAX_MAVS];
        for (int64_t n = 0; n < N; n++) {
            const int64_t en = e * N + n;
            float smooth = 0.0f, rate = 0.0f, form = 0.0f;
            for (int k = 0; k < A; k++) {
                float d = last_action[A * en + k] - prev_action[A * en + k];
                smooth += d * d;
            }
            for (int k = 0; k < 3; k++) rate += dw[3 * en + k] * dw[3 * en + k];
            float c = (tension[en] - hover_tension[en]) / hover_tension[en];
            vec3 off = qrot(lq_conj, sub(dp[n], lpv));
            for (int k = 0; k < 3; k++) {
                float d = off.v[k] - formation_offset[3 * en + k];
                form += d * d;
            }
            float live = (fault && !alive[n]) ? 0.0f : 1.0f;
            float w[7] = {
                w_pos, w_ori,
                (float)p[P_W_SMOOTH] * (smooth * live),
                (float)p[P_W_RATE] * (rate * live),
                (float)p[P_W_CABLE] * (c * c * live),
                (float)p[P_W_FORM] * (form * live),
                w_end,
            };
            float r = 0.0f;
            for (int k = 0; k < 7; k++) { r += w[k]; sums[k] += w[k]; }
            rew[n] = r;
            total += r;
        }

        /* The non-finite guard (MultiAgentEnv._post_physics): such an env ends now, rewarded 0. */
        int is_bad = !isfinite(total);
        for (int64_t n = 0; n < N; n++) reward[e * N + n] = is_bad ? 0.0f : rew[n];
        for (int k = 0; k < 7; k++) terms[k * E + e] = is_bad ? 0.0f : sums[k] / (float)N;
        terminated[e] = (uint8_t)(term | is_bad);
        bad[e] = (uint8_t)is_bad;
    }
}
