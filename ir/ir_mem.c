/* ir_mem.c — what a memory plan is made of: buffer sizes per target, live
 * ranges over the op order, the whole-step regions (optimizer state,
 * collective staging), and the verifier rule that no two buffers live at
 * the same time share a byte.  The plan itself is made by passes/memplan;
 * everything that reads one (the verifier, codegen, the cost model,
 * `baspc --memory`) takes its sizes and lifetimes from here, so that they
 * cannot disagree. */
#include "ir_verify.h"

#include <stdlib.h>
#include <string.h>

static const char *const mem_cat_names[IR_MEM_NCATS] = {"params", "grads", "optimizer", "activations", "comm",
                                                        "workspace"};

const char *ir_mem_cat_name(ir_mem_cat c) { return c >= 0 && c < IR_MEM_NCATS ? mem_cat_names[c] : "?"; }

ir_mem_target ir_mem_target_named(bool cuda) { return (ir_mem_target){cuda, cuda ? 256 : 64}; }

/* bf16 on a GPU device (a preset other than cpu*): the spec describes the
 * CUDA backend's run. */
bool ir_mem_default_cuda(const char *device, const char *precision)
{
    return device && precision && strcmp(precision, "bf16") == 0 && strncmp(device, "cpu", 3) != 0;
}

bool ir_mem_target_of(const ir_module *m, ir_mem_target *t)
{
    const char *s = ir_config_get(m, "mem.target");
    bool cuda = s ? strcmp(s, "cuda") == 0
                  : ir_mem_default_cuda(ir_config_get(m, "device"), ir_config_get(m, "precision"));
    *t = ir_mem_target_named(cuda);
    return !s || cuda || strcmp(s, "cpu") == 0;
}

bool ir_mem_planned(const ir_module *m) { return ir_config_get(m, "mem.peak") != NULL; }

bool ir_mem_has_buffer(const ir_module *m, int v)
{
    const ir_value *val = &m->values[v];
    return val->kind != IR_V_RESULT || (val->def >= 0 && val->def < m->nops);
}

bool ir_mem_keeps_f32(const ir_module *m, int v)
{
    int d = m->values[v].def;
    return m->values[v].kind == IR_V_RESULT && d >= 0 && d < m->nops && m->ops[d].code == IR_RING_ATTENTION &&
           m->ops[d].nout > 1 && m->ops[d].out[1] == v;
}

/* Element size in the runtime's buffers (the CPU computes in fp32; the CUDA
 * backend keeps every floating tensor in bf16, as rt_cu_esize does, except
 * those ir_mem_keeps_f32 names). */
static int64_t mem_esize(const ir_module *m, int v, ir_mem_target t)
{
    const ir_value *val = &m->values[v];
    if (!t.cuda || val->type.dtype == IR_I32 || val->type.rank == 0 || ir_mem_keeps_f32(m, v))
        return 4;
    return 2;
}

static int64_t mem_align(int64_t n, int64_t a)
{
    if (n > INT64_MAX - a)
        return -1;
    return (n + a - 1) / a * a;
}

/* n * k, or -1 on overflow (n, k >= 0). */
static int64_t mem_mul(int64_t n, int64_t k) { return k != 0 && n > INT64_MAX / k ? -1 : n * k; }

int64_t ir_mem_value_bytes(const ir_module *m, int v, ir_mem_target t)
{
    if (!ir_mem_has_buffer(m, v))
        return 0;
    const ir_value *val = &m->values[v];
    int64_t n = ir_type_local_elems(m, &val->type);
    if (n < 1)
        n = 1;
    int64_t b = mem_mul(n, mem_esize(m, v, t));
    return b < 0 ? -1 : mem_align(b, t.align);
}

int ir_mem_loss_value(const ir_module *m)
{
    int v = ir_value_find(m, "loss");
    if (v >= 0 && ir_mem_has_buffer(m, v))
        return v;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        if (op->code != IR_ALL_REDUCE || op->nin < 1 || op->nout < 1)
            continue;
        int def = m->values[op->in[0]].def;
        if (def >= 0 && def < m->nops && m->ops[def].code == IR_LM_HEAD_LOSS)
            return op->out[0];
    }
    return -1;
}

/* Which output of an op is a weight gradient (-1: none): the ops that turn
 * activations into a parameter-shaped result. */
static int weight_grad_output(ir_opcode code)
{
    switch (code) {
    case IR_EMBEDDING_BWD:
    case IR_BIAS_ADD_BWD: return 0;
    case IR_RMSNORM_BWD:
    case IR_LINEAR_BWD:
    case IR_LM_HEAD_LOSS_BWD: return 1;
    default: return -1;
    }
}

bool *ir_weight_flags(const ir_module *m)
{
    bool *w = sup_xcalloc((size_t)(m->nvalues ? m->nvalues : 1), sizeof *w);
    for (int v = 0; v < m->nvalues; v++)
        w[v] = m->values[v].kind == IR_V_PARAM || m->values[v].kind == IR_V_ACCUM;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        int k = weight_grad_output(op->code);
        if (k >= 0 && k < op->nout)
            w[op->out[k]] = true;
        if (op->code == IR_MLP_BWD) /* dx, then the three weight gradients */
            for (int o = 1; o < op->nout; o++)
                w[op->out[o]] = true;
        /* Sums and reductions of weight-like values stay weight-like (the
         * tied-embedding gradient sum, ZeRO's collectives). */
        bool passes_through = op->code == IR_ADD || ir_op_desc_of(op->code)->kind == IR_K_COLL;
        if (passes_through && op->nin > 0 && w[op->in[0]])
            for (int o = 0; o < op->nout; o++)
                w[op->out[o]] = true;
    }
    return w;
}

ir_mem_cat *ir_mem_value_cats(const ir_module *m)
{
    bool *w = ir_weight_flags(m);
    ir_mem_cat *cat = sup_xcalloc((size_t)(m->nvalues ? m->nvalues : 1), sizeof *cat);
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = &m->values[v];
        const ir_op *def = val->kind == IR_V_RESULT && val->def >= 0 && val->def < m->nops ? &m->ops[val->def] : NULL;
        /* A ZeRO working copy (all_gather of a parameter) is a parameter. */
        bool gathered = def && def->code == IR_ALL_GATHER && def->nin > 0 && m->values[def->in[0]].kind == IR_V_PARAM;
        cat[v] = val->kind == IR_V_PARAM || gathered ? IR_MEM_PARAMS : w[v] ? IR_MEM_GRADS : IR_MEM_ACTS;
    }
    free(w);
    return cat;
}

int64_t ir_mem_opt_bytes(const ir_module *m, ir_mem_target t)
{
    int64_t total = 0;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        if (op->code != IR_ADAMW || op->nin < 1)
            continue;
        int64_t n = ir_type_local_elems(m, &m->values[op->in[0]].type);
        int64_t one = mem_align(mem_mul(n < 1 ? 1 : n, 4), t.align);
        int64_t all = mem_mul(one, t.cuda ? 3 : 2);
        if (one < 0 || all < 0 || total > INT64_MAX - all)
            return -1;
        total += all;
    }
    return total;
}

static int64_t local_elems(const ir_module *m, int v) { return ir_type_local_elems(m, &m->values[v].type); }

/* Product of the local dims of v before dim d (the runtime's "outer" count:
 * a gather or scatter along an inner dim needs a staging copy). */
static int64_t outer_elems(const ir_module *m, int v, int d)
{
    int64_t o = 1;
    for (int i = 0; i < d && i < m->values[v].type.rank; i++)
        o *= ir_type_max_local_dim(m, &m->values[v].type, i);
    return o;
}

/* Whether adamw's gradient is laid out like its param (else ZeRO-1 copies
 * the param's slice of the whole gradient to the staging area). */
static bool grad_like_param(const ir_module *m, int p, int g)
{
    const ir_type *a = &m->values[p].type, *b = &m->values[g].type;
    for (int i = 0; i < a->rank && i < b->rank; i++)
        if (a->shard[i] != b->shard[i])
            return false;
    return true;
}

/* What runtime/cpu/rt_comm.c, rt_opt.c and rt_ring.c ask of rt_scratch, in elements. */
static void op_comm_elems(const ir_module *m, const ir_op *op, int64_t e[2])
{
    e[0] = e[1] = 0;
    switch (op->code) {
    case IR_ALL_TO_ALL: {
        int64_t fo = ir_attr_int(op, "fanout", 1), fi = ir_attr_int(op, "fanin", 1);
        for (int k = 0; k < op->nin && k < op->nout; k++) {
            e[0] += local_elems(m, op->in[k]) * (fo > 1 ? fo : 1);
            e[1] += local_elems(m, op->out[k]) * (fi > 1 ? fi : 1);
        }
        break;
    }
    case IR_ALL_GATHER:
        if (op->nin == 1 && op->nout == 1 && outer_elems(m, op->in[0], (int)ir_attr_int(op, "dim", 0)) > 1)
            e[0] = local_elems(m, op->out[0]);
        break;
    case IR_REDUCE_SCATTER:
        if (op->nin == 1 && op->nout == 1 && outer_elems(m, op->out[0], (int)ir_attr_int(op, "dim", 0)) > 1)
            e[0] = local_elems(m, op->in[0]);
        break;
    case IR_ADAMW:
        if (op->nin == 2 && !grad_like_param(m, op->in[0], op->in[1]))
            e[0] = local_elems(m, op->in[0]);
        break;
    case IR_RING_ATTENTION: /* two (k, v) blocks: the one in use and the next */
        e[0] = 2 * (local_elems(m, op->in[1]) + local_elems(m, op->in[2]));
        break;
    case IR_RING_ATTENTION_BWD: { /* two (k, v) and two (dk, dv) blocks; D */
        int64_t kv = local_elems(m, op->in[2]) + local_elems(m, op->in[3]);
        e[0] = 2 * kv;
        e[1] = 2 * kv + local_elems(m, op->in[5]);
        break;
    }
    default:
        break;
    }
}

void ir_mem_comm_bytes(const ir_module *m, ir_mem_target t, int64_t out[2])
{
    out[0] = out[1] = 0;
    if (t.cuda) /* the CUDA backend stages in its own device workspaces */
        return;
    for (int i = 0; i < m->nops; i++) {
        int64_t e[2];
        op_comm_elems(m, &m->ops[i], e);
        for (int k = 0; k < 2; k++) {
            int64_t b = e[k] > 0 ? mem_align(mem_mul(e[k], 4), t.align) : 0;
            if (b < 0)
                out[k] = -1;
            else if (out[k] >= 0 && b > out[k])
                out[k] = b;
        }
    }
}

/* The CUDA backend's grow-only device workspaces (runtime/cuda/rt_cuda.h
 * rt_cu_ws_slot): each slot grows to its largest request, and the slots
 * are separate allocations, so the total is the sum of the slots' maxima. */
enum {
    CW_SEND, CW_RECV, CW_COMM, CW_F32, CW_LOGITS, CW_DL, CW_ROWS, CW_ATTN, CW_SLICE, CW_ROPE, CW_MLP, CW_RING, CW_POS,
    CW_DOC, CW_CUDNN, CW_LSE,
    CW_CUDNN_STATS, /* not a slot: a sum over the attention forwards (cw_attention) */
    CW_N
};

static void cw_max(int64_t *slot, int64_t b)
{
    if (b > *slot)
        *slot = b;
}

/* Rows (or, for the backward, vocabulary columns) of one LM-head chunk:
 * kcu_lm_head_chunk(N, V) and kcu_lm_head_vchunk(N, V) = cw_lm_chunk(V, N)
 * in runtime/cuda/kcu_gemm.cu. */
static int64_t cw_lm_chunk(int64_t N, int64_t V)
{
    int64_t c = ((int64_t)256 << 20) / (6 * (V > 0 ? V : 1));
    if (c >= 64)
        c = c / 64 * 64;
    if (c < 1)
        c = 1;
    return c < N ? c : (N > 0 ? N : 1);
}

/* Rows of x [.., D]: every local dim but the last. */
static int64_t rows_of(const ir_module *m, int v)
{
    const ir_type *x = &m->values[v].type;
    return x->rank > 0 ? ir_type_local_elems(m, x) / x->dims[x->rank - 1] : 1;
}

/* RoPE's: the rotation table (in the ring's zig-zag order, and within
 * packed documents, one table covers all seq_len positions), the zig-zag
 * positions, and with documents every row's positions within them. */
static void cw_rope(const ir_module *m, const ir_op *op, int64_t *w, bool docs)
{
    const ir_type *x = &m->values[op->in[0]].type;
    bool zigzag = ir_config_int(m, "seq_ring", 0) > 1;
    int64_t rows = zigzag || docs ? ir_config_int(m, "seq_len", 0) : ir_type_max_local_dim(m, x, 1);
    if (x->rank != 4)
        return;
    cw_max(&w[CW_ROPE], 4 * rows * x->dims[3] + 1);
    if (zigzag)
        cw_max(&w[CW_POS], 8 * ir_config_int(m, "seq_len", 0));
    if (docs)
        cw_max(&w[CW_DOC], 8 * ir_type_max_local_dim(m, x, 0) * ir_type_max_local_dim(m, x, 1));
}

/* The most workspace cuDNN's attention may take for a shape (RT_WS_CUDNN):
 * the backward's fp32 dQ accumulator [b,H,S,Dh] plus the allowance for the
 * engine's own workspace (another such accumulator, two fp32 row vectors
 * and 1 MiB).  rt_cudnn_ws_bound in runtime/cuda/rt_attn_cudnn.c: the
 * runtime passes over engine configurations that need more, so this stays
 * an upper bound. */
static int64_t cw_cudnn_ws(int64_t b, int64_t S, int64_t H, int64_t Dh)
{
    int64_t rows = b * S * H, acc = 4 * rows * Dh;
    return acc + (acc + 8 * rows + ((int64_t)1 << 20));
}

/* Attention's device workspace: the backward's two fp32 row statistics per
 * (b, s, h); with packed documents (rt_cu_docattn_*) fp32 o and lse
 * forward, lse, D and fp32 dq, dk, dv backward, and the positions and the
 * rows' ids uploaded.  Without documents the runtime may also run cuDNN's
 * fused attention (runtime/cuda/rt_attn_cudnn_rt.c): its workspace slot,
 * and the fp32 softmax statistics [b,H,S] each forward leaves for its
 * backward, kept per output slot (at most one per attention forward op, so
 * the sum over the forwards bounds them; they live outside the arena). */
static void cw_attention(const ir_module *m, const ir_op *op, int64_t *w, bool docs)
{
    bool bwd = op->code == IR_ATTENTION_BWD;
    const ir_type *q = &m->values[op->in[bwd]].type, *k = &m->values[op->in[bwd + 1]].type;
    if (q->rank != 4 || k->rank != 4)
        return;
    int64_t b = ir_type_max_local_dim(m, q, 0), S = q->dims[1];
    int64_t nr = b * S * ir_type_max_local_dim(m, q, 2), nq = nr * q->dims[3];
    int64_t nkv = b * S * ir_type_max_local_dim(m, k, 2) * k->dims[3];
    if (!docs) {
        if (bwd)
            cw_max(&w[CW_ATTN], 8 * nr);
        cw_max(&w[CW_CUDNN], cw_cudnn_ws(b, S, ir_type_max_local_dim(m, q, 2), q->dims[3]));
        if (!bwd)
            w[CW_CUDNN_STATS] += 4 * nr;
        return;
    }
    cw_max(&w[CW_ATTN], bwd ? 4 * (2 * nr + nq + 2 * nkv) : 4 * (nq + nr));
    cw_max(&w[CW_DOC], 8 * S + 4 * b * S);
}

static void cw_op(const ir_module *m, const ir_op *op, int64_t *w)
{
    bool docs = ir_config_int(m, "documents", 0) != 0;
    int64_t e[2];
    switch (op->code) {
    case IR_ALL_TO_ALL: /* bf16 elements staged on both sides */
        op_comm_elems(m, op, e);
        cw_max(&w[CW_SEND], 2 * e[0]), cw_max(&w[CW_RECV], 2 * e[1]);
        break;
    case IR_ALL_GATHER:
    case IR_REDUCE_SCATTER:
        op_comm_elems(m, op, e);
        cw_max(&w[CW_COMM], 2 * e[0]);
        break;
    case IR_ADAMW:
        op_comm_elems(m, op, e);
        cw_max(&w[CW_SLICE], 2 * e[0]);
        break;
    case IR_EMBEDDING_BWD: /* fp32 [V, D] gradient sum */
        cw_max(&w[CW_F32], 4 * local_elems(m, op->out[0]));
        break;
    case IR_RMSNORM_BWD:
        cw_max(&w[CW_F32], 4 * local_elems(m, op->out[1]));
        break;
    case IR_ROPE:
    case IR_ROPE_BWD:
        cw_rope(m, op, w, docs);
        break;
    case IR_ATTENTION:
    case IR_ATTENTION_BWD:
        cw_attention(m, op, w, docs);
        break;
    case IR_LM_HEAD_LOSS:
    case IR_LM_HEAD_LOSS_BWD: {
        int64_t N = rows_of(m, op->in[0]), V = m->values[op->in[1]].type.dims[0];
        int64_t D = m->values[op->in[1]].type.dims[1], c = cw_lm_chunk(N, V), n = N > 0 ? N : 1;
        /* forward: [chunk, V] logits, the row losses and statistics;
         * backward: [N, vchunk] logits and dlogits, fp32 dx [N, D] */
        cw_max(&w[CW_LOGITS], 4 * c * V);
        cw_max(&w[CW_LSE], 4 * n);
        if (op->code == IR_LM_HEAD_LOSS) {
            cw_max(&w[CW_ROWS], 4 * n);
        } else {
            int64_t vc = cw_lm_chunk(V, N);
            cw_max(&w[CW_LOGITS], 4 * n * vc);
            cw_max(&w[CW_DL], 2 * n * vc);
            cw_max(&w[CW_F32], 4 * n * D);
        }
        break;
    }
    case IR_RING_ATTENTION: /* fp32 running output; two bf16 (k, v) blocks */
        cw_max(&w[CW_RING], 4 * local_elems(m, op->in[0]) + 8 * local_elems(m, op->in[1]) + 256);
        cw_max(&w[CW_POS], 8 * ir_config_int(m, "seq_len", 0));
        if (docs) /* every ring position's ids: the rows' whole sequence */
            cw_max(&w[CW_DOC], 4 * ir_type_max_local_dim(m, &m->values[op->in[0]].type, 0) *
                                   ir_config_int(m, "seq_len", 0));
        break;
    case IR_RING_ATTENTION_BWD: { /* D, fp32 dq; two bf16 (k, v) and two fp32 (dk, dv) blocks */
        int64_t nkv = local_elems(m, op->in[2]);
        cw_max(&w[CW_RING], 4 * local_elems(m, op->in[5]) + 4 * local_elems(m, op->in[1]) + 24 * nkv + 256);
        cw_max(&w[CW_POS], 8 * ir_config_int(m, "seq_len", 0));
        if (docs)
            cw_max(&w[CW_DOC], 4 * ir_type_max_local_dim(m, &m->values[op->in[1]].type, 0) *
                                   ir_config_int(m, "seq_len", 0));
        break;
    }
    case IR_MLP:
    case IR_MLP_BWD: {
        int bwd = op->code == IR_MLP_BWD;
        int64_t N = rows_of(m, op->in[bwd]), chunk = ir_attr_int(op, "chunk", 0);
        int64_t c = chunk >= 1 && chunk < N ? chunk : N;
        cw_max(&w[CW_MLP], 2 * 3 * c * m->values[op->in[bwd + 1]].type.dims[1]);
        break;
    }
    default:
        break;
    }
}

static int64_t cuda_work_bytes(const ir_module *m)
{
    int64_t w[CW_N] = {0}, total = 0;
    for (int i = 0; i < m->nops; i++)
        cw_op(m, &m->ops[i], w);
    for (int k = 0; k < CW_N; k++)
        total += w[k];
    return total;
}

/* Kernel workspace outside the arena.  CPU: the kernels' own grow-only
 * buffers (runtime/cpu/kern_lmhead.c: a [chunk, V] logits block of at most
 * 4 Mi floats; kern_basic.c: the RoPE cos/sin table of the local positions,
 * with explicit positions (the ring's zig-zag order) also a copy of them;
 * kern_mlp.c: g, u and s of one chunk of rows, 3 x chunk x F floats;
 * with packed documents kern_docattn.c's row statistics and positions, and
 * RoPE's copy of each row's positions).
 * CUDA: the device workspaces above, which also hold the collectives'
 * staging (the cuda plan has no staging region in the arena). */
int64_t ir_mem_work_bytes(const ir_module *m, ir_mem_target t)
{
    if (t.cuda)
        return cuda_work_bytes(m);
    bool docs = ir_config_int(m, "documents", 0) != 0;
    int64_t lm = 0, rope = 0, mlp = 0, dstats = 0, dpos = 0;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        if ((op->code == IR_MLP || op->code == IR_MLP_BWD) && op->nin >= 4) {
            const ir_type *x = &m->values[op->in[op->code == IR_MLP_BWD]].type;
            int64_t rows = x->rank > 0 ? ir_type_local_elems(m, x) / x->dims[x->rank - 1] : 1;
            int64_t chunk = ir_attr_int(op, "chunk", 0);
            if (chunk >= 1 && chunk < rows)
                rows = chunk;
            int64_t b = mem_mul(mem_mul(rows, m->values[op->in[op->code == IR_MLP_BWD ? 2 : 1]].type.dims[1]), 12);
            if (b > mlp)
                mlp = b;
        }
        if ((op->code == IR_LM_HEAD_LOSS || op->code == IR_LM_HEAD_LOSS_BWD) && op->nin >= 2) {
            int64_t V = m->values[op->in[1]].type.dims[0];
            int64_t rows = V > 0 ? ((int64_t)4 << 20) / V : 1;
            rows = rows > 64 ? 64 : rows < 1 ? 1 : rows;
            if (rows * V * 4 > lm)
                lm = rows * V * 4;
        }
        if ((op->code == IR_ROPE || op->code == IR_ROPE_BWD) && op->nin >= 1 && m->values[op->in[0]].type.rank == 4) {
            const ir_type *x = &m->values[op->in[0]].type;
            int64_t S = ir_type_max_local_dim(m, x, 1), b = S * x->dims[3] * 4;
            if (ir_config_int(m, "seq_ring", 0) > 1 || docs) /* the table keeps a copy of the positions */
                b += 8 * S;
            if (b > rope)
                rope = b;
        }
        if (docs && (op->code == IR_ATTENTION || op->code == IR_ATTENTION_BWD)) {
            /* kern_docattn: the row statistics (lse; the backward also D) and
             * the positions 0 .. S-1 */
            const ir_type *q = &m->values[op->in[op->code == IR_ATTENTION_BWD]].type;
            int64_t nr = q->rank == 4 ? ir_type_max_local_dim(m, q, 0) * q->dims[1] * ir_type_max_local_dim(m, q, 2) : 0;
            int64_t st = (op->code == IR_ATTENTION_BWD ? 8 : 4) * nr, ps = q->rank == 4 ? 8 * q->dims[1] : 0;
            dstats = st > dstats ? st : dstats;
            dpos = ps > dpos ? ps : dpos;
        }
    }
    return lm + rope + mlp + dstats + dpos;
}

void ir_mem_live(const ir_module *m, int *start, int *end)
{
    for (int v = 0; v < m->nvalues; v++) {
        if (!ir_mem_has_buffer(m, v)) {
            start[v] = end[v] = -2;
        } else if (m->values[v].kind != IR_V_RESULT) {
            start[v] = -1, end[v] = m->nops;
        } else {
            start[v] = end[v] = m->values[v].def;
        }
    }
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        for (int k = 0; k < op->nin; k++) {
            int v = op->in[k];
            if (v >= 0 && v < m->nvalues && start[v] != -2 && end[v] < i)
                end[v] = i;
        }
        /* The runtime reads the gradients adamw takes after the step (the
         * non-finite guard, --save-grads). */
        if (op->code == IR_ADAMW && op->nin == 2 && op->in[1] >= 0 && op->in[1] < m->nvalues &&
            start[op->in[1]] != -2)
            end[op->in[1]] = m->nops;
    }
    int loss = ir_mem_loss_value(m);
    if (loss >= 0)
        end[loss] = m->nops;
}

/* ---- the verifier's rule ------------------------------------------------------ */
typedef struct mem_item {
    int v; /* value index, or -1 - region */
    int64_t off, bytes;
    int start, end;
} mem_item;

static int item_by_off(const void *a, const void *b)
{
    const mem_item *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : 0;
}

static const char *item_name(const ir_module *m, const mem_item *it, char *buf, size_t n)
{
    static const char *const regions[] = {"the optimizer state", "the collectives' staging area"};
    if (it->v >= 0)
        snprintf(buf, n, "%%%s", m->values[it->v].name);
    else
        snprintf(buf, n, "%s", regions[-1 - it->v]);
    return buf;
}

static int64_t cfg_i64(const ir_module *m, const char *key) { return ir_config_int(m, key, -1); }

/* The two whole-step regions, checked against what the module needs and
 * added to it[]: the optimizer state, and the collectives' send area
 * followed by their receive area.  Returns how many were added. */
static int mem_regions(ir_vctx *c, ir_mem_target t, mem_item *it)
{
    const ir_module *m = c->m;
    int n = 0;
    int64_t comm[2];
    ir_mem_comm_bytes(m, t, comm);
    int64_t need[2] = {ir_mem_opt_bytes(m, t), comm[0] + comm[1]};
    int64_t roff[2] = {cfg_i64(m, "mem.opt_offset"), cfg_i64(m, "mem.comm_offset")};
    int64_t rbytes[2] = {cfg_i64(m, "mem.opt_bytes"), -1};
    int64_t b0 = cfg_i64(m, "mem.comm_bytes0"), b1 = cfg_i64(m, "mem.comm_bytes1");
    if (b0 < comm[0] || b1 < comm[1])
        ir_verr(c, sup_noloc(), "memory plan: the collectives need %lld + %lld staging bytes, the plan gives "
                "%lld + %lld (mem.comm_bytes0/1)", (long long)comm[0], (long long)comm[1], (long long)b0,
                (long long)b1);
    else
        rbytes[1] = b0 > INT64_MAX - b1 ? INT64_MAX : b0 + b1;
    for (int r = 0; r < 2; r++) {
        char nb[64];
        if (rbytes[r] >= 0 && rbytes[r] < need[r])
            ir_verr(c, sup_noloc(), "memory plan: %s needs %lld bytes, the plan gives %lld",
                    item_name(m, &(mem_item){-1 - r, 0, 0, 0, 0}, nb, sizeof nb), (long long)need[r],
                    (long long)rbytes[r]);
        else if (rbytes[r] > 0 && roff[r] < 0)
            ir_verr(c, sup_noloc(), "memory plan: %s has no offset",
                    item_name(m, &(mem_item){-1 - r, 0, 0, 0, 0}, nb, sizeof nb));
        else if (rbytes[r] > 0)
            it[n++] = (mem_item){-1 - r, roff[r], rbytes[r], -1, m->nops};
    }
    return n;
}

/* Every buffer placed, aligned, inside the arena, and no two buffers whose
 * live ranges meet share a byte.  Items sorted by offset; each is compared
 * with the later ones that start before it ends. */
void ir_verify_mem(ir_vctx *c)
{
    const ir_module *m = c->m;
    bool any = false;
    for (int v = 0; v < m->nvalues && !any; v++)
        any = m->values[v].mem_off >= 0;
    if (!ir_mem_planned(m)) {
        if (any)
            ir_verr(c, sup_noloc(), "memory plan: values are placed but config mem.peak is missing");
        return;
    }
    ir_mem_target t;
    if (!ir_mem_target_of(m, &t)) {
        ir_verr(c, sup_noloc(), "memory plan: mem.target must be cpu or cuda, found '%s'",
                ir_config_get(m, "mem.target"));
        return;
    }
    int64_t peak = cfg_i64(m, "mem.peak");
    if (peak < 0) {
        ir_verr(c, sup_noloc(), "memory plan: mem.peak must be a byte count, found '%s'", ir_config_get(m, "mem.peak"));
        return;
    }
    int *start = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    int *end = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    ir_mem_live(m, start, end);
    mem_item *it = sup_xmalloc(sizeof *it * (size_t)(m->nvalues + 3));
    int n = mem_regions(c, t, it);
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = &m->values[v];
        if (!ir_mem_has_buffer(m, v))
            continue;
        int64_t bytes = ir_mem_value_bytes(m, v, t);
        if (val->mem_off < 0) {
            ir_verr(c, val->loc, "memory plan: %%%s has no arena offset", val->name);
            continue;
        }
        if (val->mem_off % t.align != 0)
            ir_verr(c, val->loc, "memory plan: %%%s at offset %lld is not aligned to %lld bytes", val->name,
                    (long long)val->mem_off, (long long)t.align);
        it[n++] = (mem_item){v, val->mem_off, bytes, start[v], end[v]};
    }
    qsort(it, (size_t)n, sizeof *it, item_by_off);
    for (int i = 0; i < n; i++) {
        char a[IR_NAME_MAX + 40], b[IR_NAME_MAX + 40];
        sup_loc loc = it[i].v >= 0 ? m->values[it[i].v].loc : sup_noloc();
        if (it[i].bytes < 0 || it[i].off > peak - it[i].bytes)
            ir_verr(c, loc, "memory plan: %s [%lld, +%lld) ends past the arena's %lld bytes (mem.peak)",
                    item_name(m, &it[i], a, sizeof a), (long long)it[i].off, (long long)it[i].bytes,
                    (long long)peak);
        int64_t stop = it[i].bytes < 0 || it[i].off > INT64_MAX - it[i].bytes ? INT64_MAX : it[i].off + it[i].bytes;
        for (int j = i + 1; j < n && it[j].off < stop; j++) {
            if (it[j].start > it[i].end || it[i].start > it[j].end)
                continue;
            int lo = it[i].start > it[j].start ? it[i].start : it[j].start;
            ir_verr(c, it[j].v >= 0 ? m->values[it[j].v].loc : loc,
                    "memory plan: %s [%lld, +%lld) and %s [%lld, +%lld) overlap while both are live (op %d)",
                    item_name(m, &it[i], a, sizeof a), (long long)it[i].off, (long long)it[i].bytes,
                    item_name(m, &it[j], b, sizeof b), (long long)it[j].off, (long long)it[j].bytes,
                    lo < 0 ? 0 : lo);
        }
    }
    free(it);
    free(start);
    free(end);
}
