/* test_reuse_emu.c — the CUDA backend's buffer reuse under a memory plan,
 * on 2 ranks under cuemu, with a hand-built program whose plan puts two
 * values on the same bytes in each of three cases:
 *
 *   1. a collective on the communication stream reads A; A is freed and a
 *      kernel on the compute stream writes B over A's bytes.  The compute
 *      stream must wait for the collective (rt_buf_cuda.c, "Buffer reuse
 *      across the two streams"); cuemu runs streams lazily, so without that
 *      wait the kernel runs first and the collective sums B instead of A.
 *   2. a deferred send reads S; S is freed before the send goes out (it
 *      joins the next receive's NCCL group) and a kernel writes T over S's
 *      bytes: the send must read a copy (cuda_stage_sends), else it sends T.
 *   3. a kernel last reads E; E is freed and a collective writes G over E's
 *      bytes: the communication stream must follow the kernel.
 *
 * Values hold small integers, exact in bf16.  With the argument `cpuplan`
 * the same table carries a plan with the CPU target's 64-byte offsets, which
 * the backend must refuse, naming baspc --target=cuda (the test expects that
 * message). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_cuda.h"

enum { N = 64 };
enum { W = 0 };
static const int r_world[] = {0, 1};
static const rt_group_desc groups[] = {{"world", 1, 2, r_world, 0}};

enum { P, Q, TOK, TGT, A, Y, B, S, T, R, E, F, G, NV };
static rt_value_desc vals[NV];
static int failures, rank_;

/* Slots are 256 bytes (64 bf16 elements); A and B, S and T, E and G share. */
static const int64_t slot_of[NV] = {[P] = 0, [Q] = 1, [TOK] = 2, [TGT] = 3, [A] = 4, [Y] = 5, [B] = 4,
                                    [S] = 6, [T] = 6, [R] = 7,   [E] = 8,   [F] = 9, [G] = 8};

static void def(int v, const char *name, rt_value_kind kind, rt_dtype dt, int64_t offset) {
    rt_value_desc *d = &vals[v];
    d->name = name, d->kind = kind, d->dtype = dt, d->rank = 1, d->dims[0] = N, d->shard[0] = -1;
    d->local_elems = N, d->offset = offset;
}

static rt_program prog = {.model = "test_reuse",
                          .spec = "tests/gpu/emu/test_reuse_emu.c",
                          .world = 2,
                          .nodes = 1,
                          .devices_per_node = 2,
                          .ngroups = 1,
                          .groups = groups,
                          .nvalues = NV,
                          .values = vals,
                          .nopt = 0,
                          .tokens = TOK,
                          .targets = TGT,
                          .loss = Y,
                          .micro_batch = 1,
                          .seq_len = N,
                          .vocab = 256,
                          .layers = 1,
                          .lr = 1e-3,
                          .steps = 1,
                          .seed = 7,
                          .batch_groups = 1,
                          .sp_size = 1,
                          .mem_arena_bytes = 10 * 256,
                          .mem_opt_offset = 10 * 256};

static void define_values(int64_t unit) {
    static const char *names[NV] = {"P", "Q", "TOK", "TGT", "A", "Y", "B", "S", "T", "R", "E", "F", "G"};
    for (int v = 0; v < NV; v++) {
        rt_value_kind k = v == P || v == Q ? RT_PARAM : v == TOK || v == TGT ? RT_INPUT : RT_ACT;
        def(v, names[v], k, v == TOK || v == TGT ? RT_I32 : RT_F32, slot_of[v] * unit);
    }
    prog.mem_arena_bytes = prog.mem_opt_offset = 10 * unit;
}

static void expect(rt_ctx *rt, int v, double (*want)(int rank, int i), const char *what) {
    float got[N];
    rt_host_read(rt, v, got);
    for (int i = 0; i < N; i++)
        if (got[i] != (float)want(rt->rank, i)) {
            failures++;
            fprintf(stderr, "rank %d: FAILED: %s: %s[%d] = %g, want %g\n", rt->rank, what, vals[v].name, i, got[i],
                    want(rt->rank, i));
            return;
        }
}

/* P and Q differ by rank, so a collective that read the wrong bytes shows. */
static double p_of(int r, int i) { return (double)(i % 8 + 1 + 10 * r); }
static double q_of(int r, int i) { return (double)(i % 4 + 50 + 20 * r); }
static double want_y(int r, int i) { return 2 * (p_of(0, i) + p_of(1, i)); } /* all_reduce of A = 2P */
static double want_b(int r, int i) { return 2 * q_of(r, i); }
static double want_r(int r, int i) { return 2 * p_of(1 - r, i); } /* the peer's S = 2P */
static double want_t(int r, int i) { return q_of(r, i) + p_of(r, i); }
static double want_f(int r, int i) { return 2 * p_of(r, i) + q_of(r, i); } /* E + Q, E = 2P */
static double want_g(int r, int i) { return q_of(0, i) + q_of(1, i); }

static void run(rt_ctx *rt) {
    float h[N];
    for (int i = 0; i < N; i++) h[i] = (float)p_of(rt->rank, i);
    rt_host_write(rt, P, h);
    for (int i = 0; i < N; i++) h[i] = (float)q_of(rt->rank, i);
    rt_host_write(rt, Q, h);
    /* 1: the collective reads A, a kernel writes B on its bytes. */
    rt_add(rt, rt_f32(rt, A), rt_f32(rt, P), rt_f32(rt, P), N);
    rt_all_reduce(rt, W, A, Y);
    rt_free(rt, A);
    rt_add(rt, rt_f32(rt, B), rt_f32(rt, Q), rt_f32(rt, Q), N);
    /* 2: a deferred send reads S, a kernel writes T on its bytes before the
     * send joins the receive's group. */
    rt_add(rt, rt_f32(rt, S), rt_f32(rt, P), rt_f32(rt, P), N);
    rt_send(rt, W, +1, S);
    rt_free(rt, S);
    rt_add(rt, rt_f32(rt, T), rt_f32(rt, Q), rt_f32(rt, P), N);
    rt_recv(rt, W, -1, R);
    /* 3: a kernel last reads E, the collective writes G on its bytes. */
    rt_add(rt, rt_f32(rt, E), rt_f32(rt, P), rt_f32(rt, P), N);
    rt_add(rt, rt_f32(rt, F), rt_f32(rt, E), rt_f32(rt, Q), N);
    rt_free(rt, E);
    rt_all_reduce(rt, W, Q, G);
    rt_comm_finish_step(rt);
    expect(rt, Y, want_y, "all_reduce input freed, its bytes rewritten by a kernel");
    expect(rt, B, want_b, "kernel output on the freed input's bytes");
    expect(rt, R, want_r, "deferred send of a value freed before the send went out");
    expect(rt, T, want_t, "kernel output on the sent value's bytes");
    expect(rt, F, want_f, "kernel reading a value freed before a collective wrote its bytes");
    expect(rt, G, want_g, "collective output on the freed value's bytes");
    /* Cases 1 and 2 each make the compute stream wait for the other. */
    int64_t waits = cuda_state(rt)->reuse_waits[0];
    if (!rt->planned || waits < 2) {
        failures++;
        fprintf(stderr, "rank %d: FAILED: %s, %lld compute-stream reuse waits (want the plan and >= 2)\n", rt->rank,
                rt->planned ? "memory plan" : "no plan", (long long)waits);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    bool cpuplan = argc > 1 && strcmp(argv[1], "cpuplan") == 0;
    define_values(cpuplan ? 64 : 256);
    rt_options o = {.steps = 1, .seed = 7, .lr = 1e-3, .log_every = 1, .optim = rt_optim_defaults};
    rt_ctx *rt = rt_ctx_create(&prog, &o); /* cpuplan: stops here */
    run(rt);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) printf("test_reuse_emu: %s (%d failure(s))\n", total ? "FAILED" : "ok", total);
    rt_ctx_destroy(rt);
    MPI_Finalize();
    return total ? 1 : 0;
}
