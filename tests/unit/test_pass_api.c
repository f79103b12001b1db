/* test_pass_api.c — the pass-writer API (api/basp_pass.h) as a plugin sees
 * it: only basp.h and basp_pass.h, no compiler struct.  Queries on a
 * hand-written module, building ops in one batch, splitting heads, bad
 * handles refused, and a pass registered by the embedding program running
 * in a pipeline (the verifier's error after it names its owner, as does
 * every other failure of it), and strategies that leave out their
 * family's pass refused; the helpers the built-in partitioning passes share
 * (derived values, the exchange, removal, sequence sharding, the layout's
 * rules on a module), and a variant's rules told the family they are asked
 * about. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "basp.h"
#include "basp_pass.h"

static int failures;
#define CHECK(c)                                                                                                       \
    do {                                                                                                               \
        if (!(c)) {                                                                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);                                      \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

static const char *text = "module @api\n"
                          "mesh nodes = 2, devices_per_node = 2\n"
                          "config zero = 3\n"
                          "group @world = {[0,1,2,3]}\n"
                          "group @sp = {[0,1,2,3]}\n"
                          "param %w : f32[64@world,8]\n"
                          "input %x : f32[2,16@sp,4,8]\n"
                          "%full = all_gather %w {group = @world, dim = 0, layer = 0, phase = fwd} : f32[64,8]\n"
                          "free %full {layer = 0, phase = fwd}\n";

/* Everything the printed module holds, for substring checks (malloc'd). */
static char *printed(const basp_module *m) {
    FILE *f = tmpfile();
    basp_print_ir(m, f);
    long n = ftell(f);
    char *buf = calloc((size_t)n + 1, 1);
    rewind(f);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) buf[0] = '\0';
    fclose(f);
    return buf;
}

static void test_queries(basp_module *m) {
    CHECK(basp_ir_world(m) == 4 && basp_ir_nodes(m) == 2 && basp_ir_devices_per_node(m) == 2);
    CHECK(basp_ir_node_of(m, 3) == 1 && basp_ir_config_int(m, "zero", 0) == 3);
    int w = basp_ir_value_find(m, "w"), x = basp_ir_value_find(m, "x");
    CHECK(w >= 0 && x >= 0 && basp_ir_value_kind(m, w) == BASP_V_PARAM && basp_ir_value_kind(m, x) == BASP_V_INPUT);
    CHECK(basp_ir_value_rank(m, w) == 2 && basp_ir_value_dim(m, w, 0) == 64);
    CHECK(!strcmp(basp_ir_value_dtype(m, w), "f32"));
    CHECK(basp_ir_value_shard(m, w, 0) == basp_ir_group_find(m, "world") && basp_ir_value_shard(m, w, 1) == -1);
    CHECK(basp_ir_op_count(m) == 2 && !strcmp(basp_ir_op_name(m, 0), "all_gather"));
    CHECK(basp_ir_op_input(m, 0, 0) == w && basp_ir_op_attr_int(m, 0, "dim", -1) == 0);
    CHECK(basp_ir_op_layer(m, 0) == 0 && !strcmp(basp_ir_op_phase(m, 0), "fwd") && basp_ir_op_has_attr(m, 0, "group"));
    CHECK(basp_ir_value_def(m, basp_ir_op_output(m, 0, 0)) == 0);
    bool *wf = basp_ir_weight_flags(m);
    CHECK(wf && wf[w] && wf[basp_ir_op_output(m, 0, 0)] && !wf[x]); /* a gathered weight is a weight */
    free(wf);
    /* a bad handle is reported and answered neutrally */
    int before = basp_error_count();
    CHECK(!strcmp(basp_ir_value_name(m, 999), "") && basp_ir_op_input(m, 0, 5) == -1);
    CHECK(basp_error_count() == before + 2);
}

/* hpZ's shape in miniature: the gather over @world becomes a nested one
 * across @inter (into a node-sharded value) then one inside @node. */
static void test_build(basp_module *m) {
    int node = basp_ir_group_add(m, "node", 2, 2, (int[]){0, 1, 2, 3});
    int inter = basp_ir_group_add(m, "inter", 2, 2, (int[]){0, 2, 1, 3});
    int wt = basp_ir_group_add(m, "wt", 1, 4, (int[]){0, 2, 1, 3});
    CHECK(basp_ir_group_nested(m, wt, node, inter));
    CHECK(!basp_ir_group_nested(m, basp_ir_group_find(m, "world"), node, inter));
    CHECK(basp_ir_group_rank(m, inter, 1, 0) == 1 && basp_ir_group_sets(m, node) == 2);
    CHECK(basp_ir_group_set_size(m, wt) == 4);
    int w = basp_ir_value_find(m, "w");
    basp_ir_value_set_shard(m, w, 0, wt);
    int sec = basp_ir_value_like(m, "w.sec", w);
    basp_ir_value_set_shard(m, sec, 0, node);
    basp_edits *e = basp_edits_new();
    int h = basp_edits_insert_before(e, 0, "all_gather", &w, 1, &sec, 1, 0);
    basp_edits_attr_int(e, h, "dim", 0);
    basp_edits_attr_group(e, h, "group", inter);
    basp_edits_insert_after(e, 0, "free", &sec, 1, NULL, 0, 0);
    CHECK(basp_edits_insert_before(e, 0, "no_such_op", &w, 1, NULL, 0, -1) == -1);
    basp_ir_op_set_input(m, 0, 0, sec);
    basp_ir_op_set_attr_group(m, 0, "group", node);
    basp_edits_apply(m, e);
    CHECK(basp_ir_op_count(m) == 4);
    CHECK(basp_module_verify(m));
    char *s = printed(m);
    const char *a = strstr(s, "%w.sec = all_gather %w {dim = 0, group = @inter, layer = 0, phase = fwd} "
                              ": f32[64@node,8]");
    const char *b = strstr(s, "%full = all_gather %w.sec {group = @node, dim = 0, layer = 0, phase = fwd} "
                              ": f32[64,8]");
    const char *c = strstr(s, "free %w.sec {layer = 0, phase = fwd}");
    CHECK(a && b && c && a < b && b < c);
    if (!(a && b && c)) fputs(s, stderr);
    free(s);
    /* heads: [2,16@sp,4,8] -> [2,16,4@sp,8] */
    int x = basp_ir_value_find(m, "x"), sp = basp_ir_group_find(m, "sp");
    basp_ir_value_split_heads(m, x, sp, 1);
    CHECK(basp_ir_value_shard(m, x, 1) == -1 && basp_ir_value_shard(m, x, 2) == sp);
    CHECK(basp_ir_value_dim(m, x, 2) == 4);
    CHECK(basp_ir_heads_twin(m, sp, x) == x); /* no exchange reads it */
}

/* The built-in passes' helpers: a derived value, the sequence-to-heads
 * exchange recorded after op 0, the free at op 1 removed, the sequence
 * sharded over another group. */
static void test_helpers(void) {
    basp_module *m = basp_module_parse_string("helpers", text);
    int x = basp_ir_value_find(m, "x"), sp = basp_ir_group_find(m, "sp"), w = basp_ir_value_find(m, "w");
    int h = basp_ir_value_derived(m, x, ".heads", x);
    CHECK(h >= 0 && !strcmp(basp_ir_value_name(m, h), "x.heads") && basp_ir_value_shard(m, h, 1) == sp);
    CHECK(!strcmp(basp_ir_value_name(m, basp_ir_value_derived(m, x, ".heads", x)), "x.heads.1"));
    CHECK(basp_ir_value_derived(m, x, "bad suffix", x) == -1);
    basp_ir_value_split_heads(m, h, sp, 1);
    basp_edits *e = basp_edits_new();
    CHECK(basp_edits_exchange_after(e, 0, sp, 1, &x, &h, true, 1, 0) == 0);
    basp_edits_remove(e, 1);
    basp_edits_apply(m, e);
    char *s = printed(m);
    CHECK(strstr(s, "%x.heads = all_to_all %x {group = @sp, split = 2, concat = 1, layer = 0, phase = fwd} "
                    ": f32[2,16,4@sp,8]") &&
          !strstr(s, "free %full"));
    free(s);
    CHECK(basp_ir_op_count(m) == 2 && basp_module_verify(m));
    int world = basp_ir_group_find(m, "world");
    basp_ir_shard_sequence(m, world);
    CHECK(basp_ir_value_shard(m, x, 1) == world && basp_ir_value_shard(m, w, 1) == -1);
    /* the layout the config names, on the module's dimensions: Ulysses over 4 ranks */
    basp_ir_config_set(m, "heads", "3");
    const char *why = basp_ir_layout_illegal(m, 1);
    CHECK(why && strstr(why, "heads (3) not divisible by N=4"));
    basp_ir_config_set(m, "heads", "4");
    CHECK(!basp_ir_layout_illegal(m, 1));
    basp_module_free(m);
}

/* What a variant's rules were told about the family, and what they said. */
static const char *seen_family;
static const char *reads_family(const basp_layout_dims *d, const basp_layout_choice *c, char *fix, size_t nfix) {
    (void)d;
    seen_family = basp_layout_family(c);
    if (seen_family && strcmp(seen_family, "ulysses"))
        return basp_layout_reason(fix, nfix, "use a2a flat", "fam applies to Ulysses, not to %s", seen_family);
    return NULL;
}

static const char *ignores_family(const basp_layout_dims *d, const basp_layout_choice *c, char *fix, size_t nfix) {
    (void)d, (void)c;
    snprintf(fix, nfix, "never read");
    return "ignored: never legal";
}

/* A variant asked about a layout of another family: its words when it
 * reads the family, else basp's. */
static void test_family_rule(void) {
    CHECK(!basp_layout_family(&(basp_layout_choice){1, 1})); /* outside a legal() */
    char fix[64];
    CHECK(!strcmp(basp_layout_reason(fix, sizeof fix, "hint", "rule %d", 7), "rule 7") && !strcmp(fix, "hint"));
    CHECK(basp_layout_heads_uneven(&(basp_layout_dims){.N = 4, .H = 12, .Hk = 6}, 4));
    CHECK(!basp_layout_heads_uneven(&(basp_layout_dims){.N = 4, .H = 8, .Hk = 8}, 4));
    basp_strategy fam = {.name = "ulysses+fam",
                         .family = "ulysses",
                         .key = "a2a",
                         .word = "fam",
                         .legal = reads_family,
                         .passes = "ulysses"};
    basp_strategy deaf = {.name = "ulysses+deaf",
                          .family = "ulysses",
                          .key = "a2a",
                          .word = "deaf",
                          .legal = ignores_family,
                          .passes = "ulysses"};
    CHECK(basp_register_strategy(&fam) && basp_register_strategy(&deaf));
    basp_module *m = basp_module_parse_string("fam", text);
    basp_ir_config_set(m, "heads", "4");
    basp_ir_config_set(m, "a2a", "fam");
    CHECK(!basp_ir_layout_illegal(m, 1) && seen_family && !strcmp(seen_family, "ulysses"));
    basp_ir_config_set(m, "sequence", "ring");
    const char *why = basp_ir_layout_illegal(m, 1);
    CHECK(why && !strcmp(why, "fam applies to Ulysses, not to ring"));
    basp_ir_config_set(m, "a2a", "deaf");
    why = basp_ir_layout_illegal(m, 1);
    CHECK(why && !strcmp(why, "strategy 'ulysses+deaf' builds on sequence ulysses, not ring"));
    basp_module_free(m);
}

/* Shards the param under its readers: invalid IR. */
static bool breaks(basp_module *m) {
    basp_ir_value_set_shard(m, basp_ir_value_find(m, "full"), 0, basp_ir_group_find(m, "world"));
    return true;
}

static bool fails_silently(basp_module *m) {
    (void)m;
    return false;
}

static bool bad_handle_goes_on(basp_module *m) {
    basp_ir_op_input(m, basp_ir_op_count(m) + 3, 0);
    return true;
}

/* Runs `pass` on a fresh module; the diagnostics it printed (malloc'd). */
static char *run_logged(const char *pass, bool *ok) {
    basp_module *m = basp_module_parse_string("api3", text);
    char *log = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&log, &n);
    basp_set_diagnostics(f, true);
    *ok = basp_run_pipeline(m, pass, NULL);
    fclose(f);
    basp_set_diagnostics(NULL, true);
    basp_module_free(m);
    return log;
}

/* Every failure of a registered pass names it and its owner; a strategy
 * must start with its family's pass. */
static void test_failures_named(void) {
    CHECK(basp_register_pass("api-silent", "test", fails_silently));
    CHECK(basp_register_pass("api-bad-handle", "test", bad_handle_goes_on));
    bool ok = true;
    char *log = run_logged("api-silent", &ok);
    CHECK(!ok && log &&
          strstr(log, "error: pass 'api-silent' (from the embedding program) failed without saying "
                      "why"));
    free(log);
    log = run_logged("api-bad-handle", &ok);
    CHECK(!ok && log && strstr(log, "error: pass API: in pass 'api-bad-handle' (from the embedding program): op "));
    CHECK(log && strstr(log, "error: pass 'api-bad-handle' (from the embedding program) reported 1 error(s) but "
                             "returned true; stopping"));
    free(log);
    basp_strategy no_family = {
        .name = "ulysses+nf", .family = "ulysses", .key = "a2a", .word = "nf", .passes = "api-silent"};
    CHECK(!basp_register_strategy(&no_family));
    basp_strategy ring_first = {.name = "ring+rf", .family = "hybrid", .key = "a2a", .word = "rf", .passes = "ringx"};
    CHECK(!basp_register_strategy(&ring_first)); /* a prefix of the name is not the pass */
    basp_strategy good = {
        .name = "ring+ok", .family = "hybrid", .key = "a2a", .word = "rok", .passes = "ring,api-silent"};
    CHECK(basp_register_strategy(&good));
}

static void test_registered_pass(void) {
    CHECK(basp_register_pass("api-breaks", "test", breaks));
    CHECK(!basp_register_pass("api-breaks", "again", breaks));
    CHECK(!basp_register_pass("a b", "bad name", breaks));
    basp_strategy bad = {.name = "x+y", .family = "diagonal", .key = "a2a", .word = "y", .passes = "ulysses"};
    CHECK(!basp_register_strategy(&bad));
    basp_module *m = basp_module_parse_string("api2", text);
    char *log = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&log, &n);
    basp_set_diagnostics(f, true);
    CHECK(!basp_run_pipeline(m, "api-breaks", NULL));
    fclose(f);
    basp_set_diagnostics(NULL, true);
    CHECK(log && strstr(log, "after pass 'api-breaks' (from the embedding program)"));
    free(log);
    basp_module_free(m);
}

int main(void) {
    basp_set_diagnostics(fopen("/dev/null", "w"), true);
    basp_module *m = basp_module_parse_string("api", text);
    CHECK(m && basp_module_verify(m));
    if (m) {
        test_queries(m);
        test_build(m);
        basp_module_free(m);
    }
    test_helpers();
    test_family_rule();
    test_registered_pass();
    test_failures_named();
    if (failures) {
        fprintf(stderr, "test_pass_api: %d check(s) failed\n", failures);
        return 1;
    }
    puts("test_pass_api: all checks passed");
    return 0;
}
