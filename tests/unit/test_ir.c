/* test_ir.c — unit tests of the IR: builder API, printer/parser round trip,
 * parser diagnostics and the verifier (a table of IR it must reject, each
 * with the message it must give, and IR it must accept).
 * Exit status is non-zero when any check fails. */
#include "test_ir.h"

int failures, checks;

/* ---- diagnostics capture ------------------------------------------------ */
static FILE *diag_file;

void diag_begin(void) {
    diag_file = tmpfile();
    if (!diag_file) {
        perror("tmpfile");
        exit(2);
    }
    sup_diag_set_sink(diag_file);
    sup_diag_set_max_errors(0);
    sup_diag_reset();
}

/* Returns the captured text (malloc'd) and restores stderr. */
char *diag_end(void) {
    long n = ftell(diag_file);
    char *s = malloc((size_t)n + 1);
    rewind(diag_file);
    size_t got = fread(s, 1, (size_t)n, diag_file);
    s[got] = '\0';
    fclose(diag_file);
    sup_diag_set_sink(NULL);
    return s;
}

/* ---- a module built through the API --------------------------------------- */
static ir_type ty(ir_dtype dt, int rank, const int64_t *dims, const int *shard) {
    ir_type t = ir_type_make(dt, rank, dims);
    for (int i = 0; i < rank && shard; i++) t.shard[i] = shard[i];
    return t;
}

static int add_op1(ir_module *m, ir_opcode code, int a, int b, const char *res, ir_type t) {
    ir_op op = ir_op_make(code);
    ir_op_add_input(&op, a);
    if (b >= 0) ir_op_add_input(&op, b);
    int v = ir_value_add(m, res, IR_V_RESULT, t);
    ir_op_add_output(&op, v);
    ir_attr_set_ident(&op, "phase", "fwd");
    ir_op_append(m, &op);
    return v;
}

static ir_module *build_module(void) {
    ir_module *m = ir_module_new("built");
    m->mesh.nodes = 2;
    m->mesh.devices_per_node = 4;
    snprintf(m->mesh.intra.kind, sizeof m->mesh.intra.kind, "nvlink");
    m->mesh.intra.bandwidth = 3e11;
    m->mesh.intra.latency = 2e-6;
    m->mesh.inter.bandwidth = 0.1 + 0.2; /* not exactly representable in short form */
    ir_config_set_int(m, "hidden", 64);
    ir_config_set(m, "precision", "bf16");
    ir_config_set(m, "note", "two words \"quoted\"");
    int world = ir_group_add_contiguous(m, "world", 1);
    int sp = ir_group_add_contiguous(m, "sp", 2);
    int dp = ir_group_add_strided(m, "dp", 4);
    CHECK(world == 0 && sp == 1 && dp == 2);
    int64_t dwq[] = {64, 4, 16}, dwk[] = {64, 2, 16}, dh[] = {2, 64, 64};
    int sh[] = {dp, sp, -1};
    int wq = ir_value_add(m, "l0.wq", IR_V_PARAM, ty(IR_F32, 3, dwq, NULL));
    int wk = ir_value_add(m, "l0.wk", IR_V_PARAM, ty(IR_F32, 3, dwk, NULL));
    int h = ir_value_add(m, "h", IR_V_INPUT, ty(IR_BF16, 3, dh, sh));
    int64_t dq[] = {2, 64, 4, 16}, dk[] = {2, 64, 2, 16};
    int shq[] = {dp, sp, -1, -1}, sha[] = {dp, -1, sp, -1};
    int q = add_op1(m, IR_LINEAR, h, wq, "l0.q", ty(IR_BF16, 4, dq, shq));
    int k = add_op1(m, IR_LINEAR, h, wk, "l0.k", ty(IR_BF16, 4, dk, shq));
    ir_op a2a = ir_op_make(IR_ALL_TO_ALL);
    ir_op_add_input(&a2a, q);
    ir_op_add_input(&a2a, k);
    int qa = ir_value_add(m, "l0.qa", IR_V_RESULT, ty(IR_BF16, 4, dq, sha));
    int ka = ir_value_add(m, "l0.ka", IR_V_RESULT, ty(IR_BF16, 4, dq, sha));
    ir_op_add_output(&a2a, qa);
    ir_op_add_output(&a2a, ka);
    ir_attr_set_group(&a2a, "group", sp);
    ir_attr_set_int(&a2a, "split", 2);
    ir_attr_set_int(&a2a, "concat", 1);
    ir_attr_set_int(&a2a, "fanout", 2);
    ir_attr_set_float(&a2a, "scale", 2.0);
    ir_attr_set_float(&a2a, "eps", 1e-5);
    ir_op_append(m, &a2a);
    add_op1(m, IR_ATTENTION, qa, ka, "l0.o", ty(IR_BF16, 4, dq, sha));
    ir_op_add_input(&m->ops[m->nops - 1], ka); /* attention takes q, k, v */
    ir_op fr = ir_op_make(IR_FREE);
    ir_op_add_input(&fr, q);
    ir_op_append(m, &fr);
    return m;
}

static void test_build_and_round_trip(void) {
    ir_module *m = build_module();
    diag_begin();
    bool ok = ir_verify(m, "built");
    char *d = diag_end();
    CHECK(ok);
    CHECK_STR(d, "");
    free(d);
    char *a = ir_print_to_string(m);
    CHECK(strstr(a, "module @built\n") == a);
    CHECK(strstr(a, "config note = \"two words \\\"quoted\\\"\"\n"));
    CHECK(strstr(a, "group @dp = {[0,4],[1,5],[2,6],[3,7]}\n"));
    CHECK(strstr(a, "input %h : bf16[2@dp,64@sp,64]\n"));
    CHECK(strstr(a, "%l0.qa, %l0.ka = all_to_all %l0.q, %l0.k {group = @sp, split = 2, concat = 1, fanout = 2, "
                    "scale = 2.0, eps = 1e-05} : bf16[2@dp,64,4@sp,16], bf16[2@dp,64,4@sp,16]\n"));
    CHECK(strstr(a, "\nfree %l0.q\n"));
    ir_module *p = ir_parse_string("built.bir", a);
    CHECK(p != NULL);
    if (p) {
        char *b = ir_print_to_string(p);
        CHECK_STR(b, a);
        CHECK(p->mesh.inter.bandwidth == 0.1 + 0.2);
        CHECK(p->ops[2].loc.line == 16 && p->ops[2].loc.col == 18);
        CHECK(ir_verify(p, "parsed"));
        free(b);
        ir_module_free(p);
    }
    /* A clone prints the same and is independent of the original. */
    ir_module *c = ir_module_clone(m);
    char *b = ir_print_to_string(c);
    CHECK_STR(b, a);
    c->groups[1].ranks[0] = 7;
    ir_attr_set_int(&c->ops[2], "split", 3);
    CHECK(m->groups[1].ranks[0] == 0);
    CHECK(ir_attr_int(&m->ops[2], "split", -1) == 2);
    free(b);
    free(a);
    ir_module_free(c);
    ir_module_free(m);
}

static void test_ops_edit(void) {
    ir_module *m = build_module();
    int q = ir_value_find(m, "l0.q"), k = ir_value_find(m, "l0.k"), h = ir_value_find(m, "h");
    CHECK(m->values[q].def == 0 && m->values[k].def == 1);
    /* Insert a scaled copy of h in front: every def shifts by one. */
    ir_op op = ir_op_make(IR_ADD);
    ir_op_add_input(&op, h);
    ir_op_add_input(&op, h);
    char fresh[IR_NAME_MAX];
    ir_value_fresh_name(m, "h", fresh);
    CHECK_STR(fresh, "h.1");
    int h2 = ir_value_add(m, fresh, IR_V_RESULT, m->values[h].type);
    CHECK(ir_value_add(m, fresh, IR_V_RESULT, m->values[h].type) == -1); /* duplicate */
    ir_op_add_output(&op, h2);
    CHECK(ir_op_insert(m, 0, &op) == 0);
    CHECK(m->values[h2].def == 0 && m->values[q].def == 1 && m->values[k].def == 2);
    CHECK(ir_count_uses(m, h, 0) == 3);
    ir_replace_uses(m, h, h2, 1);
    CHECK(ir_count_uses(m, h, 0) == 1 && ir_count_uses(m, h2, 0) == 2);
    CHECK(ir_count_uses(m, h2, 2) == 1);
    CHECK(ir_verify(m, NULL));
    ir_op_remove(m, 2); /* the linear defining %l0.k: %l0.k is now undefined */
    CHECK(m->values[k].def == -1 && m->values[q].def == 1);
    CHECK(m->values[ir_value_find(m, "l0.qa")].def == 2);
    diag_begin();
    CHECK(!ir_verify(m, "after edit"));
    char *d = diag_end();
    CHECK(strstr(d, "after edit: op 2 'all_to_all' (%l0.qa): uses %l0.k, which no earlier op defines"));
    free(d);
    ir_renumber(m);
    CHECK(m->values[q].def == 1 && m->values[h2].def == 0);
    /* Attributes: set replaces in place, remove keeps order. */
    ir_op *a2a = &m->ops[2];
    ir_attr_set_int(a2a, "split", 2);
    CHECK(strcmp(a2a->attrs[1].key, "split") == 0);
    ir_attr_remove(a2a, "split");
    CHECK(strcmp(a2a->attrs[1].key, "concat") == 0 && ir_attr_get(a2a, "split") == NULL);
    CHECK(ir_op_group(a2a) == 1 && ir_op_layer(a2a) == -1);
    CHECK(strcmp(ir_op_phase(&m->ops[1]), "fwd") == 0);
    ir_module_free(m);
}

static void test_groups_and_config(void) {
    ir_module *m = build_module();
    int s = -1, pos = -1;
    s = ir_group_set_of(m, 1, 5, &pos); /* @sp = {[0..3],[4..7]} */
    CHECK(s == 1 && pos == 1);
    s = ir_group_set_of(m, 2, 6, &pos); /* @dp = {[0,4],[1,5],[2,6],[3,7]} */
    CHECK(s == 2 && pos == 1);
    CHECK(ir_group_set_of(m, 2, 9, &pos) == -1 && pos == -1);
    CHECK(ir_group_add_contiguous(m, "bad", 3) == -1);
    CHECK(ir_group_add_strided(m, "bad", 3) == -1);
    CHECK(ir_group_find(m, "bad") == -1);
    /* Adding an existing name replaces its sets in place. */
    int pairs[] = {0, 1, 2, 3, 4, 5, 6, 7};
    CHECK(ir_group_add(m, "sp", 4, 2, pairs) == 1);
    CHECK(m->ngroups == 3 && m->groups[1].nsets == 4 && m->groups[1].set_size == 2);
    CHECK(ir_group_add_contiguous(m, "sp", 2) == 1 && m->groups[1].set_size == 4);
    /* Removing @world shifts @sp and @dp down; shards and attrs follow. */
    ir_group_remove(m, 0);
    CHECK(m->ngroups == 2 && ir_group_find(m, "sp") == 0 && ir_group_find(m, "dp") == 1);
    const ir_value *hv = &m->values[ir_value_find(m, "h")];
    CHECK(hv->type.shard[0] == 1 && hv->type.shard[1] == 0);
    CHECK(ir_op_group(&m->ops[2]) == 0);
    CHECK(ir_verify(m, NULL));
    /* Removing a group still in use leaves a reference the verifier reports. */
    ir_group_remove(m, 0);
    diag_begin();
    CHECK(!ir_verify(m, "after remove"));
    char *d = diag_end();
    CHECK(strstr(d, "value %h: dim 1 is sharded by a group that does not exist"));
    CHECK(strstr(d, "attribute 'group' names a group that does not exist"));
    free(d);
    /* Local sizes divide by the sharding sets. */
    CHECK(ir_type_local_elems(m, &hv->type) == 1 * 64 * 64); /* @dp (2 ranks) still shards dim 0 */
    CHECK(ir_type_global_elems(&hv->type) == 2 * 64 * 64);
    char buf[IR_TYPE_STR_MAX];
    CHECK_STR(ir_type_str(m, &hv->type, buf, sizeof buf), "bf16[2@dp,64@?,64]");
    /* Config */
    ir_config_set(m, "hidden", "128");
    CHECK(m->nconfig == 3 && strcmp(m->config[0].key, "hidden") == 0);
    CHECK(ir_config_int(m, "hidden", 0) == 128);
    CHECK(ir_config_int(m, "precision", -7) == -7);
    CHECK(ir_config_get(m, "absent") == NULL);
    CHECK(ir_world(m) == 8);
    ir_module_free(m);
}

static void test_tables(void) {
    CHECK(ir_opcode_lookup("all_to_all") == IR_ALL_TO_ALL);
    CHECK(ir_opcode_lookup("nope") == -1);
    CHECK(ir_op_desc_of(IR_ADAMW)->kind == IR_K_OPT);
    CHECK(ir_dtype_lookup("bf16") == IR_BF16 && ir_dtype_size(IR_BF16) == 2);
    CHECK(ir_is_name("l0.q-1") && !ir_is_name("a b") && !ir_is_name(""));
    CHECK(ir_is_ident("fwd") && !ir_is_ident("1f"));
}

/* The module's value-name index: finds every value among thousands, stays
 * current across ir_value_swap_names, and survives a clone. */
static void test_value_index(void) {
    ir_module *m = ir_module_new("idx");
    int64_t d[1] = {4};
    ir_type t = ir_type_make(IR_F32, 1, d);
    enum { NV = 5000 };
    for (int i = 0; i < NV; i++) {
        char name[32];
        snprintf(name, sizeof name, "v%d", i);
        CHECK(ir_value_add(m, name, IR_V_INPUT, t) == i);
    }
    CHECK(ir_value_find(m, "v0") == 0 && ir_value_find(m, "v4999") == 4999);
    CHECK(ir_value_find(m, "v5000") == -1 && ir_value_find(m, "") == -1);
    CHECK(ir_value_add(m, "v17", IR_V_INPUT, t) == -1);
    ir_value_swap_names(m, 17, 4000);
    CHECK_STR(m->values[17].name, "v4000");
    CHECK_STR(m->values[4000].name, "v17");
    CHECK(ir_value_find(m, "v17") == 4000 && ir_value_find(m, "v4000") == 17);
    ir_module *c = ir_module_clone(m);
    ir_value_swap_names(c, 4000, 17); /* the clone's index is its own */
    CHECK(ir_value_find(c, "v17") == 17 && ir_value_find(m, "v17") == 4000);
    CHECK(ir_value_add(c, "new", IR_V_INPUT, t) == NV && ir_value_find(c, "new") == NV);
    CHECK(ir_value_find(m, "new") == -1);
    int bad = 0;
    for (int i = 0; i < NV; i++) bad += ir_value_find(m, m->values[i].name) != i;
    CHECK(bad == 0);
    ir_module_free(c);
    ir_module_free(m);
}

int main(void) {
    test_tables();
    test_value_index();
    test_build_and_round_trip();
    test_ops_edit();
    test_groups_and_config();
    test_parser_errors();
    test_verifier_rejects();
    test_verifier_accepts();
    test_verifier_api_rejects();
    if (failures) {
        fprintf(stderr, "test_ir: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("test_ir: all %d checks passed\n", checks);
    return 0;
}
