/* rt_graph_cuda.c — the step as CUDA graphs (BASP_CUDA_GRAPH=on).
 *
 * A step queues thousands of kernels, copies and collectives; the host
 * spends some microseconds on each (the runtime call, its checks, the
 * launch), and where the device finishes an op sooner than the host queues
 * the next, the device waits.  A CUDA graph records a stream's work once
 * and queues all of it with one call.
 *
 * What runs how.  Each step function of the program (step: the whole step,
 * or one micro-step under accumulation; apply: the apply phase) runs
 * eagerly on its first call: the one-time checks of cuDNN's attention,
 * its plans and the workspaces' growth happen there.  Its second call runs
 * under a stream capture of the compute stream, with the communication
 * stream joined from the start, and the graph is launched at once, so that
 * call's step is computed by the graph.  Later calls launch the graph and
 * run none of the function's host code.
 *
 * The gradient norm.  Clipping needs the global norm before the first
 * update, and the norm is a host decision (core's rt_grad_norm_set: a sum
 * over the ranks, the clip factor, the non-finite skip).  The capture is cut
 * there: rt_backend_grad_sumsq queues the sums of squares and their copy to
 * pinned memory, the graph so far ends and runs, the host combines the sums,
 * and the capture goes on from the first update (cuda_graph_resume) to the
 * end of the function.  The updates read the step's learning rate, bias
 * corrections and clip factor from device memory (kcu_adamw_step), which a
 * copy node of the graph brings from pinned memory the host fills after the
 * norm.  So a step function is one or two graphs, launched with the norm
 * between them.
 *
 * Which runs.  Static shapes and no host work inside the step: refused
 * (with the reason) under packed documents (per-step document tables),
 * batch_aware dynamic (per-step groups), the optimizer on the host
 * (host updates), and --profile / --trace-run (they time each op).
 *
 * What the host no longer sees.  A capture records no timing events, so
 * the step's collectives are not timed (the log says so); the calls and
 * bytes each graph's capture counted are counted again at each launch.  A
 * device buffer a graph uses must not move or change outside it: every
 * reallocation of a backend buffer, and every rewrite of a cached table
 * (RoPE's rotations, the sequence positions), bumps cu->ws_gen, and a
 * function captured under another generation runs eagerly once and is
 * captured again.
 *
 * cuBLAS gets a workspace of its own (cublasSetWorkspace), so that no GEMM
 * allocates one during a capture.  runtime/README.md, "CUDA graphs", has
 * the rules and what the tests check. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_cuda.h"

enum { CUDA_GRAPH_FNS = 4, CUDA_GRAPH_SEGS = 4 };

/* cuBLAS's workspace in graph mode: the size cuBLAS's reference
 * (cublasSetWorkspace) recommends for Hopper, 4 MiB elsewhere. */
#define CUDA_BLAS_WS_BYTES ((size_t)32 << 20)

/* One graph of a step function: whether the gradient norm is taken after
 * it, and what its capture counted (calls, bytes), counted again at each
 * launch. */
typedef struct cuda_graph_seg {
    cudaGraphExec_t exec;
    bool cut;
    int64_t kern_calls[CM_K_N], coll_calls[RT_C_NKINDS], coll_bytes[RT_C_NKINDS], step_bytes;
} cuda_graph_seg;

/* One step function's graphs in order, its calls so far (since it was last
 * dropped), and the buffers' generation it was captured under. */
typedef struct cuda_graph_fn {
    void (*fn)(rt_ctx *rt);
    int64_t calls;
    int nseg;
    cuda_graph_seg seg[CUDA_GRAPH_SEGS];
    uint64_t ws_gen;
} cuda_graph_fn;

struct cuda_graphs {
    bool on;
    cuda_graph_fn fn[CUDA_GRAPH_FNS];
    int nfn;
    cuda_graph_fn *cur;  /* being captured */
    bool capturing;      /* a capture is under way on cs */
    bool paused;         /* cut at the norm, not yet resumed */
    rt_counters counted; /* rt->total and rt->step_bytes when the capture (or its last graph) began */
    int64_t counted_bytes;
    void *blas_ws;
    int64_t captures, launches;
};

bool cuda_graph_capturing(const rt_ctx *rt) {
    const struct cuda_graphs *G = cuda_state(rt)->graphs;
    return G && G->capturing;
}

/* BASP_CUDA_GRAPH, resolved on the first step function's call (packed
 * documents are known by then) and announced once by rank 0. */
static struct cuda_graphs *cuda_graphs_of(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    if (cu->graphs) return cu->graphs;
    const char *s = getenv("BASP_CUDA_GRAPH");
    bool on = s && !strcmp(s, "on");
    RT_CHECK(!s || !*s || on || !strcmp(s, "off"), "BASP_CUDA_GRAPH=%s: expected on or off", s);
    const char *why = !on                   ? NULL
                      : rt->docs            ? "packed documents change the attention's tables every step"
                      : rt->base->nvariants ? "batch_aware dynamic chooses the groups every micro-step"
                      : rt->p->opt_on_host  ? "the optimizer runs on the host (train.offload), inside the step"
                      : rt->opt.profile     ? "--profile times each op"
                      : rt->opt.trace_run   ? "--trace-run times each op"
                                            : NULL;
    RT_CHECK(!why, "BASP_CUDA_GRAPH=on: a CUDA graph repeats one step's device work, but %s; run without it", why);
    struct cuda_graphs *G = RT_MALLOC(sizeof *G);
    memset(G, 0, sizeof *G);
    G->on = on;
    if (on) {
        CU_CHECK(cudaMalloc(&G->blas_ws, CUDA_BLAS_WS_BYTES));
        CUBLAS_CHECK(cublasSetWorkspace(cu->blas, G->blas_ws, CUDA_BLAS_WS_BYTES));
    }
    if (on && rt->rank == 0) {
        printf("cuda graphs: on (BASP_CUDA_GRAPH=on): each step function runs eagerly once, is captured on its "
               "second call and launched as graphs after (cut at the gradient norm); collectives are not timed\n");
        fflush(stdout);
    }
    cu->graphs = G;
    return G;
}

static cuda_graph_fn *cuda_graph_fn_of(struct cuda_graphs *G, void (*fn)(rt_ctx *rt)) {
    for (int i = 0; i < G->nfn; i++)
        if (G->fn[i].fn == fn) return &G->fn[i];
    RT_CHECK(G->nfn < CUDA_GRAPH_FNS, "CUDA graphs: more than %d step functions", CUDA_GRAPH_FNS);
    cuda_graph_fn *g = &G->fn[G->nfn++];
    memset(g, 0, sizeof *g);
    g->fn = fn;
    return g;
}

/* Its graphs go; its next call runs eagerly (caches the eager code between
 * may have changed are set up again there), the one after is captured. */
static void cuda_graph_drop(cuda_graph_fn *g) {
    for (int k = 0; k < g->nseg; k++) CU_CHECK(cudaGraphExecDestroy(g->seg[k].exec));
    g->nseg = 0;
    g->calls = 0;
}

/* A capture starts on cs; ms joins it at once, so that whatever the step
 * queues there (collectives, the waits for cs) is part of the graph. */
static void cuda_graph_begin(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    CU_CHECK(cudaStreamBeginCapture(cu->cs, cudaStreamCaptureModeGlobal));
    cu->graphs->capturing = true;
    cu->graphs->counted = rt->total, cu->graphs->counted_bytes = rt->step_bytes;
    cuda_follow_cs(rt);
}

/* The capture ends (ms rejoins cs first), its graph is instantiated as the
 * function's next segment, with what was counted since it began, and
 * launched. */
static void cuda_graph_end(rt_ctx *rt, bool cut) {
    rt_cuda_state *cu = cuda_state(rt);
    struct cuda_graphs *G = cu->graphs;
    cuda_graph_fn *g = G->cur;
    cuda_wait_comm(rt);
    cudaGraph_t graph;
    CU_CHECK(cudaStreamEndCapture(cu->cs, &graph));
    G->capturing = false;
    RT_CHECK(g->nseg < CUDA_GRAPH_SEGS, "CUDA graphs: a step function cut into more than %d graphs", CUDA_GRAPH_SEGS);
    cuda_graph_seg *sg = &g->seg[g->nseg];
    CU_CHECK(cudaGraphInstantiate(&sg->exec, graph, 0));
    CU_CHECK(cudaGraphDestroy(graph));
    sg->cut = cut;
    for (int k = 0; k < CM_K_N; k++) sg->kern_calls[k] = rt->total.kern_calls[k] - G->counted.kern_calls[k];
    for (int k = 0; k < RT_C_NKINDS; k++) {
        sg->coll_calls[k] = rt->total.coll_calls[k] - G->counted.coll_calls[k];
        sg->coll_bytes[k] = rt->total.coll_bytes[k] - G->counted.coll_bytes[k];
    }
    sg->step_bytes = rt->step_bytes - G->counted_bytes;
    CU_CHECK(cudaGraphLaunch(sg->exec, cu->cs));
    g->nseg++;
}

/* The device idle, every fence met: the next graph waits for nothing
 * recorded in this one (a graph may not wait for another's events). */
static void cuda_graph_drain(rt_ctx *rt) {
    CU_CHECK(cudaDeviceSynchronize());
    cuda_synced(rt);
}

void cuda_graph_cut(rt_ctx *rt) {
    struct cuda_graphs *G = cuda_state(rt)->graphs;
    if (!G || !G->capturing) return;
    cuda_graph_end(rt, true);
    cuda_graph_drain(rt);
    G->paused = true;
}

void cuda_graph_resume(rt_ctx *rt) {
    struct cuda_graphs *G = cuda_state(rt)->graphs;
    if (!G || !G->paused) return;
    G->paused = false;
    cuda_graph_begin(rt);
}

/* Captures fn's call (its device work also runs: each graph is launched as
 * it ends).  After a non-finite norm no update resumed the capture: the
 * rest of the call ran eagerly, and the graphs, incomplete, are dropped
 * (with --skip-nonfinite the run goes on and captures again). */
static void cuda_graph_capture(rt_ctx *rt, cuda_graph_fn *g) {
    rt_cuda_state *cu = cuda_state(rt);
    struct cuda_graphs *G = cu->graphs;
    G->cur = g;
    g->ws_gen = cu->ws_gen;
    cuda_graph_begin(rt);
    g->fn(rt);
    if (G->paused) {
        G->paused = false;
        cuda_graph_drop(g);
    } else {
        cuda_finish_sends(rt);
        cuda_graph_end(rt, false);
    }
    G->cur = NULL;
    G->captures++;
    rt->step_untimed = true;
}

/* fn's graphs in order, each counting what its capture counted; at a cut,
 * the norm from the sums the graph copied back, then the step's scalars
 * for the graph of the updates.  A non-finite norm skips the graphs after
 * the cut: the updates, as rt_adamw skips each, and what follows them in
 * the function (a gather of the unchanged weights; every rank skips alike,
 * the norm being global). */
static void cuda_graph_launch(rt_ctx *rt, cuda_graph_fn *g) {
    rt_cuda_state *cu = cuda_state(rt);
    for (int k = 0; k < g->nseg; k++) {
        const cuda_graph_seg *sg = &g->seg[k];
        CU_CHECK(cudaGraphLaunch(sg->exec, cu->cs));
        for (int i = 0; i < CM_K_N; i++) rt->total.kern_calls[i] += sg->kern_calls[i];
        for (int i = 0; i < RT_C_NKINDS; i++) {
            rt->total.coll_calls[i] += sg->coll_calls[i];
            rt->total.coll_bytes[i] += sg->coll_bytes[i];
        }
        rt->step_bytes += sg->step_bytes;
        if (!sg->cut) continue;
        cuda_graph_drain(rt);
        rt_grad_norm_set(rt, cu->h_norm);
        if (!isfinite(rt->grad_norm)) break;
        cuda_opt_fill(rt);
    }
    rt->step_untimed = true;
    cu->graphs->launches++;
}

void rt_backend_run(rt_ctx *rt, void (*fn)(rt_ctx *rt)) {
    rt_cuda_state *cu = cuda_state(rt);
    struct cuda_graphs *G = cuda_graphs_of(rt);
    cuda_graph_fn *g = G->on ? cuda_graph_fn_of(G, fn) : NULL;
    if (g && g->nseg > 0 && g->ws_gen != cu->ws_gen) cuda_graph_drop(g); /* a buffer it uses changed */
    if (!g || g->calls++ == 0) {
        fn(rt);
    } else if (g->nseg == 0) {
        cuda_graph_capture(rt, g);
    } else {
        cuda_graph_launch(rt, g);
    }
    rt_comm_finish_step(rt);
}

void cuda_graph_invalidate(rt_ctx *rt, const char *what) {
    rt_cuda_state *cu = cuda_state(rt);
    RT_CHECK(!cuda_graph_capturing(rt),
             "CUDA graphs: %s changes while a step is being captured, which a graph cannot repeat (the step's "
             "eager run before should have set it up); run with BASP_CUDA_GRAPH=off",
             what);
    cu->ws_gen++;
}

void cuda_graph_fini(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    struct cuda_graphs *G = cu->graphs;
    if (!G) return;
    if (G->on && rt->rank == 0 && getenv("BASP_CU_GRAPH_STATS"))
        fprintf(stderr, "cuda graphs: %lld capture(s), %lld launch(es)\n", (long long)G->captures,
                (long long)G->launches);
    for (int i = 0; i < G->nfn; i++) cuda_graph_drop(&G->fn[i]);
    if (G->blas_ws) {
        CUBLAS_CHECK(cublasSetWorkspace(cu->blas, NULL, 0)); /* detached before it is freed */
        CU_CHECK(cudaFree(G->blas_ws));
    }
    free(G);
    cu->graphs = NULL;
}
