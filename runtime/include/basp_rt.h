/* basp_rt.h — the runtime API that generated host programs call.  The only
 * public header of runtime/.
 *
 * A generated program (codegen/) is a schedule and nothing else: tables that
 * describe the process groups and every IR value (global shape, sharding,
 * local size), a `step` function with one runtime call per IR op in schedule
 * order, and `main` = rt_main(argc, argv, &program).  The runtime owns
 * everything that executes: MPI start-up, groups, the arena, parameter
 * initialisation, data, the training loop, collectives, kernels, optimizer,
 * logging and metrics.
 *
 * Conventions
 *   - CPU backend: every floating value is fp32 (the IR's bf16 means "the
 *     activation dtype"; the CPU computes it in fp32), integer values int32.
 *   - Buffers live in one arena; rt_f32(rt, V) / rt_i32(rt, V) return value
 *     V's local buffer (row-major, local dims = global dims divided by the
 *     set size of the group sharding each dim, or this rank's share of an
 *     uneven dim, see rt_value_desc.unit).
 *   - Every op OVERWRITES its outputs (gradients are summed explicitly by
 *     `add` ops in the IR), except rt_adamw which updates the parameter and
 *     its optimizer state in place.
 *   - Kernel calls take local sizes as constants computed by codegen; the
 *     collective and optimizer calls take value indices, and the runtime
 *     reads shapes and groups from the tables. */
#ifndef BASP_RT_H
#define BASP_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { RT_MAX_RANK = 6 };

typedef enum { RT_F32, RT_I32 } rt_dtype;
/* RT_ACCUM: a gradient accumulator (gradient accumulation): lives the whole
 * run like a parameter, zeroed by the runtime before each step's first
 * micro-step. */
typedef enum { RT_PARAM, RT_INPUT, RT_ACT, RT_ACCUM } rt_value_kind;

/* One process group: nsets disjoint sets of set_size ranks (they partition
 * the world); set s is ranks[s*set_size .. (s+1)*set_size). */
typedef struct rt_group_desc {
    const char *name;
    int nsets, set_size;
    const int *ranks;
    /* 0: ranks are world ranks.  K > 0: a group of a batch_aware dynamic
     * variant; ranks are positions 0..K-1 of the block of K consecutive
     * ranks that runs the variant, bound every micro-step (core/rt_dyn.c). */
    int block;
} rt_group_desc;

struct rt_ctx;
/* One variant of a batch_aware dynamic step: the micro-step of a group of
 * `size` ranks holding one row of seq_len = size * dyn_tokens tokens. */
typedef struct rt_variant {
    int size;
    int64_t seq_len;
    int seq_ring; /* the ring's zig-zag order (ring variants: size), else 0 */
    int tokens, targets, loss;
    void (*step)(struct rt_ctx *rt);
    /* Its exchange's cost per token a rank holds, in the assignment's
     * units (layout_dyn_shape.size_comm), from the cost model. */
    double comm;
} rt_variant;

typedef enum { RT_VCAT_DEFAULT = 0, RT_VCAT_PARAMS, RT_VCAT_GRADS, RT_VCAT_INPUTS, RT_VCAT_ACTS } rt_value_mem;

/* One IR value. */
typedef struct rt_value_desc {
    const char *name; /* IR name without % */
    rt_value_kind kind;
    rt_dtype dtype;
    int rank;                  /* 0 = scalar */
    int64_t dims[RT_MAX_RANK]; /* global */
    int shard[RT_MAX_RANK];    /* group index per dim, -1 = whole */
    int64_t local_elems;       /* product of local dims (1 for scalars); for an
                                       uneven value the largest rank's (its buffer size) */
    /* Uneven split unit per dim, 0 = even (dims divisible by the set size).
     * u >= 1: the dim of n = u*m entries is split in whole units of u; the
     * rank at position p of its set holds m/K + (p < m%K) units, starting at
     * unit p*(m/K) + min(p, m%K).  Only head dims of attention exchange
     * values are ever uneven (ir/README.md); tables may omit the field. */
    int64_t unit[RT_MAX_RANK];
    /* Byte offset of the buffer in the arena, from the compiler's memory
     * plan (rt_program.mem_arena_bytes > 0); buffers never live at the same
     * time may share bytes. */
    int64_t offset;
    /* 1: kept in fp32 by every backend (the CUDA one stores other floating
     * tensors in bf16): ring attention's log-sum-exp. */
    int keep_f32;
    /* The memory category the compiler counts the buffer in (ir_mem_value_cats,
     * the one rule: a parameter's gradient is a gradient, an activation's
     * an activation; a gathered copy of a parameter is a parameter), so that
     * the arena report and baspc --memory agree.  RT_VCAT_DEFAULT (tables
     * written by hand): from kind alone. */
    rt_value_mem mem_cat;
    /* 1: the buffer lives in host memory (an offload's result), at
     * `offset` in the host arena (rt_program.mem_host_bytes); only
     * rt_fetch reads it.  CUDA: pinned memory. */
    int on_host;
} rt_value_desc;

/* A parameter and the gradient its optimizer step reads. */
typedef struct rt_opt_pair {
    int param, grad; /* value indices */
} rt_opt_pair;

/* RoPE frequency scaling of a program (see rt_rope). */
typedef enum { RT_ROPE_NONE = 0, RT_ROPE_LLAMA3 = 1 } rt_rope_scaling;

typedef struct rt_ctx rt_ctx;

/* How packed documents are laid into rows (common/common.h: layout_pack). */
typedef enum { RT_PACK_SEQUENTIAL = 0, RT_PACK_BALANCED = 1 } rt_packing;

/* The learning-rate schedule (runtime/core/rt_sched.c states each formula). */
typedef enum { RT_SCHED_CONSTANT = 0, RT_SCHED_COSINE = 1, RT_SCHED_LINEAR = 2, RT_SCHED_WSD = 3 } rt_schedule_kind;

/* AdamW's settings and the schedule of the spec's train block; the
 * program's lr is the base (peak) rate. */
typedef struct rt_optim_desc {
    rt_schedule_kind schedule;
    double min_lr;       /* the rate the decay ends at (cosine, linear, wsd) */
    int64_t warmup;      /* steps of linear warmup from 0 */
    double wsd_decay;    /* wsd: the fraction of the post-warmup steps that decay */
    double weight_decay; /* decoupled, on matrices only (rt_weight_decay) */
    double beta1, beta2, eps;
    double grad_clip; /* the global gradient norm's limit; 0 = no clipping */
} rt_optim_desc;

typedef struct rt_program {
    const char *model; /* module name */
    const char *spec;  /* the spec file it was compiled from (for messages) */
    int world, nodes, devices_per_node;
    /* Where the compiler assumed ranks run: the node of every world rank, or
     * NULL for consecutive placement (rank r on node r / devices_per_node).
     * Checked against the hosts the ranks find themselves on at start-up. */
    const int *node_of;
    int ngroups;
    const rt_group_desc *groups;
    int nvalues;
    const rt_value_desc *values;
    int nopt;
    const rt_opt_pair *opt; /* in the order of the adamw ops */
    /* Special values (indices, -1 if absent). */
    int tokens, targets; /* inputs, i32 [B,S] */
    int loss;            /* f32 scalar: sum of the cross-entropy over all ranks' tokens */
    /* Model and training configuration (from the IR config). */
    int64_t micro_batch, seq_len, vocab, hidden, layers, heads, kv_heads, head_dim, ffn;
    double rope_theta, norm_eps, lr;
    int64_t steps, seed;
    int zero;
    int batch_groups, sp_size; /* G and K */
    /* RoPE scaling, applied by every rt_rope / rt_rope_bwd call.  The zero
     * value is RT_ROPE_NONE, so a table that omits these fields is
     * unscaled; the numbers are read only with RT_ROPE_LLAMA3. */
    rt_rope_scaling rope_scaling;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_max_pos;
    /* Qwen's attention features (0 = absent, the zero value): qkv_bias, the
     * parameters l<i>.bq [H,Dh], l<i>.bk, l<i>.bv [Hkv,Dh] added to the
     * projections (Hugging Face q_proj.bias ... of [H*Dh]); qk_norm,
     * l<i>.q_norm, l<i>.k_norm [Dh], RMSNorm over head_dim on q and k
     * before RoPE (q_norm.weight, k_norm.weight).  For checkpoints and
     * imports; the step itself is in the generated code. */
    int qkv_bias, qk_norm;
    /* The memory plan (baspc's pass memplan, ir/ir.h): one arena of
     * mem_arena_bytes holding every value at values[v].offset, the optimizer
     * state (per opt pair: AdamW m then v, each aligned) from mem_opt_offset,
     * and the collectives' send and receive staging areas of mem_comm_bytes
     * from mem_comm_offset.  A value's buffer is valid from the op defining it
     * until rt_free; generated code frees every buffer after its last reader.
     * 0 = no plan: every value and tensor of state gets its own slot. */
    int64_t mem_arena_bytes, mem_opt_offset, mem_comm_offset, mem_comm_bytes[2];
    /* The CUDA backend's device workspaces (common/common.h
     * CM_WS_CUDA_SLOTS, ws_nslots of them): slot k at ws_slot_off[k] of one
     * region of ws_region_bytes, ws_slot_bytes[k] long; slots the step never
     * uses at once overlap there (ir/ir_mem_work.c).  A slot at offset -1,
     * and every slot when ws_region_bytes is 0, has an allocation of its
     * own, grown on demand.  The CPU backend ignores them. */
    int64_t ws_region_bytes;
    int ws_nslots;
    const int64_t *ws_slot_off, *ws_slot_bytes;
    /* The host arena of the plan (values with on_host), 0 when nothing is
     * offloaded (or without a plan: one slot per host value). */
    int64_t mem_host_bytes;
    /* 1: the optimizer state (the mem_opt_offset region) is in the host
     * arena and AdamW runs on the host (train.offload optimizer or all);
     * the CUDA backend moves each gradient down and each updated parameter
     * up through the host staging area (mem_host_stage_offset, _bytes). */
    int opt_on_host;
    int64_t mem_host_stage_offset, mem_host_stage_bytes;
    /* The sequence order (0 = natural).  R > 1: ring attention's causal
     * load-balanced order for a ring of R: each sequence is cut into 2R
     * chunks and sequence index i holds the token at original position
     * kern_zigzag_pos(i, seq_len, R), so that ring position r holds chunks
     * r and 2R-1-r.  The loader, RoPE and the attention masks use the
     * original positions; everything else is per token. */
    int seq_ring;
    /* Collectives the step starts (IR async = 1, pass overlap): the CPU
     * backend then asks MPI for MPI_THREAD_MULTIPLE and runs a progress
     * thread while any is in flight (runtime/cpu/rt_async.c).  0: none. */
    int started;
    /* The layout strategy for the start-up banner (NULL: Ulysses or
     * batch-aware, told apart by batch_groups). */
    const char *layout;
    /* Packed documents (0: one token stream, plain causal attention).  With
     * documents = 1 the data is split into documents at eot_token, each
     * step's documents are packed into the rows (packing), attention stays
     * within a document, positions restart at 0 in each, and the target of a
     * document's last token is not counted. */
    int documents;
    int64_t eot_token;
    rt_packing packing;
    void (*step)(rt_ctx *rt); /* the generated schedule of one training step */
    /* Gradient accumulation: accum micro-steps (step, each on its own
     * micro-batch) then apply once; accum 0 or 1 = none (step holds all). */
    int accum;
    void (*apply)(rt_ctx *rt);
    /* Its forward-only program (validation: the loss of one batch, no
     * backward or update), derived by the compiler; 0 when there is none. */
    void (*eval)(rt_ctx *rt);
    /* batch_aware dynamic (0 variants: a static layout): every micro-step
     * assigns its documents to groups of the variants' sizes, each rank
     * holding dyn_tokens tokens, and each rank runs its group's variant
     * (core/rt_dyn.c); step is then unused, apply runs once per step. */
    int nvariants;
    const rt_variant *variants;
    int64_t dyn_tokens;
    /* The assignment's per-token work beside attention, in its units
     * (layout_dyn_shape.linear), from the cost model. */
    double dyn_linear;
    /* The variant eval (validation) runs: the one of all N ranks, one row
     * of micro_batch * seq_len tokens per batch. */
    int eval_variant;
    /* AdamW and the schedule; NULL: rt_optim_defaults (a constant lr,
     * betas 0.9 / 0.95, eps 1e-8, weight decay 0.1, clipping at 1.0). */
    const rt_optim_desc *optim;
} rt_program;

/* Runs the program: MPI init, checks the world size, parses the command line
 * (--data, --steps, --lr, --seed, --metrics, --log-every, --help …), builds
 * groups and the arena, initialises parameters from the seed, then for each
 * step loads the batch into the tokens/targets inputs, calls program->step,
 * and logs.  Returns the process exit status. */
int rt_main(int argc, char **argv, const rt_program *program);

/* ---- buffers -------------------------------------------------------------- */
float *rt_f32(rt_ctx *rt, int value);
int32_t *rt_i32(rt_ctx *rt, int value);
/* This rank's index inside its set of group g (0 .. set_size-1). */
int rt_group_pos(rt_ctx *rt, int g);
/* This rank's local size of dim `dim` of value `value` (the global size when
 * whole); generated code asks for it where a dim is split unevenly and the
 * size differs by rank. */
int64_t rt_local_dim(rt_ctx *rt, int value, int dim);

/* ---- kernels (CPU: fp32; sizes are local) -----------------------------------
 * Shapes in comments: N = local tokens (b*s), D hidden, V vocab, I/O linear
 * in/out features, b local batch, S sequence length seen by the kernel,
 * H/Hkv local heads, Dh head dim. */

/* out[N,D] = w[tok[n], :] */
void rt_embedding(rt_ctx *rt, float *out, const int32_t *tok, const float *w, int64_t N, int64_t V, int64_t D);
/* dw[V,D] = sum over n with tok[n]=v of dout[n,:]  (overwrites dw) */
void rt_embedding_bwd(rt_ctx *rt, float *dw, const float *dout, const int32_t *tok, int64_t N, int64_t V, int64_t D);

/* y[N,D] = x / rms(x) * w */
void rt_rmsnorm(rt_ctx *rt, float *y, const float *x, const float *w, int64_t N, int64_t D, double eps);
void rt_rmsnorm_bwd(rt_ctx *rt, float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N,
                    int64_t D, double eps);
/* The residual add and the norm after it (the op add_rmsnorm): s[N,D] = a + b,
 * y = s / rms(s) * w.  Its backward (add_rmsnorm_bwd): ds = dr + rmsnorm_bwd's
 * dx of dy, dw as rt_rmsnorm_bwd's.  The numbers of rt_add and rt_rmsnorm(_bwd)
 * called one after the other (passes/pass_fuse_elem.c). */
void rt_add_rmsnorm(rt_ctx *rt, float *s, float *y, const float *a, const float *b, const float *w, int64_t N,
                    int64_t D, double eps);
void rt_add_rmsnorm_bwd(rt_ctx *rt, float *ds, float *dw, const float *dy, const float *s, const float *w,
                        const float *dr, int64_t N, int64_t D, double eps);

/* y[N,O] = x[N,I] @ w[I,O] */
void rt_linear(rt_ctx *rt, float *y, const float *x, const float *w, int64_t N, int64_t I, int64_t O);
/* dx[N,I] = dy @ w^T ; dw[I,O] = x^T @ dy (overwrites dw) */
void rt_linear_bwd(rt_ctx *rt, float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N,
                   int64_t I, int64_t O);

/* x, y: [b, s, H, Dh], rows row0 .. row0+b-1 of the micro-batch; token
 * (bi, si) has position pos0 + si (with packed documents: its position
 * within its document).  Rotates pairs
 * (i, i + Dh/2) (the Hugging Face Llama convention) by pos * inv_freq_i,
 * inv_freq_i = theta^(-2i/Dh); with program->rope_scaling RT_ROPE_LLAMA3,
 * inv_freq_i gets Llama 3's adjustment (transformers'
 * _compute_llama3_parameters) with the program's rope_factor,
 * rope_low_freq_factor, rope_high_freq_factor and rope_original_max_pos. */
void rt_rope(rt_ctx *rt, float *y, const float *x, int64_t row0, int64_t b, int64_t s, int64_t H, int64_t Dh,
             int64_t pos0, double theta);
void rt_rope_bwd(rt_ctx *rt, float *dx, const float *dy, int64_t row0, int64_t b, int64_t s, int64_t H, int64_t Dh,
                 int64_t pos0, double theta);

/* Causal grouped-query attention, softmax scale 1/sqrt(Dh):
 * q, o [b,S,H,Dh]; k, v [b,S,Hkv,Dh] (rows row0 .. row0+b-1 of the
 * micro-batch); local q head h reads kv head h / (H/Hkv).  Tiled with an
 * online softmax: no S×S matrix is stored.  With packed documents a query
 * sees only the keys of its own document. */
void rt_attention(rt_ctx *rt, float *o, const float *q, const float *k, const float *v, int64_t row0, int64_t b,
                  int64_t S, int64_t H, int64_t Hkv, int64_t Dh);
/* Backward (recomputes the softmax statistics); dk, dv sum over the q heads
 * sharing a kv head. */
void rt_attention_bwd(rt_ctx *rt, float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *o, int64_t row0, int64_t b, int64_t S, int64_t H, int64_t Hkv,
                      int64_t Dh);

/* The same with the row statistics as a value of the step (head-chunked
 * attention): the forward writes each row's log-sum-exp to lse (fp32,
 * [b,H,S] order, b*H*S floats), the backward reads it.  A backend that
 * cannot use it for a shape recomputes it; the results are those of the
 * calls above. */
void rt_attention_lse(rt_ctx *rt, float *o, float *lse, const float *q, const float *k, const float *v, int64_t row0,
                      int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh);
void rt_attention_bwd_lse(rt_ctx *rt, float *dq, float *dk, float *dv, const float *dout, const float *q,
                          const float *k, const float *v, const float *o, const float *lse, int64_t row0, int64_t b,
                          int64_t S, int64_t H, int64_t Hkv, int64_t Dh);

/* Head chunks (IR ops head_slice, head_concat): x [rows,H,Dh] ->
 * y [rows,Hc,Dh] = heads h0 .. h0+Hc-1 of every row; and y [rows,n*Hc,Dh]
 * from the n chunks x0..x{n-1} [rows,Hc,Dh] (n float pointers follow). */
void rt_head_slice(rt_ctx *rt, float *y, const float *x, int64_t rows, int64_t H, int64_t Hc, int64_t Dh, int64_t h0);
void rt_head_concat(rt_ctx *rt, float *y, int64_t rows, int64_t Hc, int64_t Dh, int64_t n, ...);

/* Ring attention over the R ranks of group g (IR ops ring_attention,
 * ring_attention_bwd): q, o, do, dq [b,S,H,Dh] and k, v, dk, dv
 * [b,S,Hkv,Dh] are this rank's slice of S tokens (position r of the ring
 * holds sequence indices r*S .. r*S+S-1), lse [b,S,H] the log-sum-exp of
 * each query's scores (fp32).  Causal over the original positions. */
void rt_ring_attention(rt_ctx *rt, int g, float *o, float *lse, const float *q, const float *k, const float *v,
                       int64_t row0, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh);
void rt_ring_attention_bwd(rt_ctx *rt, int g, float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *o, const float *lse, int64_t row0, int64_t b,
                           int64_t S, int64_t H, int64_t Hkv, int64_t Dh);

/* y = silu(g) * u, n elements */
void rt_swiglu(rt_ctx *rt, float *y, const float *g, const float *u, int64_t n);
void rt_swiglu_bwd(rt_ctx *rt, float *dg, float *du, const float *dy, const float *g, const float *u, int64_t n);

/* The SwiGLU MLP fused and tiled over the tokens (IR op mlp):
 * y[N,D] = (silu(x @ wg) * (x @ wu)) @ wd with wg, wu [D,F], wd [F,D], formed
 * `chunk` rows at a time so that no [N,F] buffer exists (chunk < 1 or > N:
 * one chunk).  The backward recomputes each chunk's x @ wg and x @ wu;
 * dx[N,D], dwg, dwu [D,F] and dwd [F,D] are overwritten. */
void rt_mlp(rt_ctx *rt, float *y, const float *x, const float *wg, const float *wu, const float *wd, int64_t N,
            int64_t D, int64_t F, int64_t chunk);
void rt_mlp_bwd(rt_ctx *rt, float *dx, float *dwg, float *dwu, float *dwd, const float *dy, const float *x,
                const float *wg, const float *wu, const float *wd, int64_t N, int64_t D, int64_t F, int64_t chunk);

/* y[N,M] = x[N,M] + b[M] (a bias over the trailing dims, M their product);
 * the backward db[M] = sum over the N rows of dy (overwrites db); dx is dy. */
void rt_bias_add(rt_ctx *rt, float *y, const float *x, const float *b, int64_t N, int64_t M);
void rt_bias_add_bwd(rt_ctx *rt, float *db, const float *dy, int64_t N, int64_t M);

/* y = a + b, n elements */
void rt_add(rt_ctx *rt, float *y, const float *a, const float *b, int64_t n);

/* loss[0] = sum over the N local tokens of cross_entropy(x[n] @ w^T, tgt[n]);
 * w [V,D].  Logits are computed in chunks of rows, never for all N at once. */
void rt_lm_head_loss(rt_ctx *rt, float *loss, const float *x, const float *w, const int32_t *tgt, int64_t N, int64_t V,
                     int64_t D);
/* Gradient of (loss * scale): dx[N,D], dw[V,D] (overwrites dw); scale is
 * 1/(B*S), so that the summed gradients are those of the mean loss (with
 * packed documents rt_loss_scale(rt): 1 / this step's counted targets). */
void rt_lm_head_loss_bwd(rt_ctx *rt, float *dx, float *dw, const float *x, const float *w, const int32_t *tgt,
                         int64_t N, int64_t V, int64_t D, double scale);
/* Both in one call (the op lm_head_loss_grad): loss[0] as rt_lm_head_loss,
 * dx and dw as rt_lm_head_loss_bwd.  The CPU forms the logits once (the
 * backward's pass sums the loss too); the GPU runs the two kernels, the
 * backward reusing the forward's row statistics. */
void rt_lm_head_loss_grad(rt_ctx *rt, float *loss, float *dx, float *dw, const float *x, const float *w,
                          const int32_t *tgt, int64_t N, int64_t V, int64_t D, double scale);
/* 1 / the number of targets this step counts (all ranks' together). */
double rt_loss_scale(rt_ctx *rt);

/* ---- optimizer --------------------------------------------------------------
 * AdamW on param value `param` with gradient value `grad` (their tables say
 * how each is sharded; when the param is sharded and the gradient whole —
 * ZeRO-1 — the rank reads the slice matching its shard).  The first call of a
 * step computes the global gradient norm over every rt_opt_pair and the clip
 * factor. */
void rt_adamw(rt_ctx *rt, int param, int grad);

/* ---- collectives (value indices; group g indexes program->groups) ----------- */
/* n fused exchanges ins[i] -> outs[i]: dim `concat` becomes whole, dim `split`
 * becomes sharded (evenly or unevenly: MPI_Alltoallv with per-peer counts and
 * displacements, so chunks may differ by peer); fanout F: the split dim of size n arrives as n*F virtual
 * entries (virtual v = real v/F); fanin F: the reverse, the F copies summed. */
void rt_all_to_all(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                   const int *outs);
/* The exchange with RoPE fused into it (the fuse-rope pass): pair k's
 * operand is rotated as rt_rope rotates it (bit k of `rope`) while it is
 * packed, or pair k's result is rotated back as rt_rope_bwd does (bit k of
 * `rope_bwd`) while it is unpacked.  The rotated side of a pair is
 * [b, s, H, Dh], sharded along s and whole in Dh (the operand of a
 * seq -> heads exchange, split 2 and concat 1; the result of the heads ->
 * seq one); row0, pos0 and theta are rt_rope's for that side.  The results
 * equal rt_rope then rt_all_to_all (rt_all_to_all then rt_rope_bwd) bit for
 * bit; the rotated values are never stored on their own. */
void rt_all_to_all_rope(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                        const int *outs, int rope, int rope_bwd, int64_t row0, int64_t pos0, double theta);
void rt_all_gather(rt_ctx *rt, int g, int dim, int in, int out);
void rt_reduce_scatter(rt_ctx *rt, int g, int dim, int in, int out); /* sum */
void rt_all_reduce(rt_ctx *rt, int g, int in, int out);              /* sum */
/* Started collectives (IR `async = 1`): the start issues the collective
 * and returns; rt_wait completes the collectives whose results are vals[0..n)
 * (every result of each: an exchange's too).  Results of a start must not be
 * read, nor its operand changed, before the wait; every start of a step is
 * waited in the same step. */
void rt_all_gather_start(rt_ctx *rt, int g, int dim, int in, int out);
void rt_all_to_all_start(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                         const int *outs);
void rt_all_to_all_rope_start(rt_ctx *rt, int g, int split, int concat, int fanout, int fanin, int n, const int *ins,
                              const int *outs, int rope, int rope_bwd, int64_t row0, int64_t pos0, double theta);
void rt_reduce_scatter_start(rt_ctx *rt, int g, int dim, int in, int out);
void rt_all_reduce_start(rt_ctx *rt, int g, int in, int out);
void rt_wait(rt_ctx *rt, int n, const int *vals);
void rt_send(rt_ctx *rt, int g, int peer, int in);
void rt_recv(rt_ctx *rt, int g, int peer, int out);

/* ---- memory ---------------------------------------------------------------- */
/* The value is dead from here on: with a memory plan its bytes may hold a
 * later value.  Reading it again before an op redefines it is an error the
 * runtime reports (rt_f32/rt_i32 check that no live buffer overlaps one
 * coming back to life). */
void rt_free(rt_ctx *rt, int value);

/* ---- host memory (offload) -------------------------------------------------
 * rt_offload copies value src's local buffer on the device into dst's in
 * host memory (dst has on_host); rt_fetch copies a host buffer back into a
 * device one.  Same type and size; the CPU backend copies between its two
 * arenas, the CUDA one over the host link, in stream order. */
void rt_offload(rt_ctx *rt, int src, int dst);
void rt_fetch(rt_ctx *rt, int src, int dst);

#ifdef __cplusplus
}
#endif

#endif
