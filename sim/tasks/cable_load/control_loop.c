/* cable_load's control loop, W envs at a time: the CPU fast path of CableLoadEnv._control_loop
 * (sim/tasks/cable_load/native.py builds and calls it).
 *
 * `decimation` control steps, each an INDI tick per MAV (sim.physics.components.INDI.step) and
 * `substeps` physics steps (CableLoadEnv._physics_step_components: motors, rotor wrench, cables, drag,
 * Newton-Euler for the MAVs and the load, ground contact). The torch code is the reference, tested against
 * this file (tests/test_cable_load_native.py). Each vector lane is one env (sim/core/simd.h): a block's state
 * is gathered once, advanced through the whole loop, and scattered back, and every branch is a per-lane select.
 *
 * Layouts: contiguous float32 arrays; E envs, N MAVs, R rotors.
 */
#include <stdint.h>
#include <string.h>

#include "simd.h"

/* MAX_MAVS, MAX_ROTORS, A (action components), the scalars' enum C_*, the outputs' enum O_* and the argument lists:
 * generated from native.py's CONTROL_LOOP declaration (sim/core/native.py writes the header before it builds). */
#include "control_loop_layout.h"

typedef struct { vf x, y, z; } v3;
typedef struct { vf m[3][3]; } m3;

static inline v3 mk(vf x, vf y, vf z) { v3 r = {x, y, z}; return r; }
static inline v3 mks(float x, float y, float z) { return mk(splat(x), splat(y), splat(z)); }
static inline v3 vadd(v3 a, v3 b) { return mk(a.x + b.x, a.y + b.y, a.z + b.z); }
static inline v3 vsub(v3 a, v3 b) { return mk(a.x - b.x, a.y - b.y, a.z - b.z); }
static inline vf vdot(v3 a, v3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
static inline v3 vcross(v3 a, v3 b) { return mk(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x); }
static inline vf vnorm(v3 a) { return vsqrt(vdot(a, a)); }

/* components.quat_to_matrix */
static inline m3 q2m(const vf* q) {
    vf w = q[0], x = q[1], y = q[2], z = q[3];
    vf xx = x * x, yy = y * y, zz = z * z, xy = x * y, xz = x * z, yz = y * z, wx = w * x, wy = w * y, wz = w * z;
    m3 r = {{{1 - 2 * (yy + zz), 2 * (xy - wz), 2 * (xz + wy)},
             {2 * (xy + wz), 1 - 2 * (xx + zz), 2 * (yz - wx)},
             {2 * (xz - wy), 2 * (yz + wx), 1 - 2 * (xx + yy)}}};
    return r;
}
static inline v3 rot(const m3* R, v3 v) {
    return mk(R->m[0][0] * v.x + R->m[0][1] * v.y + R->m[0][2] * v.z, R->m[1][0] * v.x + R->m[1][1] * v.y + R->m[1][2] * v.z,
              R->m[2][0] * v.x + R->m[2][1] * v.y + R->m[2][2] * v.z);
}
static inline v3 rot_inv(const m3* R, v3 v) {
    return mk(R->m[0][0] * v.x + R->m[1][0] * v.y + R->m[2][0] * v.z, R->m[0][1] * v.x + R->m[1][1] * v.y + R->m[2][1] * v.z,
              R->m[0][2] * v.x + R->m[1][2] * v.y + R->m[2][2] * v.z);
}

typedef struct { v3 pos, vel, w; vf quat[4]; } body;

/* components.quat_integrate */
static inline void quat_integrate(vf* q, v3 w, float dt) {
    vf rate = vnorm(w), half = 0.5f * rate * dt;
    vf scale = sel(rate > 1e-9f, vsin(half) / rate, splat(0.5f * dt));
    vf d[4] = {vcos(half), w.x * scale, w.y * scale, w.z * scale};
    vf o[4] = {
        q[0] * d[0] - q[1] * d[1] - q[2] * d[2] - q[3] * d[3],
        q[0] * d[1] + q[1] * d[0] + q[2] * d[3] - q[3] * d[2],
        q[0] * d[2] - q[1] * d[3] + q[2] * d[0] + q[3] * d[1],
        q[0] * d[3] + q[1] * d[2] - q[2] * d[1] + q[3] * d[0],
    };
    vf n = vsqrt(o[0] * o[0] + o[1] * o[1] + o[2] * o[2] + o[3] * o[3]);
    for (int k = 0; k < 4; k++) q[k] = o[k] / n;
}

/* components.rigid_body_step then components.ground_contact (restitution 0). */
static inline void body_step(body* b, v3 force, v3 torque, vf mass, const vf* inertia, float dt, float g,
                             float radius, float friction) {
    v3 w = b->w;
    v3 acc = mk(force.x / mass, force.y / mass, force.z / mass - g);
    v3 gyro = vcross(w, mk(inertia[0] * w.x, inertia[1] * w.y, inertia[2] * w.z));
    v3 vel = mk(b->vel.x + dt * acc.x, b->vel.y + dt * acc.y, b->vel.z + dt * acc.z);
    v3 nw = mk(w.x + dt * ((torque.x - gyro.x) / inertia[0]), w.y + dt * ((torque.y - gyro.y) / inertia[1]),
               w.z + dt * ((torque.z - gyro.z) / inertia[2]));
    v3 pos = mk(b->pos.x + dt * vel.x, b->pos.y + dt * vel.y, b->pos.z + dt * vel.z);
    quat_integrate(b->quat, nw, dt);
    vf depth = radius - pos.z;
    vi hit = depth > 0;
    pos.z = sel(hit, pos.z + depth, pos.z);
    vel.z = sel(hit & (vel.z < 0), -0.0f * vel.z, vel.z);
    float keep = 1.0f - friction;
    vel.x = sel(hit, vel.x * keep, vel.x);
    vel.y = sel(hit, vel.y * keep, vel.y);
    nw.x = sel(hit, nw.x * keep, nw.x);
    nw.y = sel(hit, nw.y * keep, nw.y);
    nw.z = sel(hit, nw.z * keep, nw.z);
    b->pos = pos;
    b->vel = vel;
    b->w = nw;
}

/* A vector of rows: element k of row e (stride floats per row) for the block's lanes. */
static inline v3 ld3(const float* base, int64_t stride, int nv) {
    return mk(ld(base, stride, nv), ld(base + 1, stride, nv), ld(base + 2, stride, nv));
}
static inline void st3(float* base, int64_t stride, int nv, v3 v) {
    st(base, stride, nv, v.x);
    st(base + 1, stride, nv, v.y);
    st(base + 2, stride, nv, v.z);
}

/* The arguments (CONTROL_LOOP_ARGS, in the order of native.py's declaration): sizes E, N, R and the thread count;
 * the state the loop advances (dpos ... prev_w, [E, N, ...] / [E, ...]), the other inputs (yaw_ref [E, N], cmd
 * [E, N, A] scaled and delayed, decay, thrust_scale, mav_mass [E, N, 1], mav_inertia [E, N, 3], speed_max [E, N, 1],
 * cable_length [E, N], load_mass [E], load_inertia [E, 3], attach [N, 3], time, fault_time, fault_agent [E]),
 * failed_out [E, N], dist_amp [E, 3], dist_phase [E], `out` (where the advanced state goes: the arrays from dpos
 * to time, in enum O_*'s order) and the scalars p. */
void cable_load_control_loop(CONTROL_LOOP_ARGS)
{
    const int decimation = (int)p[C_DECIMATION], substeps = (int)p[C_SUBSTEPS];
    const float ctrl_dt = (float)p[C_CTRL_DT], dt = (float)p[C_PHYS_DT], g = (float)p[C_GRAVITY];
    const float a = (float)p[C_ALPHA], mass = (float)p[C_MASS], k_f = (float)p[C_K_F];
    const float inertia[3] = {(float)p[C_INERTIA], (float)p[C_INERTIA + 1], (float)p[C_INERTIA + 2]};
    const float k_rate[3] = {(float)p[C_K_RATE], (float)p[C_K_RATE + 1], (float)p[C_K_RATE + 2]};
    const float drag[3] = {(float)p[C_DRAG], (float)p[C_DRAG + 1], (float)p[C_DRAG + 2]};
    const float g_c[3] = {(float)p[C_INDI_GRAVITY], (float)p[C_INDI_GRAVITY + 1], (float)p[C_INDI_GRAVITY + 2]};
    const v3 r_c = mks((float)p[C_CABLE_ATTACH], (float)p[C_CABLE_ATTACH + 1], (float)p[C_CABLE_ATTACH + 2]);
    const float stiffness = (float)p[C_STIFFNESS], damping = (float)p[C_DAMPING];
    const int released = p[C_RELEASED] != 0.0, dist_on = p[C_DIST_ON] != 0.0;
    const float period = (float)p[C_DIST_PERIOD], friction = (float)p[C_FRICTION];
    const float cos_tilt = (float)p[C_COS_TILT], sin_tilt = (float)p[C_SIN_TILT];
    const float att_gain = (float)p[C_ATT_GAIN], yaw_gain = (float)p[C_YAW_GAIN];
    const float thrust_min = (float)p[C_THRUST_MIN], thrust_max = (float)p[C_THRUST_MAX];
    const float speed_lo = (float)p[C_SPEED_MIN], speed_hi = (float)p[C_SPEED_MAX];
    const float mav_radius = (float)p[C_MAV_RADIUS], load_radius = (float)p[C_LOAD_RADIUS];
    const float pi = 3.14159265358979323846f, two_pi = 2 * pi;
    float alloc[4][MAX_ROTORS], pinv[MAX_ROTORS][4];
    for (int j = 0; j < 4; j++)
        for (int r = 0; r < R; r++) alloc[j][r] = (float)p[C_ALLOC + j * R + r];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 4; j++) pinv[r][j] = (float)p[C_ALLOC + 4 * R + r * 4 + j];
    v3 att[MAX_MAVS];
    for (int64_t n = 0; n < N; n++) att[n] = mks(attach[3 * n], attach[3 * n + 1], attach[3 * n + 2]);
    const int64_t blocks = (E + W - 1) / W, s3 = 3 * N, s4 = 4 * N, s5 = A * N, sR = R * N;

#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t blk = 0; blk < blocks; blk++) {
        const int64_t e0 = blk * W;
        const int nv = block_envs(E, e0);
        body d[MAX_MAVS], l;
        vf speed[MAX_MAVS][MAX_ROTORS], tension[MAX_MAVS];
        vf sf[MAX_MAVS][3], tq[MAX_MAVS][3], aa[MAX_MAVS][3], pv[MAX_MAVS][3], pw[MAX_MAVS][3];
        vf thr_f[MAX_MAVS], yref[MAX_MAVS], ac[MAX_MAVS][A], dec[MAX_MAVS], tscale[MAX_MAVS], mmass[MAX_MAVS];
        vf minert[MAX_MAVS][3], smax[MAX_MAVS], clen[MAX_MAVS];
        for (int64_t n = 0; n < N; n++) {
            const int64_t en = e0 * N + n;
            d[n].pos = ld3(dpos + 3 * en, s3, nv);
            d[n].vel = ld3(dvel + 3 * en, s3, nv);
            d[n].w = ld3(dw + 3 * en, s3, nv);
            for (int k = 0; k < 4; k++) d[n].quat[k] = ld(dquat + 4 * en + k, s4, nv);
            for (int r = 0; r < R; r++) speed[n][r] = ld(rotor_speed + R * en + r, sR, nv);
            tension[n] = ld(tension_out + en, N, nv);
            for (int k = 0; k < 3; k++) {
                sf[n][k] = ld(spec_force_f + 3 * en + k, s3, nv);
                tq[n][k] = ld(torque_f + 3 * en + k, s3, nv);
                aa[n][k] = ld(ang_acc_f + 3 * en + k, s3, nv);
                pv[n][k] = ld(prev_vel + 3 * en + k, s3, nv);
                pw[n][k] = ld(prev_w + 3 * en + k, s3, nv);
            }
            thr_f[n] = ld(thrust_f + en, N, nv);
            yref[n] = ld(yaw_ref + en, N, nv);
            for (int k = 0; k < A; k++) ac[n][k] = ld(cmd + A * en + k, s5, nv);
            dec[n] = ld(decay + en, N, nv);
            tscale[n] = ld(thrust_scale + en, N, nv);
            mmass[n] = ld(mav_mass + en, N, nv);
            for (int k = 0; k < 3; k++) minert[n][k] = ld(mav_inertia + 3 * en + k, s3, nv);
            smax[n] = ld(speed_max + en, N, nv);
            clen[n] = ld(cable_length + en, N, nv);
        }
        l.pos = ld3(lpos + 3 * e0, 3, nv);
        l.vel = ld3(lvel + 3 * e0, 3, nv);
        l.w = ld3(lw + 3 * e0, 3, nv);
        for (int k = 0; k < 4; k++) l.quat[k] = ld(lquat + 4 * e0 + k, 4, nv);
        const vf lmass = ld(load_mass + e0, 1, nv);
        const vf linert[3] = {ld(load_inertia + 3 * e0, 3, nv), ld(load_inertia + 3 * e0 + 1, 3, nv),
                              ld(load_inertia + 3 * e0 + 2, 3, nv)};
        const vf ftime = ld(fault_time + e0, 1, nv);
        const vi fagent = ld_i64(fault_agent + e0, 1, nv);
        vf t = ld(time + e0, 1, nv);
        vi alive[MAX_MAVS];

        for (int c = 0; c < decimation; c++) {
            vf speed_cmd[MAX_MAVS][MAX_ROTORS];
            m3 Rd[MAX_MAVS];
            /* INDI tick per MAV, then the fault and the thrust limit. */
            for (int64_t n = 0; n < N; n++) {
                Rd[n] = q2m(d[n].quat);
                const m3* Rm = &Rd[n];
                vf thrust = splat(0), torque[3] = {splat(0), splat(0), splat(0)};
                for (int r = 0; r < R; r++) {
                    vf f = k_f * (speed[n][r] * speed[n][r]);
                    thrust += alloc[0][r] * f;
                    for (int j = 0; j < 3; j++) torque[j] += alloc[1 + j][r] * f;
                }
                vf *sfk = sf[n], *tqk = tq[n], *aak = aa[n], *pvk = pv[n], *pwk = pw[n];
                const vf vel[3] = {d[n].vel.x, d[n].vel.y, d[n].vel.z}, w[3] = {d[n].w.x, d[n].w.y, d[n].w.z};
                for (int k = 0; k < 3; k++) {
                    vf m = (vel[k] - pvk[k]) / ctrl_dt - g_c[k];
                    sfk[k] = sfk[k] + a * (m - sfk[k]);
                    vf aw = (w[k] - pwk[k]) / ctrl_dt;
                    aak[k] = aak[k] + a * (aw - aak[k]);
                    tqk[k] = tqk[k] + a * (torque[k] - tqk[k]);
                    pvk[k] = vel[k];
                    pwk[k] = w[k];
                }
                thr_f[n] = thr_f[n] + a * (thrust - thr_f[n]);
                v3 z_b = mk(Rm->m[0][2], Rm->m[1][2], Rm->m[2][2]);
                const vf* cm = ac[n];
                v3 f_des = mk(z_b.x * thr_f[n] + mass * ((cm[0] - g_c[0]) - sfk[0]),
                              z_b.y * thr_f[n] + mass * ((cm[1] - g_c[1]) - sfk[1]),
                              z_b.z * thr_f[n] + mass * ((cm[2] - g_c[2]) - sfk[2]));
                vf thrust_cmd = vmax(vdot(f_des, z_b), splat(0.0f));
                vf f_norm = vmax(vnorm(f_des), splat(1e-6f));
                v3 z_des = mk(f_des.x / f_norm, f_des.y / f_norm, f_des.z / f_norm);
                vi tilted = z_des.z < cos_tilt;
                vf h = vmax(vsqrt(z_des.x * z_des.x + z_des.y * z_des.y), splat(1e-9f));
                z_des = mk(sel(tilted, z_des.x / h * sin_tilt, z_des.x), sel(tilted, z_des.y / h * sin_tilt, z_des.y),
                           sel(tilted, splat(cos_tilt), z_des.z));
                v3 tilt = rot_inv(Rm, vcross(z_b, z_des));
                vf yaw = vatan2(Rm->m[1][0], Rm->m[0][0]);
                vf rem = vfmod(yref[n] - yaw + pi, two_pi);
                rem = sel(rem < 0, rem + two_pi, rem);
                vf yaw_err = rem - pi;
                vf rate_cmd[3] = {att_gain * tilt.x + cm[3], att_gain * tilt.y + cm[4], yaw_gain * yaw_err};
                vf wrench[4];
                wrench[0] = thrust_cmd;
                for (int k = 0; k < 3; k++)
                    wrench[1 + k] = tqk[k] + inertia[k] * (k_rate[k] * (rate_cmd[k] - w[k]) - aak[k]);
                alive[n] = ~((t >= ftime) & (fagent == (int32_t)n));
                vf live = bool_f(alive[n]);
                for (int r = 0; r < R; r++) {
                    vf f = splat(0);
                    for (int j = 0; j < 4; j++) f += pinv[r][j] * wrench[j];
                    vf s = vsqrt(vclamp(f, splat(thrust_min), splat(thrust_max)) / k_f);
                    speed_cmd[n][r] = vmin(s, smax[n]) * live;
                }
            }
            v3 disturbance = mks(0, 0, 0);
            if (dist_on) {
                vf wave = period > 0 ? 0.5f * (1.0f + vsin(2 * pi * t / period + ld(dist_phase + e0, 1, nv)))
                                     : splat(1.0f);
                disturbance = mk(ld(dist_amp + 3 * e0, 3, nv) * wave, ld(dist_amp + 3 * e0 + 1, 3, nv) * wave,
                                 ld(dist_amp + 3 * e0 + 2, 3, nv) * wave);
            }
            /* Physics substeps. */
            for (int s = 0; s < substeps; s++) {
                m3 Rl = q2m(l.quat);
                v3 force_l = mks(0, 0, 0), torque_l = mks(0, 0, 0);
                v3 force_d[MAX_MAVS], torque_d[MAX_MAVS];
                for (int64_t n = 0; n < N; n++) {
                    if (s > 0) Rd[n] = q2m(d[n].quat);
                    const m3* Rm = &Rd[n];
                    vf thrust = splat(0), rt[3] = {splat(0), splat(0), splat(0)}, k = k_f * tscale[n];
                    for (int r = 0; r < R; r++) {
                        vf c_ = vclamp(speed_cmd[n][r], splat(speed_lo), splat(speed_hi));
                        speed[n][r] = c_ + (speed[n][r] - c_) * dec[n];
                        vf f = k * (speed[n][r] * speed[n][r]);
                        thrust += alloc[0][r] * f;
                        for (int j = 0; j < 3; j++) rt[j] += alloc[1 + j][r] * f;
                    }
                    v3 w = d[n].w, lw3 = l.w;
                    v3 p_d = vadd(d[n].pos, rot(Rm, r_c));
                    v3 v_d = vadd(d[n].vel, rot(Rm, vcross(w, r_c)));
                    v3 p_l = vadd(l.pos, rot(&Rl, att[n]));
                    v3 v_l = vadd(l.vel, rot(&Rl, vcross(lw3, att[n])));
                    v3 delta = vsub(p_l, p_d);
                    vf length = vnorm(delta), safe = vmax(length, splat(1e-6f));
                    v3 dir = mk(delta.x / safe, delta.y / safe, delta.z / safe);
                    vf rate = vdot(vsub(v_l, v_d), dir), stretch = length - clen[n];
                    vf ten = vmax(stiffness * stretch + damping * rate, splat(0.0f));
                    ten = sel(stretch > 0, ten, splat(0.0f));
                    if (released) ten = ten * bool_f(alive[n]);
                    tension[n] = ten;
                    v3 fc = mk(dir.x * ten, dir.y * ten, dir.z * ten);
                    v3 vb = rot_inv(Rm, d[n].vel);
                    v3 dr = rot(Rm, mk(-drag[0] * vb.x, -drag[1] * vb.y, -drag[2] * vb.z));
                    force_d[n] = mk(Rm->m[0][2] * thrust + dr.x + fc.x, Rm->m[1][2] * thrust + dr.y + fc.y,
                                    Rm->m[2][2] * thrust + dr.z + fc.z);
                    torque_d[n] = vadd(mk(rt[0], rt[1], rt[2]), vcross(r_c, rot_inv(Rm, fc)));
                    force_l = vadd(force_l, fc);
                    torque_l = vadd(torque_l, vcross(att[n], rot_inv(&Rl, fc)));
                }
                force_l = vadd(mk(-force_l.x, -force_l.y, -force_l.z), disturbance);
                torque_l = mk(-torque_l.x, -torque_l.y, -torque_l.z);
                for (int64_t n = 0; n < N; n++)
                    body_step(&d[n], force_d[n], torque_d[n], mmass[n], minert[n], dt, g, mav_radius, friction);
                body_step(&l, force_l, torque_l, lmass, linert, dt, g, load_radius, friction);
            }
            t = t + ctrl_dt;
        }

        for (int64_t n = 0; n < N; n++) {
            const int64_t en = e0 * N + n;
            st3(out[O_DPOS] + 3 * en, s3, nv, d[n].pos);
            st3(out[O_DVEL] + 3 * en, s3, nv, d[n].vel);
            st3(out[O_DW] + 3 * en, s3, nv, d[n].w);
            for (int k = 0; k < 4; k++) st(out[O_DQUAT] + 4 * en + k, s4, nv, d[n].quat[k]);
            for (int r = 0; r < R; r++) st(out[O_ROTOR_SPEED] + R * en + r, sR, nv, speed[n][r]);
            st(out[O_TENSION_OUT] + en, N, nv, tension[n]);
            for (int k = 0; k < 3; k++) {
                st(out[O_SPEC_FORCE_F] + 3 * en + k, s3, nv, sf[n][k]);
                st(out[O_TORQUE_F] + 3 * en + k, s3, nv, tq[n][k]);
                st(out[O_ANG_ACC_F] + 3 * en + k, s3, nv, aa[n][k]);
                st(out[O_PREV_VEL] + 3 * en + k, s3, nv, pv[n][k]);
                st(out[O_PREV_W] + 3 * en + k, s3, nv, pw[n][k]);
            }
            st(out[O_THRUST_F] + en, N, nv, thr_f[n]);
            for (int i = 0; i < nv; i++) failed_out[en + i * N] = (uint8_t)(alive[n][i] == 0);
        }
        st3(out[O_LPOS] + 3 * e0, 3, nv, l.pos);
        st3(out[O_LVEL] + 3 * e0, 3, nv, l.vel);
        st3(out[O_LW] + 3 * e0, 3, nv, l.w);
        for (int k = 0; k < 4; k++) st(out[O_LQUAT] + 4 * e0 + k, 4, nv, l.quat[k]);
        st(out[O_TIME] + e0, 1, nv, t);
    }
}

/* CableLoadEnv._apply_actions: the actions clamped to [-1, 1] (the new last action), pushed into the delay buffer
 * (DelayBuffer.push: newest first) and the command of `delay[e]` steps ago, scaled. With D = 1 (no delay buffer)
 * buf_in and buf_out are NULL. */
void cable_load_apply_actions(APPLY_ACTIONS_ARGS) { /* NA = N * A */
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t e = 0; e < E; e++) {
        const float* a = act + e * NA;
        float* last = last_action + e * NA;
        for (int64_t j = 0; j < NA; j++) {
            const float x = a[j];
            last[j] = x < -1.0f ? -1.0f : (x > 1.0f ? 1.0f : x);
        }
        const float* src = last;
        if (buf_out) {
            float* out = buf_out + e * D * NA;
            memcpy(out, last, (size_t)NA * sizeof(float));
            memcpy(out + NA, buf_in + e * D * NA, (size_t)((D - 1) * NA) * sizeof(float));
            src = out + delay[e] * NA;
        }
        for (int64_t j = 0; j < NA; j++) cmd[e * NA + j] = src[j] * scale[j % A];
    }
}
