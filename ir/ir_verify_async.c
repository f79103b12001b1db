/* ir_verify_async.c — the rules of started collectives (ir/README.md
 * "Asynchronous collectives"): a collective with `async = 1` is issued at
 * its place in the schedule and completes at a later `wait` on its results.
 * Between the two the runtime still reads its operands and writes its
 * results, so:
 *   - only an op whose descriptor has a start form may be started;
 *   - a wait names every result of one or more started collectives, each
 *     exactly once, after the start;
 *   - no op reads a result before its wait;
 *   - no op frees or updates in place an operand of a collective in flight;
 *   - every started collective is waited in the phase that starts it:
 *     codegen runs phases apart (the validation forward is the fwd ops
 *     alone; with gradient accumulation the apply phase is its own function);
 *   - a started collective that stages its data (an all_to_all packs into
 *     the CPU runtime's two staging areas, ir_mem_comm_bytes, and unpacks
 *     at its wait) holds those areas until its wait: no other op that
 *     stages may run in between.
 * Runs after the structural rules, so operand indices are valid. */
#include "ir_verify.h"

#include <stdlib.h>
#include <string.h>

enum { WAITED = -2, NOT_STARTED = -1 };

typedef struct avstate {
    int *start_of; /* per value: the op that started it (in flight), NOT_STARTED, or WAITED */
    int *inflight; /* ops started and not yet waited, in start order */
    int ninflight;
    int staging; /* the started op holding the staging areas, or -1 */
} avstate;

static bool reads(const ir_op *op, int v) {
    for (int k = 0; k < op->nin; k++)
        if (op->in[k] == v) return true;
    return false;
}

static void drop_inflight(avstate *s, int start) {
    if (s->staging == start) s->staging = -1;
    for (int j = 0; j < s->ninflight; j++)
        if (s->inflight[j] == start) {
            memmove(&s->inflight[j], &s->inflight[j + 1], sizeof(int) * (size_t)(s->ninflight - j - 1));
            s->ninflight--;
            return;
        }
}

/* wait %r...: each operand a result of a collective in flight, and with it
 * every other result of that collective; the started op is then done. */
static void check_wait(ir_vctx *c, const ir_op *op, avstate *s) {
    const ir_module *m = c->m;
    for (int k = 0; k < op->nin; k++) {
        int v = op->in[k], st = s->start_of[v];
        const char *name = m->values[v].name;
        if (st == WAITED) {
            ir_verr(c, sup_noloc(), "waits on %%%s, whose collective was already waited", name);
            continue;
        }
        if (st == NOT_STARTED) {
            ir_verr(c, sup_noloc(), "waits on %%%s, which no started collective (async = 1) defines", name);
            continue;
        }
        const ir_op *so = &m->ops[st];
        if (strcmp(ir_op_phase(so), ir_op_phase(op)) != 0)
            ir_verr(c, sup_noloc(),
                    "waits on %%%s, started by op %d in phase '%s', from phase '%s': a collective is "
                    "waited in the phase that starts it (the validation forward runs the fwd ops alone, and with "
                    "gradient accumulation the apply phase runs apart)",
                    name, st, ir_op_phase(so), ir_op_phase(op));
        for (int j = 0; j < so->nout; j++)
            if (!reads(op, so->out[j]))
                ir_verr(c, sup_noloc(),
                        "waits on %%%s but not on %%%s, the other result of the collective started "
                        "by op %d (a wait completes the whole collective)",
                        name, m->values[so->out[j]].name, st);
    }
    for (int k = 0; k < op->nin; k++) {
        int st = s->start_of[op->in[k]];
        if (st < 0) continue;
        for (int j = 0; j < m->ops[st].nout; j++) s->start_of[m->ops[st].out[j]] = WAITED;
        drop_inflight(s, st);
    }
}

/* An op other than wait: it may not read a result in flight, nor free or
 * update in place an operand of a collective in flight. */
static void check_use(ir_vctx *c, const ir_op *op, const avstate *s) {
    const ir_module *m = c->m;
    for (int k = 0; k < op->nin; k++) {
        int v = op->in[k];
        if (s->start_of[v] >= 0 && (k == 0 || op->in[k - 1] != v))
            ir_verr(c, sup_noloc(),
                    "reads %%%s before its wait (the collective started by op %d may still be "
                    "writing it)",
                    m->values[v].name, s->start_of[v]);
    }
    /* free releases its operand; adamw and accumulate write their first */
    bool writes = op->code == IR_FREE || op->code == IR_ADAMW || op->code == IR_ACCUMULATE;
    if (!writes || op->nin < 1) return;
    for (int j = 0; j < s->ninflight; j++)
        if (reads(&m->ops[s->inflight[j]], op->in[0]))
            ir_verr(c, sup_noloc(),
                    "%s %%%s while the collective started by op %d still reads it (move this after "
                    "its wait)",
                    op->code == IR_FREE ? "frees" : "updates", m->values[op->in[0]].name, s->inflight[j]);
}

static void check_start(ir_vctx *c, const ir_op *op, const ir_op_desc *d, avstate *s) {
    if (s->staging >= 0 && op->code != IR_WAIT && ir_op_stages(c->m, op)) {
        char b[140];
        ir_verr(c, sup_noloc(),
                "needs the collectives' staging areas, which %s (started) holds until its wait: wait "
                "for it first",
                ir_op_str(c->m, s->staging, b, sizeof b));
    }
    const ir_attr *a = ir_attr_get(op, "async");
    if (!a) return;
    if (a->kind != IR_A_INT || (a->i != 0 && a->i != 1)) {
        ir_verr(c, sup_noloc(), "attribute 'async' must be 0 or 1");
        return;
    }
    if (a->i == 0) return;
    if (!d->rt_start_fn) {
        ir_verr(c, sup_noloc(),
                "'%s' cannot be started asynchronously (async = 1): only all_gather, "
                "reduce_scatter, all_reduce and all_to_all have a start form",
                d->name);
        return;
    }
    for (int k = 0; k < op->nout; k++) s->start_of[op->out[k]] = c->op;
    s->inflight[s->ninflight++] = c->op;
    if (ir_op_stages(c->m, op)) s->staging = c->op;
}

void ir_verify_async(ir_vctx *c) {
    const ir_module *m = c->m;
    avstate s = {sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1)), sup_xmalloc(sizeof(int) * (size_t)(m->nops + 1)),
                 0, -1};
    for (int v = 0; v < m->nvalues; v++) s.start_of[v] = NOT_STARTED;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        c->op = i;
        if (op->code == IR_WAIT)
            check_wait(c, op, &s);
        else
            check_use(c, op, &s);
        check_start(c, op, ir_op_desc_of(op->code), &s);
    }
    c->op = -1;
    for (int j = 0; j < s.ninflight; j++) {
        const ir_op *so = &m->ops[s.inflight[j]];
        char d[140];
        ir_verr(c, so->loc, "%s: started (async = 1) but never waited: add `wait %%%s` before its first reader",
                ir_op_str(m, s.inflight[j], d, sizeof d), m->values[so->out[0]].name);
    }
    free(s.start_of);
    free(s.inflight);
}
