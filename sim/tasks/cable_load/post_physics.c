/* cable_load's post-physics pass, W envs at a time: the CPU fast path of CableLoadEnv._post_physics
 * (sim/tasks/cable_load/native.py builds and calls it).
 *
 * The torch code in env.py (_update_observation_buffers, _observations, _terminations, _rewards and
 * MultiAgentEnv's non-finite guard) is the reference: the same expressions in the same float32 arithmetic, tested
 * against it (tests/test_cable_load_native.py). inductor compiles that pass into one kernel too, but a scalar one
 * that rereads its inputs per output entry (the row-major observation stores keep it from vectorising). Here each
 * vector lane is one env (sim/core/simd.h): a block's quantities are computed lane-wise, then each env's rows
 * (its history, its critic state) are written out contiguously.
 *
 * Layouts: every array is contiguous, float32 unless said; E envs, N MAVs, H history frames of F = 50 entries,
 * S state entries, A action components. Outputs are written whole (no read-modify-write), so they may be fresh
 * uninitialised tensors.
 */
#include <stdint.h>
#include <string.h>

#include "simd.h"

/* MAX_MAVS, A (action components), F (a policy frame's entries), FRAME_ENV (its per-env part), MAX_GLOB (the
 * state's global part at most), the scalars' enum P_*, the reward terms' T_* and the reasons' WHY_*, and the
 * argument lists: generated from native.py's POST_PHYSICS declaration (sim/core/native.py writes the header). */
#include "post_physics_layout.h"

typedef struct { vf v[3]; } vec3;

static inline vec3 const3(const float* p) { vec3 r = {{splat(p[0]), splat(p[1]), splat(p[2])}}; return r; }
static inline vec3 ld3(const float* base, int64_t stride, int nv) {
    vec3 r = {{ld(base, stride, nv), ld(base + 1, stride, nv), ld(base + 2, stride, nv)}};
    return r;
}
static inline void ld4(const float* base, int64_t stride, int nv, vf* q) {
    for (int k = 0; k < 4; k++) q[k] = ld(base + k, stride, nv);
}
static inline vec3 sub(vec3 a, vec3 b) { vec3 r = {{a.v[0] - b.v[0], a.v[1] - b.v[1], a.v[2] - b.v[2]}}; return r; }
static inline vec3 add(vec3 a, vec3 b) { vec3 r = {{a.v[0] + b.v[0], a.v[1] + b.v[1], a.v[2] + b.v[2]}}; return r; }
static inline vf dot(vec3 a, vec3 b) { return a.v[0] * b.v[0] + a.v[1] * b.v[1] + a.v[2] * b.v[2]; }
static inline vec3 cross(vec3 a, vec3 b) {
    vec3 r = {{a.v[1] * b.v[2] - a.v[2] * b.v[1], a.v[2] * b.v[0] - a.v[0] * b.v[2], a.v[0] * b.v[1] - a.v[1] * b.v[0]}};
    return r;
}
static inline vf norm3(vec3 a) { return vsqrt(dot(a, a)); }
static inline vi finite(vf x) { return (x - x) == 0; } /* inf - inf and NaN - NaN are NaN */

/* quat_rotate: v + w t + u x t, t = 2 u x v (sim/physics/quaternion.py). */
static inline vec3 qrot(const vf* q, vec3 v) {
    vec3 u = {{q[1], q[2], q[3]}};
    vec3 t = cross(u, v);
    for (int k = 0; k < 3; k++) t.v[k] *= 2.0f;
    vec3 c = cross(u, t);
    vec3 r = {{v.v[0] + q[0] * t.v[0] + c.v[0], v.v[1] + q[0] * t.v[1] + c.v[1], v.v[2] + q[0] * t.v[2] + c.v[2]}};
    return r;
}

static inline void qmul(const vf* a, const vf* b, vf* out) {
    out[0] = a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3];
    out[1] = a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2];
    out[2] = a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1];
    out[3] = a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0];
}

/* matrix_to_6d(quat_to_matrix(q)): the matrix's first two columns. */
static inline void rot6d(const vf* q, vf* out) {
    vf w = q[0], x = q[1], y = q[2], z = q[3];
    out[0] = 1 - 2 * (y * y + z * z);
    out[1] = 2 * (x * y + w * z);
    out[2] = 2 * (x * z - w * y);
    out[3] = 2 * (x * y - w * z);
    out[4] = 1 - 2 * (x * x + z * z);
    out[5] = 2 * (y * z + w * x);
}

static inline vf yaw(const vf* q) {
    return vatan2(2 * (q[0] * q[3] + q[1] * q[2]), 1 - 2 * (q[2] * q[2] + q[3] * q[3]));
}

/* torch.remainder for a positive divisor (Python's %). */
static inline vf remainder_pos(vf a, float b) {
    vf r = vfmod(a, b);
    return sel((r != 0.0f) & (r < 0.0f), r + b, r);
}

/* Copies n floats (dst may be src: a sum alone) and returns their sum, as W partial sums in any order: for the
 * non-finite guard only, which a NaN or inf reaches in any order. */
static inline vf copy_sum(float* dst, const float* src, int64_t n) {
    vf acc = splat(0.0f);
    int64_t j = 0;
    for (; j + W <= n; j += W) {
        vf v;
        memcpy(&v, src + j, sizeof v);
        memcpy(dst + j, &v, sizeof v);
        acc += v;
    }
    for (; j < n; j++) {
        dst[j] = src[j];
        acc[0] += src[j];
    }
    return acc;
}

static inline float hsum(vf v) {
    float s = 0.0f;
    for (int i = 0; i < W; i++) s += v[i];
    return s;
}

/* One block of envs' per-MAV state, read once. */
typedef struct {
    vec3 lp, lvel, lw, gp;
    vf lq[4], gq[4];
    vec3 dp[MAX_MAVS], dv[MAX_MAVS], dw[MAX_MAVS];
    vf dq[MAX_MAVS][4], tension[MAX_MAVS];
    vi alive[MAX_MAVS];
    vf step; /* episode_step as float */
} block;

static void load_block(int64_t e0, int nv, int64_t N, const float* dpos, const float* dquat, const float* dvel,
                       const float* dw, const float* lpos, const float* lquat, const float* lvel, const float* lw,
                       const float* goal_pos, const float* goal_quat, const float* tension, const uint8_t* failed,
                       const int64_t* episode_step, block* b) {
    b->lp = ld3(lpos + 3 * e0, 3, nv);
    b->lvel = ld3(lvel + 3 * e0, 3, nv);
    b->lw = ld3(lw + 3 * e0, 3, nv);
    b->gp = ld3(goal_pos + 3 * e0, 3, nv);
    ld4(lquat + 4 * e0, 4, nv, b->lq);
    ld4(goal_quat + 4 * e0, 4, nv, b->gq);
    for (int64_t n = 0; n < N; n++) {
        const int64_t en = e0 * N + n;
        b->dp[n] = ld3(dpos + 3 * en, 3 * N, nv);
        b->dv[n] = ld3(dvel + 3 * en, 3 * N, nv);
        b->dw[n] = ld3(dw + 3 * en, 3 * N, nv);
        ld4(dquat + 4 * en, 4 * N, nv, b->dq[n]);
        b->tension[n] = ld(tension + en, N, nv);
        vi f;
        for (int i = 0; i < W; i++) f[i] = failed[en + (i < nv ? i : nv - 1) * N];
        b->alive[n] = f == 0;
    }
    vf s;
    for (int i = 0; i < W; i++) s[i] = (float)episode_step[e0 + (i < nv ? i : nv - 1)];
    b->step = s;
}

/* The per-env part of a policy frame (and of the state): goal_pos_rel, load_rot, goal_rot_rel, load_vel,
 * load_ang_vel. */
static void load_terms(const block* b, vf* out) {
    vf lq_conj[4] = {b->lq[0], -b->lq[1], -b->lq[2], -b->lq[3]}, goal_rel[4];
    qmul(lq_conj, b->gq, goal_rel);
    for (int k = 0; k < 3; k++) out[k] = b->gp.v[k] - b->lp.v[k];
    rot6d(b->lq, out + 3);
    rot6d(goal_rel, out + 9);
    for (int k = 0; k < 3; k++) out[15 + k] = b->lvel.v[k];
    for (int k = 0; k < 3; k++) out[18 + k] = b->lw.v[k];
}

/* The critic's state of the block's envs (_state): each env's global part once, copied for every MAV with its
 * one-hot id. ``per_env`` holds the block's load_terms. Adds what it wrote to ``total`` (the non-finite guard). */
static void write_state(const block* b, int64_t e0, int nv, int64_t N, int64_t S, int fault, float max_steps,
                        const vf* per_env, float* state, float* total) {
    vf glob[MAX_GLOB];
    const int64_t G = S - N;
    int64_t g = 0;
    for (int64_t n = 0; n < N; n++)
        for (int k = 0; k < 3; k++) glob[g++] = b->dp[n].v[k] - b->lp.v[k];
    for (int64_t n = 0; n < N; n++)
        for (int k = 0; k < 3; k++) glob[g++] = b->dv[n].v[k];
    for (int64_t n = 0; n < N; n++) {
        rot6d(b->dq[n], glob + g);
        g += 6;
    }
    for (int64_t n = 0; n < N; n++)
        for (int k = 0; k < 3; k++) glob[g++] = b->dw[n].v[k];
    for (int64_t n = 0; n < N; n++) glob[g++] = b->tension[n];
    for (int k = 0; k < FRAME_ENV; k++) glob[g++] = per_env[k];
    glob[g++] = 1.0f - b->step / max_steps;
    if (fault)
        for (int64_t n = 0; n < N; n++) glob[g++] = bool_f(~b->alive[n]);
    for (int i = 0; i < nv; i++) {
        float row[MAX_GLOB];
        for (int64_t j = 0; j < G; j++) row[j] = glob[j][i];
        float glob_sum = hsum(copy_sum(row, row, G));
        for (int64_t n = 0; n < N; n++) {
            float* out = state + ((e0 + i) * N + n) * S;
            memcpy(out, row, (size_t)G * sizeof(float));
            for (int64_t j = 0; j < N; j++) out[G + j] = (float)(j == n);
            total[i] += glob_sum + 1.0f;
        }
    }
}

/* The goal carrot (_goal_carrot): the goal with its heading within `lead` of the load's. */
static void goal_carrot(const block* b, float lead, vf* carrot) {
    const float pi = 3.14159265358979323846f;
    vf yaw_err = remainder_pos(yaw(b->gq) - yaw(b->lq) + pi, 2 * pi) - pi;
    vf half = (vclamp(yaw_err, splat(-lead), splat(lead)) - yaw_err) / 2;
    vf turn[4] = {vcos(half), splat(0.0f), splat(0.0f), vsin(half)};
    qmul(turn, b->gq, carrot);
}

/* MAV n's observation frame (_frame) of the block's envs, without noise: the per-env terms, then its own, with
 * its attachment-error integral ``io`` and its last action (row ``en`` of ``last_action``). */
static void mav_frame(const block* b, int64_t n, int64_t en, int64_t N, int nv, const vf* per_env, const vf* carrot,
                      const float* attach, const float* nominal, vec3 io, const float* last_action, vf* fr) {
    const vec3 att = const3(attach + 3 * n);
    const vec3 slot = add(b->gp, qrot(carrot, const3(nominal + 3 * n)));
    for (int k = 0; k < FRAME_ENV; k++) fr[k] = per_env[k];
    vf* m = fr + FRAME_ENV;
    for (int k = 0; k < 3; k++) {
        m[k] = b->dp[n].v[k] - b->lp.v[k];
        m[3 + k] = b->dv[n].v[k];
        m[12 + k] = b->dw[n].v[k];
        m[15 + k] = att.v[k];
        m[18 + k] = slot.v[k] - b->dp[n].v[k];
        m[21 + k] = io.v[k];
    }
    rot6d(b->dq[n], m + 6);
    for (int k = 0; k < A; k++) m[24 + k] = ld(last_action + A * en + k, A * N, nv);
}

/* The history of the envs rows[0..k) after their reset (the end of _reset_envs): each MAV's frame, plus
 * ``noise [k, N, F] * noise_std`` where given, in every one of the H slots. One env per block, on this thread. */
void cable_load_reset_history(RESET_HISTORY_ARGS) {
    const float lead = (float)p[P_LEAD];
    for (int64_t i = 0; i < k; i++) {
        const int64_t e = rows[i];
        block b;
        load_block(e, 1, N, dpos, dquat, dvel, dw, lpos, lquat, lvel, lw, goal_pos, goal_quat, tension, failed,
                   episode_step, &b);
        vf per_env[FRAME_ENV], carrot[4], fr[F];
        load_terms(&b, per_env);
        goal_carrot(&b, lead, carrot);
        for (int64_t n = 0; n < N; n++) {
            const int64_t en = e * N + n;
            mav_frame(&b, n, en, N, 1, per_env, carrot, attach, nominal, ld3(integ + 3 * en, 3, 1), last_action,
                      fr);
            float row[F];
            for (int j = 0; j < F; j++) row[j] = noise ? fr[j][0] + noise[(i * N + n) * F + j] * noise_std[j] : fr[j][0];
            for (int64_t h = 0; h < H; h++) memcpy(history + (en * H + h) * F, row, sizeof row);
        }
    }
}

/* The state alone (_state): of every env (rows NULL, E envs), or of the E envs rows[0..E) only, written in place into
 * their rows of ``state`` (an auto-reset's few envs: one env per block, on this thread). */
void cable_load_state(STATE_ARGS) {
    const int fault = p[P_FAULT] != 0.0;
    const float max_steps = (float)p[P_MAX_STEPS];
    const int64_t blocks = rows ? E : (E + W - 1) / W;
#pragma omp parallel for num_threads(rows ? 1 : nthreads) schedule(static)
    for (int64_t blk = 0; blk < blocks; blk++) {
        const int64_t e0 = rows ? rows[blk] : blk * W;
        const int nv = rows ? 1 : block_envs(E, e0);
        block b;
        load_block(e0, nv, N, dpos, dquat, dvel, dw, lpos, lquat, lvel, lw, goal_pos, goal_quat, tension, failed,
                   episode_step, &b);
        vf per_env[FRAME_ENV];
        float total[W] = {0};
        load_terms(&b, per_env);
        write_state(&b, e0, nv, N, S, fault, max_steps, per_env, state, total);
    }
}

void cable_load_post_physics(POST_PHYSICS_ARGS) {
    const float max_steps = (float)p[P_MAX_STEPS], lead = (float)p[P_LEAD], err_clip = (float)p[P_ERR_CLIP];
    const float leak = (float)p[P_LEAK], dt = (float)p[P_DT], int_limit = (float)p[P_INT_LIMIT];
    const int fault = p[P_FAULT] != 0.0;
    const float w_term = (float)p[P_W_TERMINATION];
    const float alive = (float)p[P_W_ALIVE], bound = (float)p[P_W_PENALTY_BOUND];
    const float min_height = (float)p[P_MIN_HEIGHT], cos_tilt = (float)p[P_COS_TILT];
    const float bounds_xy = (float)p[P_BOUNDS_XY], bounds_z = (float)p[P_BOUNDS_Z];
    const float min_dist = (float)p[P_MIN_DIST], cable_dist = (float)p[P_CABLE_DIST];
    const vec3 r_c = const3(cable_attach);
    const uint64_t key = noise_key ? (uint64_t)*noise_key : 0;
    int noisy_pair[F / 2]; /* pairs of frame entries with some noise */
    for (int q = 0; q < F / 2; q++) noisy_pair[q] = noise_std[2 * q] != 0.0f || noise_std[2 * q + 1] != 0.0f;
    vu lane;
    for (int i = 0; i < W; i++) lane[i] = (uint32_t)i;
    const int64_t blocks = (E + W - 1) / W, HF = H * F;

#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t blk = 0; blk < blocks; blk++) {
        const int64_t e0 = blk * W;
        const int nv = block_envs(E, e0);
        block b;
        load_block(e0, nv, N, dpos, dquat, dvel, dw, lpos, lquat, lvel, lw, goal_pos, goal_quat, tension, failed,
                   episode_step, &b);
        const vec3 lpv = b.lp, gpv = b.gp, spv = ld3(start_pos + 3 * e0, 3, nv);
        const vf* lq = b.lq;
        const vf* gq = b.gq;
        float total[W] = {0}; /* the non-finite guard's sum over each env's observations and rewards */

        vf per_env[FRAME_ENV];
        load_terms(&b, per_env);
        vf lq_conj[4] = {lq[0], -lq[1], -lq[2], -lq[3]};
        vec3 gp_rel = sub(gpv, lpv);

        vf carrot[4];
        goal_carrot(&b, lead, carrot);

        /* Per MAV: cable points (for the cable distances). */
        vec3 cable_top[MAX_MAVS], cable_seg[MAX_MAVS];
        for (int64_t n = 0; n < N; n++) {
            cable_top[n] = add(b.dp[n], qrot(b.dq[n], r_c));
            cable_seg[n] = sub(add(lpv, qrot(lq, const3(attach + 3 * n))), cable_top[n]);
        }

        /* Observation frames, the history push and the attachment-error integral. */
        vf frame[MAX_MAVS][F];
        for (int64_t n = 0; n < N; n++) {
            const int64_t en = e0 * N + n;
            vec3 att = const3(attach + 3 * n);
            vec3 err = sub(add(gpv, qrot(carrot, att)), add(lpv, qrot(lq, att)));
            vec3 io;
            for (int k = 0; k < 3; k++) {
                vf i = leak * ld(integ_in + 3 * en + k, 3 * N, nv) + dt * vclamp(err.v[k], splat(-err_clip), splat(err_clip));
                io.v[k] = vclamp(i, splat(-int_limit), splat(int_limit));
                st(integ_out + 3 * en + k, 3 * N, nv, io.v[k]);
            }
            vf* fr = frame[n];
            mav_frame(&b, n, en, N, nv, per_env, carrot, attach, nominal, io, last_action, fr);
            if (noise_key) {
                /* Row en's entries 2q and 2q + 1 are numbers of pair en F / 2 + q: native.normal's for this key. */
                const vu row = (lane + (uint32_t)e0) * (uint32_t)N + (uint32_t)n;
                for (int q = 0; q < F / 2; q++) {
                    if (!noisy_pair[q]) continue;
                    vf z0, z1;
                    normal_pairs(row * (uint32_t)(F / 2) + (uint32_t)q, key, &z0, &z1);
                    fr[2 * q] = fr[2 * q] + z0 * noise_std[2 * q];
                    fr[2 * q + 1] = fr[2 * q + 1] + z1 * noise_std[2 * q + 1];
                }
            }
        }
        for (int i = 0; i < nv; i++)
            for (int64_t n = 0; n < N; n++) {
                const int64_t en = (e0 + i) * N + n;
                const float* old = hist_in + en * HF;
                float* out = hist_out + en * HF;
                vf sum = copy_sum(out, old + F, HF - F);
                float* newest = out + HF - F;
                for (int j = 0; j < F; j++) newest[j] = frame[n][j][i];
                total[i] += hsum(copy_sum(newest, newest, F) + sum);
            }

        write_state(&b, e0, nv, N, S, fault, max_steps, per_env, state, total);

        /* Terminations (_terminations). */
        vi ok = finite(lpv.v[0]) & finite(lpv.v[1]) & finite(lpv.v[2]);
        vi none = splat(0.0f) != 0.0f;
        vi crash = none, too_close = none, cable_hit = none, mav_out = none;
        for (int64_t n = 0; n < N; n++) {
            const vf* q = b.dq[n];
            const vec3 dp = b.dp[n];
            ok = ok & finite(dp.v[0]) & finite(dp.v[1]) & finite(dp.v[2]);
            vf tilt_cos = 1 - 2 * (q[1] * q[1] + q[2] * q[2]);
            crash |= ((dp.v[2] < min_height) | (tilt_cos < cos_tilt)) & b.alive[n];
            vec3 rel = sub(dp, spv);
            vi out = (vabs(rel.v[0]) > bounds_xy) | (vabs(rel.v[1]) > bounds_xy) | (vabs(rel.v[2]) > bounds_z);
            mav_out |= out & b.alive[n];
            for (int64_t j = 0; j < N; j++) {
                if (j == n) continue;
                vi both = b.alive[n] & b.alive[j];
                too_close |= (norm3(sub(dp, b.dp[j])) < min_dist) & both;
                vec3 seg = cable_seg[j], r = sub(dp, cable_top[j]);
                vf t = vclamp(dot(r, seg) / vmax(dot(seg, seg), splat(1e-9f)), splat(0.0f), splat(1.0f));
                vec3 off = {{r.v[0] - t * seg.v[0], r.v[1] - t * seg.v[1], r.v[2] - t * seg.v[2]}};
                cable_hit |= (norm3(off) < cable_dist) & both;
            }
        }
        crash |= ~ok;
        vi load_ground = lpv.v[2] - (float)p[P_LOAD_HALF] < (float)p[P_CLEARANCE];
        vec3 lrel = sub(lpv, spv);
        vi load_out = (vabs(lrel.v[0]) > bounds_xy) | (vabs(lrel.v[1]) > bounds_xy) | (vabs(lrel.v[2]) > bounds_z);
        vi out_of_bounds = mav_out | load_out;
        vi term = crash | load_ground | too_close | cable_hit | out_of_bounds;
        vi why[WHY_COUNT];
        why[WHY_CRASH] = crash;
        why[WHY_LOAD_GROUND] = load_ground;
        why[WHY_DRONE_PROXIMITY] = too_close;
        why[WHY_CABLE_PROXIMITY] = cable_hit;
        why[WHY_OUT_OF_BOUNDS] = out_of_bounds;
        for (int k = 0; k < WHY_COUNT; k++)
            for (int i = 0; i < nv; i++) reasons[k * E + e0 + i] = (uint8_t)(why[k][i] != 0);

        /* Rewards (_rewards): raw terms times their weights, summed in the config's order. */
        vf pos_err = norm3(gp_rel);
        vf dq = vmin(vabs(lq[0] * gq[0] + lq[1] * gq[1] + lq[2] * gq[2] + lq[3] * gq[3]), splat(1.0f));
        vf ori_err = 2.0f * vacos(dq);
        st(errors + e0, 1, nv, pos_err);
        st(errors + E + e0, 1, nv, ori_err);
        vf w_pos = (float)p[P_W_POSITION] * vexp(-pos_err / (float)p[P_POS_SIGMA]);
        vf w_ori = (float)p[P_W_ORIENTATION] * vexp(-ori_err / (float)p[P_ORI_SIGMA]);
        vf w_end = w_term * bool_f(term);
        vf sums[T_COUNT];
        for (int k = 0; k < T_COUNT; k++) sums[k] = splat(0.0f);
        vf rew[MAX_MAVS], rew_total = splat(0.0f);
        for (int64_t n = 0; n < N; n++) {
            const int64_t en = e0 * N + n;
            vf smooth = splat(0.0f), rate = splat(0.0f), form = splat(0.0f);
            for (int k = 0; k < A; k++) {
                vf d = ld(last_action + A * en + k, A * N, nv) - ld(prev_action + A * en + k, A * N, nv);
                smooth += d * d;
            }
            for (int k = 0; k < 3; k++) rate += b.dw[n].v[k] * b.dw[n].v[k];
            vf hover = ld(hover_tension + en, N, nv);
            vf c = (b.tension[n] - hover) / hover;
            vec3 off = qrot(lq_conj, sub(b.dp[n], lpv));
            for (int k = 0; k < 3; k++) {
                vf d = off.v[k] - ld(formation_offset + 3 * en + k, 3 * N, nv);
                form += d * d;
            }
            vf live = fault ? bool_f(b.alive[n]) : splat(1.0f);
            vf w[T_COUNT]; /* summed in the terms' order, as the torch code sums them */
            w[T_POSITION] = w_pos;
            w[T_ORIENTATION] = w_ori;
            w[T_ACTION_SMOOTHNESS] = (float)p[P_W_ACTION_SMOOTHNESS] * (smooth * live);
            w[T_BODY_RATE] = (float)p[P_W_BODY_RATE] * (rate * live);
            w[T_CABLE_FORCE] = (float)p[P_W_CABLE_FORCE] * (c * c * live);
            w[T_FORMATION] = (float)p[P_W_FORMATION] * (form * live);
            w[T_TERMINATION] = w_end;
            w[T_ALIVE] = splat(0.0f);
            w[T_PENALTY_BOUND] = splat(0.0f);
            vf r = splat(0.0f);
            if (bound > 0.0f) { /* the plain profile: alive + bounded penalties >= 0 (RewardCfg) */
                vf pen = w[T_ACTION_SMOOTHNESS] + w[T_BODY_RATE] + w[T_CABLE_FORCE] + w[T_FORMATION];
                vf bounded = bound * (vexp(pen / bound) - 1.0f);
                r = w_pos + w_ori + (alive + bounded) + w_end;
                w[T_ALIVE] = splat(alive);
                w[T_PENALTY_BOUND] = bounded - pen;
                for (int k = 0; k < T_COUNT; k++) sums[k] += w[k];
            } else {
                for (int k = 0; k < T_COUNT; k++) { r += w[k]; sums[k] += w[k]; }
            }
            rew[n] = r;
            rew_total += r;
        }

        /* The non-finite guard (MultiAgentEnv._post_physics): such an env ends now, rewarded 0. */
        vf tot;
        for (int i = 0; i < W; i++) tot[i] = total[i];
        vi is_bad = ~finite(tot + rew_total);
        for (int64_t n = 0; n < N; n++) st(reward + e0 * N + n, N, nv, sel(is_bad, splat(0.0f), rew[n]));
        for (int k = 0; k < T_COUNT; k++) st(terms + k * E + e0, 1, nv, sel(is_bad, splat(0.0f), sums[k] / (float)N));
        for (int i = 0; i < nv; i++) {
            terminated[e0 + i] = (uint8_t)((term[i] | is_bad[i]) != 0);
            bad[e0 + i] = (uint8_t)(is_bad[i] != 0);
        }
    }
}
