/* fixture.c — plugins that go wrong, one per -D (tests/lit/plugin/):
 *   FIXTURE_VERSION    built against another pass API version
 *   FIXTURE_NO_ENTRY   a shared object without basp_pass_plugin_info
 *   FIXTURE_DUP_PASS   registers a pass named like a built-in one
 *   FIXTURE_DUP_WORD   registers a strategy with two-level's spec words
 *   FIXTURE_BREAKS_IR  a pass whose output the verifier rejects */
#include <basp/basp_pass.h>

#include <string.h>

/* Shards the first rank-2 parameter's dim 0 over @world without changing
 * the ops that read it: their operands no longer agree. */
static __attribute__((unused)) bool break_ir(basp_module *m)
{
    int world = basp_ir_group_find(m, "world");
    for (int v = 0; v < basp_ir_value_count(m); v++)
        if (basp_ir_value_kind(m, v) == BASP_V_PARAM && basp_ir_value_rank(m, v) == 2 &&
            basp_ir_value_shard(m, v, 0) < 0) {
            basp_ir_value_set_shard(m, v, 0, world);
            return true;
        }
    return true;
}

static bool fixture_register(void)
{
#if defined(FIXTURE_DUP_PASS)
    return basp_register_pass("zero", "a second zero", break_ir);
#elif defined(FIXTURE_DUP_WORD)
    static const basp_strategy s = {.name = "ulysses+mine", .family = "ulysses", .key = "a2a", .word = "two_level",
                                    .passes = "ulysses"};
    return basp_register_strategy(&s);
#else
    return basp_register_pass("break-ir", "leaves a parameter sharded under its readers", break_ir);
#endif
}

#ifndef FIXTURE_NO_ENTRY
BASP_PLUGIN_EXPORT basp_plugin_info basp_pass_plugin_info(void)
{
#ifdef FIXTURE_VERSION
    return (basp_plugin_info){BASP_PASS_API_VERSION + 1, "from-the-future", "9.9", fixture_register};
#else
    return (basp_plugin_info){BASP_PASS_API_VERSION, "fixture", "1.0", fixture_register};
#endif
}
#else
BASP_PLUGIN_EXPORT int not_a_plugin(void);
BASP_PLUGIN_EXPORT int not_a_plugin(void) { return fixture_register(); }
#endif
