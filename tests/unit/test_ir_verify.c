/* test_ir_verify.c — tables of textual IR: parser errors (with line:col),
 * IR the verifier must reject (with the message it must give) and IR it
 * must accept.  Each rule of ir/README.md appears at least once. */
#include "test_ir.h"

/* Common header: lines 1-12; a case's body starts on line 13. */
static const char *const HEADER = "module @t\n"
                                  "mesh nodes = 2, devices_per_node = 4\n"
                                  "group @world = {[0,1,2,3,4,5,6,7]}\n"
                                  "group @sp = {[0,1,2,3],[4,5,6,7]}\n"
                                  "group @dp = {[0,4],[1,5],[2,6],[3,7]}\n"
                                  "param %w : f32[64,64]\n"
                                  "param %wq : f32[64,4,16]\n"
                                  "param %wk : f32[64,2,16]\n"
                                  "param %norm : f32[64]\n"
                                  "param %emb : f32[100,64]\n"
                                  "input %tok : i32[2@dp,64@sp]\n"
                                  "input %h : bf16[2@dp,64@sp,64]\n";

/* Valid ops reused by cases: q/k projections and the head all_to_all. */
#define QK                                                                                                             \
    "%q = linear %h, %wq : bf16[2@dp,64@sp,4,16]\n"                                                                    \
    "%k = linear %h, %wk : bf16[2@dp,64@sp,2,16]\n"
#define A2A                                                                                                            \
    QK "%qa, %ka = all_to_all %q, %k {group = @sp, split = 2, concat = 1, fanout = 2} : "                              \
       "bf16[2@dp,64,4@sp,16], bf16[2@dp,64,4@sp,16]\n"

/* Uneven head splits: 6 heads over the 4 ranks of each @sp set (2,2,1,1). */
#define U6  "param %w6 : f32[64,6,16]\n%q6 = linear %h, %w6 : bf16[2@dp,64@sp,6,16]\n"
#define U6A U6 "%q6a = all_to_all %q6 {group = @sp, split = 2, concat = 1} : bf16[2@dp,64,6@sp:1,16]\n"

typedef struct ir_case {
    const char *body;
    const char *want; /* substring of the diagnostics */
} ir_case;

static ir_module *parse_case(const char *name, const char *body, char **diag) {
    size_t n = strlen(HEADER) + strlen(body) + 1;
    char *text = malloc(n);
    snprintf(text, n, "%s%s", HEADER, body);
    diag_begin();
    ir_module *m = ir_parse_string(name, text);
    *diag = diag_end();
    free(text);
    return m;
}

/* ---- parser errors ---------------------------------------------------------- */
static const ir_case parse_errors[] = {
    {"%y = linaer %h, %w : f32[1]\n", "p0:13:6: error: unknown op 'linaer'; did you mean 'linear'?"},
    {"%y = linear %h, %ww : f32[1]\n", "p1:13:17: error: use of undefined value '%ww'; did you mean '%w'?"},
    {"%y = linear %h : f32[1]\n", "p2:13:6: error: 'linear' takes 2 operands, found 1"},
    {"%y = linear %h, %w, %h : f32[1]\n", "p3:13:21: error: 'linear' takes 2 operands; this one is extra"},
    {"%y, %z = linear %h, %w : f32[1], f32[1]\n", "p4:13:10: error: 'linear' produces 1 result, found 2"},
    {"%y = linear %h, %w : f32[1], f32[1]\n", "p5:13:28: error: more result types than results (1)"},
    {"%y = linear %h, %w : f31[1]\n", "p6:13:22: error: unknown element type 'f31'; did you mean 'f32'?"},
    {"%y = linear %h, %w : f32[2@spp]\n", "p7:13:27: error: unknown group '@spp'"},
    {"%y = linear %h, %w : f32[0]\n", "p8:13:26: error: dimension size must be positive, found 0"},
    {"%h = linear %h, %w : f32[1]\n", "p9:13:1: error: redefinition of value '%h'"},
    {"%h = linear %h, %w : f32[1]\n", "p10:12:7: note: previous definition is here"},
    {"group @sp = {[0],[1]}\n", "p11:13:7: error: redefinition of group '@sp'"},
    {"group @a = {[0],[1,2]}\n", "p12:13:17: error: set 1 of group '@a' has 2 ranks, but set 0 has 1"},
    {"config a =\n", "p13:13:11: error: expected a config value"},
    {"config a = \"x\n", "p14:13:12: error: unterminated string"},
    {"%y = linear %h, %w {a = 1, a = 2} : f32[1]\n", "p15:13:28: error: duplicate attribute 'a'"},
    {"%y = linear %h, %w {a = 1x} : f32[1]\n", "p16:13:25: error: malformed number '1x'"},
    {"%y = linear %h, %w : f32[1] extra\n", "p17:13:29: error: expected end of line after the op, found 'extra'"},
    {"adamw %w, %w : f32[1]\n", "p18:13:14: error: 'adamw' has no results, so it takes no result types"},
    {"%y = linear %h, %w : f32[1,2,3,4,5,6,7]\n", "p19:13:38: error: too many dimensions (a type has at most 6)"},
    {"%y = linear %h, %w {a = 99999999999999999999} : f32[1]\n",
     "p20:13:25: error: integer '99999999999999999999' is out of range"},
    {"mesh nodes = 1, devices_per_node = 1\n", "p21:13:1: error: duplicate mesh line"},
    {"%y = linear %h, %w $\n", "p22:13:20: error: unexpected character '$'"},
    {"%y = linear %h, %w\n", "p23:13:19: error: expected ':' and the result types, found end of line"},
    {"%y = linear %h, %w {group = @nope} : f32[1]\n", "p24:13:29: error: unknown group '@nope'"},
    {"param %p f32[1]\n", "p25:13:10: error: expected ':', found 'f32'"},
    {"link intra kind = nvlink, bandwidth = fast, latency = 1, efficiency = 1\n",
     "p26:13:39: error: expected a bandwidth, found 'fast'"},
    {"module @again\n", "p27:13:1: error: a file holds one module"},
    {"config hidden = 1\nconfig hidden = 2\n", "p28:14:8: error: duplicate config key 'hidden'"},
    {"%y = all_to_all {group = @sp} : f32[1]\n", "p29:13:6: error: 'all_to_all' takes 1 to 4 operands, found 0"},
    {"%y = linear %h, %w : f32[1@]\n", "p30:13:27: error: expected a name after '@'"},
    {"%a, %b, %c = linear_bwd %h, %h, %w : f32[1], f32[1], f32[1]\n",
     "p31:13:14: error: 'linear_bwd' produces 2 results, found 3"},
};

void test_parser_errors(void) {
    for (size_t i = 0; i < sizeof parse_errors / sizeof *parse_errors; i++) {
        char name[16], *d;
        snprintf(name, sizeof name, "p%zu", i);
        ir_module *m = parse_case(name, parse_errors[i].body, &d);
        CHECK(m == NULL);
        if (!strstr(d, parse_errors[i].want)) {
            fprintf(stderr, "parser case %zu: want \"%s\"\n  got: %s\n", i, parse_errors[i].want, d);
            CHECK(!"parser diagnostic mismatch");
        }
        CHECK(sup_error_count() == 1); /* stops at the first error */
        free(d);
        ir_module_free(m);
    }
    /* Caret line under the offending token. */
    char *d;
    ir_module_free(parse_case("caret", "%y = linaer %h, %w : f32[1]\n", &d));
    CHECK(strstr(d, "  %y = linaer %h, %w : f32[1]\n       ^~~~~~\n"));
    free(d);
}

/* ---- verifier: must reject --------------------------------------------------- */
static const ir_case rejects[] = {
    /* 2. groups */
    {"group @g = {[0,1,2]}\n", "group @g: 1 sets of 3 ranks do not cover the world of 8 ranks"},
    {"group @g = {[0,1,2,3],[3,4,5,6]}\n", "group @g: rank 3 appears in more than one place"},
    {"group @g = {[0,1,2,3],[4,5,6,8]}\n", "group @g: rank 8 is outside the world (ranks 0..7)"},
    /* 3. values */
    {"input %x : f32[6@sp]\n", "value %x: dim 0 of size 6 is not divisible by the 4 ranks of each set of @sp"},
    {"input %x : f32[4@sp,4@sp]\n", "value %x: group @sp shards both dim 0 and dim 1"},
    /* 4. ops */
    {QK "free %q\n%y = add %q, %q : bf16[2@dp,64@sp,4,16]\n", "op 3 'add' (%y): uses %q after it was freed by op 2"},
    {QK "free %q\nfree %q\n", "op 3 'free' (%q): frees %q twice (op 2 freed it already)"},
    {QK "%y = all_reduce %q : bf16[2@dp,64@sp,4,16]\n", "op 2 'all_reduce' (%y): collective without a 'group = @G'"},
    {QK "%y = all_reduce %q {group = fast} : bf16[2@dp,64@sp,4,16]\n", "attribute 'group' must name a group"},
    {"%y = linear %h, %w {x = inf} : bf16[2@dp,64@sp,64]\nsend %y {group = @sp}\n",
     "op 1 'send' (%y): needs an integer 'peer'"},
    {"param %ws : f32[64@sp,64]\n%y = linear %h, %ws : bf16[2@dp,64@sp,64]\n",
     "param %ws is sharded on dim 0 by @sp; a compute op needs the whole param (all_gather it first)"},
    /* 5. all_to_all */
    {QK "%qa = all_to_all %q {group = @sp, split = 2, concat = 1} : bf16[2@dp,64,4,16]\n",
     "v11:15:7: error: check: op 2 'all_to_all' (%qa): split dim 2: input %q is whole and result %qa is whole, but "
     "an all_to_all over @sp takes it from whole to sharded by it"},
    {QK "%qa = all_to_all %q {group = @sp, split = 2, concat = 1} : bf16[2@dp,64@sp,4@sp,16]\n",
     "concat dim 1: input %q is sharded by @sp and result %qa is sharded by @sp, but an all_to_all over @sp takes "
     "it from sharded by it to whole"},
    {QK "%qa = all_to_all %q {group = @sp, split = 2, concat = 0} : bf16[2,64@sp,4@sp,16]\n",
     "concat dim 0: input %q is sharded by @dp and result %qa is whole, but an all_to_all over @sp takes it from "
     "sharded by it to whole"},
    {QK "%qa = all_to_all %q {group = @sp, split = 1, concat = 1} : bf16[2@dp,64,4@sp,16]\n",
     "split and concat are the same dim (1)"},
    {QK "%qa = all_to_all %q {group = @sp, concat = 1} : bf16[2@dp,64,4@sp,16]\n",
     "needs an integer 'split' attribute"},
    {QK "%qa = all_to_all %q {group = @sp, split = 4, concat = 1} : bf16[2@dp,64,4@sp,16]\n",
     "split = 4 is outside the dims 0..3"},
    {QK "%ka = all_to_all %k {group = @sp, split = 2, concat = 1, fanout = 2} : bf16[2@dp,64,8@sp,16]\n",
     "result %ka dim 2 has size 8, but must equal input %k dim 2 (2) or fanout = 2 times it (4)"},
    {QK "%ka = all_to_all %k {group = @sp, split = 2, concat = 1} : bf16[2@dp,64,4@sp,16]\n",
     "result %ka dim 2 has size 4, but must equal input %k dim 2 (2)"},
    {QK "%ka = all_to_all %k {group = @sp, split = 2, concat = 1, fanout = 2, fanin = 2} : bf16[2@dp,64,4@sp,16]\n",
     "fanout and fanin cannot both be greater than 1"},
    {QK "%ka = all_to_all %k {group = @sp, split = 2, concat = 1, fanout = 0} : bf16[2@dp,64,4@sp,16]\n",
     "'fanout' must be an integer of at least 1"},
    {QK "%qa = all_to_all %q {group = @sp, split = 2, concat = 1} : bf16[2@dp,64,4@sp,8]\n",
     "result %qa dim 3 has size 8, but must equal input %q dim 3 (16)"},
    {QK "%qa = all_to_all %q {group = @sp, split = 2, concat = 1} : f32[2@dp,64,4@sp,16]\n",
     "must have the same element type and rank"},
    /* 5. collectives */
    {"%g = all_gather %h {group = @sp, dim = 0} : bf16[2,64@sp,64]\n",
     "input %h dim 0 must be sharded by @sp, but is sharded by @dp (the dim the all_gather works on)"},
    {"%g = all_gather %h {group = @sp} : bf16[2@dp,64,64]\n", "needs an integer 'dim' attribute"},
    {"%g = reduce_scatter %h {group = @sp, dim = 2} : bf16[2@dp,64@sp,64]\n",
     "result %g dim 2 must be sharded by @sp, but is whole (the dim the reduce_scatter works on)"},
    {"%g = reduce_scatter %h {group = @world, dim = 2} : bf16[2@dp,64,64@world]\n",
     "result %g dim 1 must be sharded by @sp, but is whole (a collective changes only the dims it names)"},
    {"%g = all_reduce %h {group = @sp} : bf16[2@dp,64,64]\n",
     "result %g has type bf16[2@dp,64,64], but must have the type of input %h (bf16[2@dp,64@sp,64])"},
    /* 5. compute ops */
    {QK "%o = attention %q, %k, %k : bf16[2@dp,64@sp,4,16]\n",
     "input %q dim 1 must be whole (unsharded), but is sharded by @sp (attention needs the whole sequence: an "
     "all_to_all"},
    {A2A "%o = attention %qa, %k, %k : bf16[2@dp,64,4@sp,16]\n", "input %k dim 2 must be sharded by @sp"},
    {"input %q3 : bf16[2,64,6,16]\ninput %k3 : bf16[2,64,4,16]\n%o = attention %q3, %k3, %k3 : bf16[2,64,6,16]\n",
     "%q3 has 6 heads, not a multiple of the 4 heads of %k3"},
    {"%y = linear %h, %wq : bf16[2@dp,64@sp,4,8]\n", "result %y dim 3 has size 8, but must equal input %wq dim 2 (16)"},
    {"%y = linear %h, %wq {contract = 2} : bf16[2@dp,4,16]\n",
     "input %wq dim 1 has size 4, but must equal input %h dim 2 (contracted) (64)"},
    {"input %hs : bf16[2,64,64@sp]\n%y = linear %hs, %w : bf16[2,64,64]\n",
     "input %hs dim 2 must be whole (unsharded), but is sharded by @sp (contracted dims must be whole)"},
    {"%y = linear %h, %w : bf16[2@dp,64,64]\n", "result %y dim 1 must be sharded by @sp, but is whole"},
    {"input %g : f32[64,64]\nadamw %w, %g\nparam %w2 : f32[64,64@sp]\nadamw %w2, %g\nadamw %w, %w2\n",
     "op 2 'adamw' (%w): gradient %w2 dim 1 is sharded by @sp but param %w dim 1 is whole"},
    {"input %g : f32[64,64]\nadamw %g, %w\n", "%g is not a param (adamw updates a param in place)"},
    {"input %g : f32[64]\nadamw %w, %g\n", "input %g has type f32[64], but must have the shape of input %w"},
    {"%n = rmsnorm %h, %wq : bf16[2@dp,64@sp,64]\n", "input %wq must have rank 1 [D], found f32[64,4,16]"},
    {"input %n2 : f32[32]\n%n = rmsnorm %h, %n2 : bf16[2@dp,64@sp,64]\n",
     "input %n2 dim 0 has size 32, but must equal the last dim of input %h (64)"},
    {"%d1, %d2 = rmsnorm_bwd %h, %h, %norm : bf16[2@dp,64@sp,64], f32[32]\n", "result %d2 dim 0 has size 32"},
    {"input %t2 : f32[2@dp,64@sp]\n%e = embedding %t2, %emb : bf16[2@dp,64@sp,64]\n",
     "input %t2 must have element type i32, found f32"},
    {"%e = embedding %tok, %emb : bf16[2@dp,64@sp,32]\n",
     "result %e dim 2 has size 32, but must equal dim 1 of input %emb (64)"},
    {"%e = embedding %tok, %emb : bf16[2,64@sp,64]\n", "result %e dim 0 must be sharded by @dp, but is whole"},
    {"%de = embedding_bwd %h, %tok : f32[100,32]\n",
     "result %de dim 1 has size 32, but must equal dim 2 of input %h (64)"},
    {"%l = lm_head_loss %h, %emb, %tok : f32[1]\n", "result %l must have rank 0 (a scalar), found f32[1]"},
    {"%dx, %dw = lm_head_loss_bwd %h, %emb, %tok : bf16[2@dp,64@sp,64], f32[100,63]\n", "result %dw dim 1 has size 63"},
    {"%s = add %h, %tok : bf16[2@dp,64@sp,64]\n",
     "input %tok has type i32[2@dp,64@sp], but must have the type of input %h"},
    {"%r = rope %h : bf16[2@dp,64@sp,64]\n", "input %h must have rank 4 [B,S,H,Dh], found bf16[2@dp,64@sp,64]"},
    {"%g2, %u2 = swiglu_bwd %h, %h, %h : bf16[2@dp,64@sp,64], bf16[2@dp,64@sp,32]\n", "result %u2 has type"},
    {QK "%dx, %dw = linear_bwd %q, %h, %wq : bf16[2@dp,64,64], f32[64,4,16]\n",
     "result %dx dim 1 must be sharded by @sp"},
    {A2A "%o = attention %qa, %ka, %ka : bf16[2@dp,64,4@sp,16]\n%dq, %dk, %dv = attention_bwd %o, %qa, %ka, %ka, %o : "
         "bf16[2@dp,64,4@sp,16], bf16[2@dp,64,4@sp,16], bf16[2@dp,64,4,16]\n",
     "result %dv has type bf16[2@dp,64,4,16], but must have the type of input %ka"},
    /* uneven splits: only with a unit, only on attention exchange head dims */
    {U6 "%q6a = all_to_all %q6 {group = @sp, split = 2, concat = 1} : bf16[2@dp,64,6@sp,16]\n",
     "dim 2 of size 6 is not divisible by the 4 ranks of each set of @sp"},
    {U6 "%q6a = all_to_all %q6 {group = @sp, split = 2, concat = 1} : bf16[2@dp,64,6@sp:2,16]\n",
     "dim 2 of size 6 cannot be split in units of 2 over the 4 ranks"},
    {U6 "%q6a = all_to_all %q6 {group = @sp, split = 2, concat = 1} : bf16[2@dp,64,6@sp:4,16]\n",
     "cannot be split in units of 4"},
    {"%y = linear %h, %w : bf16[2@dp,64@sp:1,64]\n", "only the head dim (dim 2) of a rank-4 attention exchange"},
    {U6 "%y = rope %q6 : bf16[2@dp,64@sp,6:1,16]\n", "dim 2 has a split unit (:1) but is whole"},
    {U6A "%r = rope %q6a : bf16[2@dp,64,6@sp:1,16]\n",
     "reads %q6a is split unevenly; only all_to_all, attention, attention_bwd, free, wait, offload and fetch may use "
     "such a value"},
    {U6A "param %w12 : f32[64,12,16]\n%q12 = linear %h, %w12 : bf16[2@dp,64@sp,12,16]\n"
         "%q12a = all_to_all %q12 {group = @sp, split = 2, concat = 1} : bf16[2@dp,64,12@sp:1,16]\n"
         "%o = attention %q12a, %q6a, %q6a : bf16[2@dp,64,12@sp:1,16]\n",
     "the units must hold matching q and kv heads"},
    {QK "%ka = all_to_all %k {group = @sp, split = 2, concat = 1, fanout = 2} : bf16[2@dp,64,4@sp:1,16]\n",
     "an uneven split cannot be combined with fanout/fanin"},
    {U6A "%o = attention %q6a, %q6a, %q6a : bf16[2@dp,64,6@sp:1,16]\n"
         "%ob = all_to_all %o {group = @sp, split = 1, concat = 2} : bf16[2@dp,64@sp,6:1,16]\n",
     "dim 2 has a split unit (:1) but is whole"},
};

void test_verifier_rejects(void) {
    for (size_t i = 0; i < sizeof rejects / sizeof *rejects; i++) {
        char name[16], *d;
        snprintf(name, sizeof name, "v%zu", i);
        ir_module *m = parse_case(name, rejects[i].body, &d);
        CHECK(m != NULL);
        if (!m) {
            fprintf(stderr, "verifier case %zu does not parse:\n%s", i, d);
            free(d);
            continue;
        }
        free(d);
        diag_begin();
        bool ok = ir_verify(m, "check");
        d = diag_end();
        CHECK(!ok);
        if (getenv("TEST_IR_VERBOSE")) /* to review every message a case produces */
            fprintf(stderr, "---- case %zu\n%s", i, d);
        if (!strstr(d, rejects[i].want) || !strstr(d, "error: check: ")) {
            fprintf(stderr, "verifier case %zu: want \"%s\"\n  got: %s\n", i, rejects[i].want, d);
            CHECK(!"verifier diagnostic mismatch");
        }
        free(d);
        ir_module_free(m);
    }
}

/* ---- verifier: must accept --------------------------------------------------- */
static const char *const accepts[] = {
    "",
    A2A "%o = attention %qa, %ka, %ka {layer = 0, phase = fwd} : bf16[2@dp,64,4@sp,16]\n"
        "%ob = all_to_all %o {group = @sp, split = 1, concat = 2} : bf16[2@dp,64@sp,4,16]\n"
        "%dq, %dk, %dv = attention_bwd %o, %qa, %ka, %ka, %o : bf16[2@dp,64,4@sp,16], bf16[2@dp,64,4@sp,16], "
        "bf16[2@dp,64,4@sp,16]\n"
        "%dk2 = all_to_all %dk {group = @sp, split = 1, concat = 2, fanin = 2} : bf16[2@dp,64@sp,2,16]\n"
        "free %q\nfree %k\n",
    /* fused q,k,v exchange: q keeps its head count while k, v fan out */
    QK "%qa, %ka, %va = all_to_all %q, %k, %k {group = @sp, split = 2, concat = 1, fanout = 2} : "
       "bf16[2@dp,64,4@sp,16], bf16[2@dp,64,4@sp,16], bf16[2@dp,64,4@sp,16]\n",
    /* ZeRO: sharded param gathered for compute, gradient reduce-scattered; ZeRO-1 full gradient */
    "param %wz : f32[64@world,64]\ninput %g : f32[64,64]\n"
    "%wf = all_gather %wz {group = @world, dim = 0} : f32[64,64]\n"
    "%y = linear %h, %wf : bf16[2@dp,64@sp,64]\n"
    "%gs = reduce_scatter %g {group = @world, dim = 0} : f32[64@world,64]\n"
    "adamw %wz, %gs {phase = opt}\nadamw %wz, %g\n",
    "%n = rmsnorm %h, %norm : bf16[2@dp,64@sp,64]\n"
    "%dn, %dnorm = rmsnorm_bwd %n, %h, %norm : bf16[2@dp,64@sp,64], f32[64]\n"
    "%e = embedding %tok, %emb : bf16[2@dp,64@sp,64]\n"
    "%de = embedding_bwd %e, %tok : f32[100,64]\n"
    "%l = lm_head_loss %h, %emb, %tok : f32[]\n"
    "%dx, %dw = lm_head_loss_bwd %h, %emb, %tok : bf16[2@dp,64@sp,64], f32[100,64]\n"
    "%lr = all_reduce %l {group = @world} : f32[]\n"
    "%s = swiglu %h, %h : bf16[2@dp,64@sp,64]\n"
    "%dx2, %dw2 = swiglu_bwd %h, %h, %h : bf16[2@dp,64@sp,64], bf16[2@dp,64@sp,64]\n",
    "%dx3, %dw3 = linear_bwd %h, %h, %w : bf16[2@dp,64@sp,64], f32[64,64]\n"
    "send %h {group = @sp, peer = 1}\n%r = recv {group = @sp, peer = -1} : bf16[2@dp,64@sp,64]\n",
    QK "%r = rope %q {theta = 500000.0} : bf16[2@dp,64@sp,4,16]\n%dr = rope_bwd %r : bf16[2@dp,64@sp,4,16]\n",
    /* uneven MHA: 6 heads over K=4 in units of 1 (2,2,1,1) */
    U6A "%o = attention %q6a, %q6a, %q6a : bf16[2@dp,64,6@sp:1,16]\n"
        "%ob = all_to_all %o {group = @sp, split = 1, concat = 2} : bf16[2@dp,64@sp,6,16]\n"
        "%dq, %dk, %dv = attention_bwd %o, %q6a, %q6a, %q6a, %o : bf16[2@dp,64,6@sp:1,16], "
        "bf16[2@dp,64,6@sp:1,16], bf16[2@dp,64,6@sp:1,16]\nfree %o\n",
    /* uneven GQA: 12 q heads in units of 2 read 6 kv heads in units of 1 */
    U6A "param %w12 : f32[64,12,16]\n%q12 = linear %h, %w12 : bf16[2@dp,64@sp,12,16]\n"
        "%q12a = all_to_all %q12 {group = @sp, split = 2, concat = 1} : bf16[2@dp,64,12@sp:2,16]\n"
        "%o = attention %q12a, %q6a, %q6a : bf16[2@dp,64,12@sp:2,16]\n",
};

void test_verifier_accepts(void) {
    for (size_t i = 0; i < sizeof accepts / sizeof *accepts; i++) {
        char name[16], *d;
        snprintf(name, sizeof name, "a%zu", i);
        ir_module *m = parse_case(name, accepts[i], &d);
        CHECK(m != NULL);
        if (!m) {
            fprintf(stderr, "accept case %zu does not parse:\n%s", i, d);
            free(d);
            continue;
        }
        free(d);
        diag_begin();
        bool ok = ir_verify(m, "check");
        d = diag_end();
        if (!ok) fprintf(stderr, "accept case %zu rejected:\n%s", i, d);
        CHECK(ok);
        char *a = ir_print_to_string(m);
        ir_module *m2 = ir_parse_string("reparse", a);
        CHECK(m2 != NULL);
        if (m2) {
            char *b = ir_print_to_string(m2);
            CHECK_STR(b, a);
            free(b);
        }
        free(a);
        free(d);
        ir_module_free(m);
        ir_module_free(m2);
    }
}

/* ---- verifier: violations only the API can build ------------------------------- */
static void expect_reject(ir_module *m, const char *want) {
    diag_begin();
    bool ok = ir_verify(m, "api");
    char *d = diag_end();
    CHECK(!ok);
    if (!strstr(d, want)) {
        fprintf(stderr, "api case: want \"%s\"\n  got: %s\n", want, d);
        CHECK(!"api diagnostic mismatch");
    }
    free(d);
}

static ir_module *parse_ok(const char *body) {
    char *d;
    ir_module *m = parse_case("api", body, &d);
    if (!m) fprintf(stderr, "%s", d);
    free(d);
    return m;
}

/* The groups together (ir_verify_groups.c): each one below partitions the
 * world on its own, so only their joint check can tell. */
static void test_verifier_groups_joint(ir_module *m) {
    /* @sp rebuilt strided, @dp left strided: ranks 0 and 1 hold one block */
    ir_module *c = ir_module_clone(m);
    ir_group_add(c, "sp", 2, 4, (const int[]){0, 2, 4, 6, 1, 3, 5, 7});
    expect_reject(c, "api: value %tok is sharded by @dp and @sp, but together they do not give every rank its own "
                     "block: ranks 0 and 1 both hold block (@dp 0, @sp 0) and no rank holds block (@dp 0, @sp 2)");
    ir_module_free(c);
    /* both rebuilt (strided @sp, contiguous @dp): every block once */
    c = ir_module_clone(m);
    ir_group_add(c, "sp", 2, 4, (const int[]){0, 2, 4, 6, 1, 3, 5, 7});
    ir_group_add(c, "dp", 4, 2, (const int[]){0, 1, 2, 3, 4, 5, 6, 7});
    diag_begin();
    bool ok = ir_verify(c, "api");
    char *d = diag_end();
    CHECK(ok);
    if (!ok) fprintf(stderr, "strided groups rejected: %s\n", d);
    free(d);
    ir_module_free(c);
    /* every block once, but an @sp set mixes @dp blocks: its exchange would
     * trade sequence slices of different sequences */
    c = ir_module_clone(m);
    ir_group_add(c, "dp", 4, 2, (const int[]){0, 4, 5, 1, 2, 6, 3, 7});
    expect_reject(c, "'all_to_all' over @sp keeps dim 0 of %q sharded by @dp, but ranks 0 and 1 of one @sp set hold "
                     "different @dp blocks (0 and 1)");
    ir_module_free(c);
    /* blocks held twice each, unevenly; more blocks than ranks */
    c = ir_module_clone(m);
    int a = ir_group_add(c, "a", 4, 2, (const int[]){0, 1, 2, 3, 4, 5, 6, 7});
    int b = ir_group_add(c, "b", 4, 2, (const int[]){0, 1, 2, 3, 4, 5, 6, 7});
    int sp2 = ir_group_add(c, "sp2", 2, 4, (const int[]){0, 1, 2, 3, 4, 5, 6, 7});
    ir_type t = c->values[ir_value_find(c, "w")].type;
    t.shard[0] = a, t.shard[1] = b;
    ir_value_add(c, "ab", IR_V_INPUT, t);
    t.shard[0] = ir_group_find(c, "sp"), t.shard[1] = sp2;
    ir_value_add(c, "big", IR_V_INPUT, t);
    expect_reject(c, "value %ab is sharded by @a and @b, but together they do not cover it evenly: more than 2 ranks "
                     "hold block (@a 0, @b 0) (ranks 0 and 4 among them) and fewer hold block (@a 0, @b 1)");
    expect_reject(c, "value %big is sharded by @sp and @sp2, whose set sizes multiply to 16 blocks: the 8 ranks "
                     "cannot hold them evenly");
    ir_module_free(c);
}

void test_verifier_api_rejects(void) {
    ir_module *m = parse_ok(QK);
    if (!m) {
        CHECK(!"api base does not parse");
        return;
    }
    ir_module *joint = parse_ok(A2A);
    CHECK(joint != NULL);
    if (joint) test_verifier_groups_joint(joint);
    ir_module_free(joint);
    /* use before def: swap the two ops' order by hand */
    ir_module *c = ir_module_clone(m);
    ir_op op = ir_op_make(IR_ADD);
    ir_op_add_input(&op, ir_value_find(c, "q"));
    ir_op_add_input(&op, ir_value_find(c, "q"));
    ir_op_add_output(&op, ir_value_add(c, "sum", IR_V_RESULT, c->values[ir_value_find(c, "q")].type));
    ir_op_insert(c, 0, &op);
    expect_reject(c, "api: op 0 'add' (%sum): uses %q before its definition by op 1");
    ir_module_free(c);
    /* a result whose def index is stale */
    c = ir_module_clone(m);
    c->values[ir_value_find(c, "q")].def = 1;
    expect_reject(c, "result %q records op 1 as its definition");
    ir_module_free(c);
    /* a param as a result */
    c = ir_module_clone(m);
    c->ops[0].out[0] = ir_value_find(c, "w");
    expect_reject(c, "result %w is a param, not an op result");
    ir_module_free(c);
    /* operand count outside the op table */
    c = ir_module_clone(m);
    c->ops[0].nin = 1;
    expect_reject(c, "op 0 'linear' (%q): has 1 operands; 'linear' takes 2 to 2");
    ir_module_free(c);
    /* rank, dims, names, idents, mesh */
    c = ir_module_clone(m);
    c->values[0].type.rank = 7;
    c->values[1].type.dims[0] = 0;
    snprintf(c->values[2].name, sizeof c->values[2].name, "bad name");
    ir_attr_set_ident(&c->ops[0], "phase", "1fwd");
    c->mesh.nodes = 0;
    expect_reject(c, "value %w: rank 7 is outside 0..6");
    expect_reject(c, "value %wq: dim 0 has size 0 (must be at least 1)");
    expect_reject(c, "value name 'bad name' is not a valid name");
    expect_reject(c, "attribute 'phase': '1fwd' is not a valid identifier value");
    expect_reject(c, "mesh: nodes must be at least 1, found 0");
    ir_module_free(c);
    /* duplicate value names and every violation reported, not just the first */
    c = ir_module_clone(m);
    snprintf(c->values[1].name, sizeof c->values[1].name, "w");
    c->groups[1].ranks[0] = 1;
    diag_begin();
    CHECK(!ir_verify(c, NULL));
    char *d = diag_end();
    CHECK(strstr(d, "value %w is defined twice"));
    CHECK(strstr(d, "group @sp: rank 1 appears in more than one place"));
    CHECK(sup_error_count() >= 3);
    free(d);
    ir_module_free(c);
    ir_module_free(m);
}
