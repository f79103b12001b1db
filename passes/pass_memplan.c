/* pass_memplan.c — the memory plan: one arena per rank, every buffer at an
 * offset, buffers never live at the same time sharing bytes.  The placement
 * is ir_mem_plan (ir/ir_memplan.c, shared with codegen); this pass picks the
 * target from config mem.target and reports the result.
 * See passes/README.md "memplan". */
#include "pass_util.h"

bool pass_memplan(ir_module *m, const pass_options *opt) {
    ir_mem_target t;
    if (!ir_mem_target_of(m, &t)) {
        sup_error(sup_noloc(), "memplan: config mem.target must be cpu or cuda, found '%s'",
                  ir_config_get(m, "mem.target"));
        return false;
    }
    ir_mem_stats st;
    if (!ir_mem_plan(m, t, &st)) return false;
    char a[32], b[32], c[32], d[48] = "";
    if (st.peak_op >= 0) ir_op_str(m, st.peak_op, d, sizeof d);
    pu_remark(opt,
              "memplan: arena %s per rank (%s target), %s live at the peak%s%s; one buffer per value "
              "would need %s",
              sup_fmt_bytes((double)st.arena, a, sizeof a), t.cuda ? "cuda" : "cpu",
              sup_fmt_bytes((double)st.live_max, b, sizeof b), st.peak_op >= 0 ? ", " : "", d,
              sup_fmt_bytes((double)st.no_reuse, c, sizeof c));
    return true;
}
