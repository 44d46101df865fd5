/* cable_load's control loop as one loop over the envs: the CPU fast path of CableLoadEnv._control_loop
 * (sim/tasks/cable_load/native.py builds and calls it).
 *
 * `decimation` control steps, each an INDI tick per MAV (sim.physics.components.INDI.step) and
 * `substeps` physics steps (CableLoadEnv._physics_step_components: motors, rotor wrench, cables, drag,
 * Newton-Euler for the MAVs and the load, ground contact). The torch code is the reference, tested against
 * this file (tests/test_cable_load_native.py); each env's state stays in registers for the whole loop.
 *
 * Layouts: contiguous float32 arrays; E envs, N MAVs, R rotors. State arrays are read and written in place.
 */
#include <math.h>
#include <stdint.h>

#define MAX_MAVS 6
#define MAX_ROTORS 8

/* Scalars, in this order (doubles; native.py packs them). */
enum {
    C_DECIMATION, C_SUBSTEPS, C_CTRL_DT, C_PHYS_DT, C_GRAVITY, C_INDI_GRAVITY, /* 3: the controller's vector */
    C_ALPHA = C_INDI_GRAVITY + 3, C_MASS, C_INERTIA,  /* 3 */
    C_K_RATE = C_INERTIA + 3, C_ATT_GAIN = C_K_RATE + 3, C_YAW_GAIN, C_COS_TILT, C_SIN_TILT, C_K_F,
    C_THRUST_MIN, C_THRUST_MAX, C_SPEED_MIN, C_SPEED_MAX, C_DRAG, /* 3 */
    C_CABLE_ATTACH = C_DRAG + 3, /* 3 */
    C_STIFFNESS = C_CABLE_ATTACH + 3, C_DAMPING, C_RELEASED, C_DIST_ON, C_DIST_PERIOD, C_MAV_RADIUS, C_LOAD_RADIUS,
    C_FRICTION, C_ALLOC, /* 4 * R, then the pseudo-inverse R * 4 */
};

typedef struct { float x, y, z; } v3;
typedef struct { float m[3][3]; } m3;

static inline v3 mk(float x, float y, float z) { v3 r = {x, y, z}; return r; }
static inline v3 ld3(const float* p) { return mk(p[0], p[1], p[2]); }
static inline void st3(float* p, v3 v) { p[0] = v.x; p[1] = v.y; p[2] = v.z; }
static inline v3 vadd(v3 a, v3 b) { return mk(a.x + b.x, a.y + b.y, a.z + b.z); }
static inline v3 vsub(v3 a, v3 b) { return mk(a.x - b.x, a.y - b.y, a.z - b.z); }
static inline float vdot(v3 a, v3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
static inline v3 vcross(v3 a, v3 b) { return mk(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x); }
static inline float vnorm(v3 a) { return sqrtf(vdot(a, a)); }
static inline float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* components.quat_to_matrix */
static inline m3 q2m(const float* q) {
    float w = q[0], x = q[1], y = q[2], z = q[3];
    float xx = x * x, yy = y * y, zz = z * z, xy = x * y, xz = x * z, yz = y * z, wx = w * x, wy = w * y, wz = w * z;
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

typedef struct { float pos[3], quat[4], vel[3], w[3]; } body;

/* components.quat_integrate */
static inline void quat_integrate(float* q, v3 w, float dt) {
    float rate = vnorm(w), half = 0.5f * rate * dt;
    float scale = rate > 1e-9f ? sinf(half) / rate : 0.5f * dt;
    float d[4] = {cosf(half), w.x * scale, w.y * scale, w.z * scale};
    float o[4] = {
        q[0] * d[0] - q[1] * d[1] - q[2] * d[2] - q[3] * d[3],
        q[0] * d[1] + q[1] * d[0] + q[2] * d[3] - q[3] * d[2],
        q[0] * d[2] - q[1] * d[3] + q[2] * d[0] + q[3] * d[1],
        q[0] * d[3] + q[1] * d[2] - q[2] * d[1] + q[3] * d[0],
    };
    float n = sqrtf(o[0] * o[0] + o[1] * o[1] + o[2] * o[2] + o[3] * o[3]);
    for (int k = 0; k < 4; k++) q[k] = o[k] / n;
}

/* components.rigid_body_step then components.ground_contact (restitution 0). */
static inline void body_step(body* b, v3 force, v3 torque, float mass, const float* inertia, float dt, float g,
                             float radius, float friction) {
    v3 w = ld3(b->w);
    v3 acc = mk(force.x / mass, force.y / mass, force.z / mass - g);
    v3 gyro = vcross(w, mk(inertia[0] * w.x, inertia[1] * w.y, inertia[2] * w.z));
    v3 vel = mk(b->vel[0] + dt * acc.x, b->vel[1] + dt * acc.y, b->vel[2] + dt * acc.z);
    v3 nw = mk(w.x + dt * ((torque.x - gyro.x) / inertia[0]), w.y + dt * ((torque.y - gyro.y) / inertia[1]),
               w.z + dt * ((torque.z - gyro.z) / inertia[2]));
    v3 pos = mk(b->pos[0] + dt * vel.x, b->pos[1] + dt * vel.y, b->pos[2] + dt * vel.z);
    quat_integrate(b->quat, nw, dt);
    float depth = radius - pos.z;
    if (depth > 0) {
        pos.z = pos.z + depth;
        if (vel.z < 0) vel.z = -0.0f * vel.z;
        float keep = 1.0f - friction;
        vel.x *= keep;
        vel.y *= keep;
        nw.x *= keep;
        nw.y *= keep;
        nw.z *= keep;
    }
    st3(b->pos, pos);
    st3(b->vel, vel);
    st3(b->w, nw);
}

void cable_load_control_loop(
    int64_t E, int64_t N, int64_t R, int nthreads,
    float* dpos, float* dquat, float* dvel, float* dw,          /* [E, N, 3 / 4] */
    float* lpos, float* lquat, float* lvel, float* lw,          /* [E, 3 / 4] */
    float* rotor_speed, float* tension_out,                     /* [E, N, R], [E, N] */
    float* spec_force_f, float* thrust_f, float* torque_f, float* ang_acc_f, /* INDI memory [E, N, 3], [E, N] */
    float* prev_vel, float* prev_w, const float* yaw_ref,      /* [E, N, 3], [E, N, 3], [E, N] */
    const float* cmd,                                           /* [E, N, 5] scaled, delayed command */
    const float* decay, const float* thrust_scale, const float* mav_mass, const float* mav_inertia, /* [E,N,1/3] */
    const float* speed_max, const float* cable_length,          /* [E, N, 1], [E, N] */
    const float* load_mass, const float* load_inertia,          /* [E], [E, 3] */
    const float* attach,                                        /* [N, 3] */
    float* time, const float* fault_time, const int64_t* fault_agent, /* [E] */
    uint8_t* failed_out,                                        /* [E, N] */
    const float* dist_amp, const float* dist_phase,             /* [E, 3], [E] */
    const double* p)
{
    const int decimation = (int)p[C_DECIMATION], substeps = (int)p[C_SUBSTEPS];
    const float ctrl_dt = (float)p[C_CTRL_DT], dt = (float)p[C_PHYS_DT], g = (float)p[C_GRAVITY];
    const float a = (float)p[C_ALPHA], mass = (float)p[C_MASS], k_f = (float)p[C_K_F];
    const float inertia[3] = {(float)p[C_INERTIA], (float)p[C_INERTIA + 1], (float)p[C_INERTIA + 2]};
    const float k_rate[3] = {(float)p[C_K_RATE], (float)p[C_K_RATE + 1], (float)p[C_K_RATE + 2]};
    const float drag[3] = {(float)p[C_DRAG], (float)p[C_DRAG + 1], (float)p[C_DRAG + 2]};
    const float g_c[3] = {(float)p[C_INDI_GRAVITY], (float)p[C_INDI_GRAVITY + 1], (float)p[C_INDI_GRAVITY + 2]};
    const v3 r_c = mk((float)p[C_CABLE_ATTACH], (float)p[C_CABLE_ATTACH + 1], (float)p[C_CABLE_ATTACH + 2]);
    const float stiffness = (float)p[C_STIFFNESS], damping = (float)p[C_DAMPING];
    const int released = p[C_RELEASED] != 0.0, dist_on = p[C_DIST_ON] != 0.0;
    const float period = (float)p[C_DIST_PERIOD], friction = (float)p[C_FRICTION];
    const float pi = 3.14159265358979323846f;
    float alloc[4][MAX_ROTORS], pinv[MAX_ROTORS][4];
    for (int j = 0; j < 4; j++)
        for (int r = 0; r < R; r++) alloc[j][r] = (float)p[C_ALLOC + j * R + r];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 4; j++) pinv[r][j] = (float)p[C_ALLOC + 4 * R + r * 4 + j];

#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t e = 0; e < E; e++) {
        body d[MAX_MAVS], l;
        float speed[MAX_MAVS][MAX_ROTORS], tension[MAX_MAVS];
        for (int64_t n = 0; n < N; n++) {
            int64_t en = e * N + n;
            for (int k = 0; k < 3; k++) {
                d[n].pos[k] = dpos[3 * en + k];
                d[n].vel[k] = dvel[3 * en + k];
                d[n].w[k] = dw[3 * en + k];
            }
            for (int k = 0; k < 4; k++) d[n].quat[k] = dquat[4 * en + k];
            for (int r = 0; r < R; r++) speed[n][r] = rotor_speed[R * en + r];
            tension[n] = tension_out[en];
        }
        for (int k = 0; k < 3; k++) {
            l.pos[k] = lpos[3 * e + k];
            l.vel[k] = lvel[3 * e + k];
            l.w[k] = lw[3 * e + k];
        }
        for (int k = 0; k < 4; k++) l.quat[k] = lquat[4 * e + k];
        float t = time[e];
        int alive[MAX_MAVS];

        for (int c = 0; c < decimation; c++) {
            float speed_cmd[MAX_MAVS][MAX_ROTORS];
            m3 Rd[MAX_MAVS];
            /* INDI tick per MAV, then the fault and the thrust limit. */
            for (int64_t n = 0; n < N; n++) {
                int64_t en = e * N + n;
                Rd[n] = q2m(d[n].quat);
                const m3* Rm = &Rd[n];
                float thrust = 0, torque[3] = {0, 0, 0};
                for (int r = 0; r < R; r++) {
                    float f = k_f * (speed[n][r] * speed[n][r]);
                    thrust += alloc[0][r] * f;
                    for (int j = 0; j < 3; j++) torque[j] += alloc[1 + j][r] * f;
                }
                float* sf = spec_force_f + 3 * en;
                float* tq = torque_f + 3 * en;
                float* aa = ang_acc_f + 3 * en;
                float* pv = prev_vel + 3 * en;
                float* pw = prev_w + 3 * en;
                for (int k = 0; k < 3; k++) {
                    float m = (d[n].vel[k] - pv[k]) / ctrl_dt - g_c[k];
                    sf[k] = sf[k] + a * (m - sf[k]);
                    float aw = (d[n].w[k] - pw[k]) / ctrl_dt;
                    aa[k] = aa[k] + a * (aw - aa[k]);
                    tq[k] = tq[k] + a * (torque[k] - tq[k]);
                    pv[k] = d[n].vel[k];
                    pw[k] = d[n].w[k];
                }
                thrust_f[en] = thrust_f[en] + a * (thrust - thrust_f[en]);
                v3 z_b = mk(Rm->m[0][2], Rm->m[1][2], Rm->m[2][2]);
                const float* ac = cmd + 5 * en;
                v3 f_des = mk(z_b.x * thrust_f[en] + mass * ((ac[0] - g_c[0]) - sf[0]),
                              z_b.y * thrust_f[en] + mass * ((ac[1] - g_c[1]) - sf[1]),
                              z_b.z * thrust_f[en] + mass * ((ac[2] - g_c[2]) - sf[2]));
                float thrust_cmd = fmaxf(vdot(f_des, z_b), 0.0f);
                float f_norm = fmaxf(vnorm(f_des), 1e-6f);
                v3 z_des = mk(f_des.x / f_norm, f_des.y / f_norm, f_des.z / f_norm);
                if (z_des.z < (float)p[C_COS_TILT]) {
                    float h = fmaxf(sqrtf(z_des.x * z_des.x + z_des.y * z_des.y), 1e-9f);
                    z_des = mk(z_des.x / h * (float)p[C_SIN_TILT], z_des.y / h * (float)p[C_SIN_TILT], (float)p[C_COS_TILT]);
                }
                v3 tilt = rot_inv(Rm, vcross(z_b, z_des));
                float yaw = atan2f(Rm->m[1][0], Rm->m[0][0]);
                float y = yaw_ref[en] - yaw + pi, two_pi = 2 * pi;
                float rem = fmodf(y, two_pi);
                if (rem < 0) rem += two_pi;
                float yaw_err = rem - pi;
                float rate_cmd[3] = {(float)p[C_ATT_GAIN] * tilt.x + ac[3], (float)p[C_ATT_GAIN] * tilt.y + ac[4],
                                     (float)p[C_YAW_GAIN] * yaw_err};
                float wrench[4];
                wrench[0] = thrust_cmd;
                for (int k = 0; k < 3; k++)
                    wrench[1 + k] = tq[k] + inertia[k] * (k_rate[k] * (rate_cmd[k] - d[n].w[k]) - aa[k]);
                alive[n] = !(t >= fault_time[e] && fault_agent[e] == n);
                for (int r = 0; r < R; r++) {
                    float f = 0;
                    for (int j = 0; j < 4; j++) f += pinv[r][j] * wrench[j];
                    float s = sqrtf(clampf(f, (float)p[C_THRUST_MIN], (float)p[C_THRUST_MAX]) / k_f);
                    speed_cmd[n][r] = fminf(s, speed_max[en]) * (float)alive[n];
                }
            }
            v3 disturbance = mk(0, 0, 0);
            if (dist_on) {
                float wave = period > 0 ? 0.5f * (1.0f + sinf(2 * pi * t / period + dist_phase[e])) : 1.0f;
                disturbance = mk(dist_amp[3 * e] * wave, dist_amp[3 * e + 1] * wave, dist_amp[3 * e + 2] * wave);
            }
            /* Physics substeps. */
            for (int s = 0; s < substeps; s++) {
                m3 Rl = q2m(l.quat);
                v3 force_l = mk(0, 0, 0), torque_l = mk(0, 0, 0);
                v3 force_d[MAX_MAVS], torque_d[MAX_MAVS];
                for (int64_t n = 0; n < N; n++) {
                    int64_t en = e * N + n;
                    if (s > 0) Rd[n] = q2m(d[n].quat);
                    const m3* Rm = &Rd[n];
                    float thrust = 0, rt[3] = {0, 0, 0}, k = k_f * thrust_scale[en];
                    for (int r = 0; r < R; r++) {
                        float c_ = clampf(speed_cmd[n][r], (float)p[C_SPEED_MIN], (float)p[C_SPEED_MAX]);
                        speed[n][r] = c_ + (speed[n][r] - c_) * decay[en];
                        float f = k * (speed[n][r] * speed[n][r]);
                        thrust += alloc[0][r] * f;
                        for (int j = 0; j < 3; j++) rt[j] += alloc[1 + j][r] * f;
                    }
                    v3 w = ld3(d[n].w), lw3 = ld3(l.w), att = ld3(attach + 3 * n);
                    v3 p_d = vadd(ld3(d[n].pos), rot(Rm, r_c));
                    v3 v_d = vadd(ld3(d[n].vel), rot(Rm, vcross(w, r_c)));
                    v3 p_l = vadd(ld3(l.pos), rot(&Rl, att));
                    v3 v_l = vadd(ld3(l.vel), rot(&Rl, vcross(lw3, att)));
                    v3 delta = vsub(p_l, p_d);
                    float length = vnorm(delta), safe = fmaxf(length, 1e-6f);
                    v3 dir = mk(delta.x / safe, delta.y / safe, delta.z / safe);
                    float rate = vdot(vsub(v_l, v_d), dir), stretch = length - cable_length[en];
                    float ten = fmaxf(stiffness * stretch + damping * rate, 0.0f);
                    ten = stretch > 0 ? ten : 0.0f;
                    if (released) ten = ten * (float)alive[n];
                    tension[n] = ten;
                    v3 fc = mk(dir.x * ten, dir.y * ten, dir.z * ten);
                    v3 vb = rot_inv(Rm, ld3(d[n].vel));
                    v3 dr = rot(Rm, mk(-drag[0] * vb.x, -drag[1] * vb.y, -drag[2] * vb.z));
                    force_d[n] = mk(Rm->m[0][2] * thrust + dr.x + fc.x, Rm->m[1][2] * thrust + dr.y + fc.y,
                                    Rm->m[2][2] * thrust + dr.z + fc.z);
                    torque_d[n] = vadd(mk(rt[0], rt[1], rt[2]), vcross(r_c, rot_inv(Rm, fc)));
                    force_l = vadd(force_l, fc);
                    torque_l = vadd(torque_l, vcross(att, rot_inv(&Rl, fc)));
                }
                force_l = vadd(mk(-force_l.x, -force_l.y, -force_l.z), disturbance);
                torque_l = mk(-torque_l.x, -torque_l.y, -torque_l.z);
                for (int64_t n = 0; n < N; n++) {
                    int64_t en = e * N + n;
                    body_step(&d[n], force_d[n], torque_d[n], mav_mass[en], mav_inertia + 3 * en, dt, g,
                              (float)p[C_MAV_RADIUS], friction);
                }
                body_step(&l, force_l, torque_l, load_mass[e], load_inertia + 3 * e, dt, g, (float)p[C_LOAD_RADIUS],
                          friction);
            }
            t = t + ctrl_dt;
        }

        for (int64_t n = 0; n < N; n++) {
            int64_t en = e * N + n;
            for (int k = 0; k < 3; k++) {
                dpos[3 * en + k] = d[n].pos[k];
                dvel[3 * en + k] = d[n].vel[k];
                dw[3 * en + k] = d[n].w[k];
            }
            for (int k = 0; k < 4; k++) dquat[4 * en + k] = d[n].quat[k];
            for (int r = 0; r < R; r++) rotor_speed[R * en + r] = speed[n][r];
            tension_out[en] = tension[n];
            failed_out[en] = (uint8_t)!alive[n];
        }
        for (int k = 0; k < 3; k++) {
            lpos[3 * e + k] = l.pos[k];
            lvel[3 * e + k] = l.vel[k];
            lw[3 * e + k] = l.w[k];
        }
        for (int k = 0; k < 4; k++) lquat[4 * e + k] = l.quat[k];
        time[e] = t;
    }
}
