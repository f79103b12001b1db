/* baspc — compile a basp layout spec: check it, lower it to IR, run the pass
 * pipeline, and print the IR or the communication schedule.  A thin driver
 * over the embedding API (api/basp.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "basp.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: baspc SPEC.basp [options]\n"
            "\n"
            "Actions (default: --emit=ir):\n"
            "  --check                  parse and check the spec only\n"
            "  --print-spec             print the checked spec with every default filled in\n"
            "  --emit=ir                print the IR after the pipeline (to -o FILE or stdout)\n"
            "  --emit=lowered           print the IR straight after lowering (no passes)\n"
            "  --schedule               print every collective per layer and phase with its\n"
            "                           groups, bytes, peers and inter-node bytes\n"
            "  --json                   with --schedule: one JSON object instead of a table\n"
            "\n"
            "Options:\n"
            "  --set BLOCK.KEY=VALUE    override a spec key (repeatable), e.g.\n"
            "                           --set train.micro_batch=4 --set layout.batch_aware=off\n"
            "  --passes=A,B,C           run these passes instead of the default pipeline\n"
            "                           (%s); --passes= runs none\n"
            "  --print-ir-after-all     print the IR after every pass (to stdout)\n"
            "  --print-ir-after=PASS    print the IR after the named pass(es), comma-separated\n"
            "  --list-passes            list the registered passes\n"
            "  -o FILE                  write the output to FILE\n"
            "  -q, --quiet              no remarks or warnings, only errors\n"
            "  --version, --help\n",
            basp_default_pipeline());
}

typedef enum { ACT_IR, ACT_LOWERED, ACT_CHECK, ACT_SPEC, ACT_SCHEDULE } action;

typedef struct options {
    const char *spec;
    const char *out;
    const char *passes; /* NULL = default pipeline */
    const char **sets;
    int nsets;
    action act;
    int emit_given;
    int json, quiet;
    basp_pass_options popt;
} options;

static int die_usage(const char *msg, const char *arg) {
    fprintf(stderr, "baspc: error: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    fprintf(stderr, "run 'baspc --help' for usage\n");
    return 2;
}

/* Returns 0 to go on, 1 when done (help/version), 2 on a usage error. */
static int parse_args(int argc, char **argv, options *o) {
    o->sets = calloc((size_t)argc + 1, sizeof *o->sets);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 1; }
        if (!strcmp(a, "--version")) { printf("baspc %s\n", BASP_VERSION); return 1; }
        if (!strcmp(a, "--list-passes")) { basp_list_passes(stdout); return 1; }
        if (!strcmp(a, "--check")) { o->act = ACT_CHECK; o->emit_given = 1; }
        else if (!strcmp(a, "--print-spec")) { o->act = ACT_SPEC; o->emit_given = 1; }
        else if (!strcmp(a, "--emit=ir")) { o->act = ACT_IR; o->emit_given = 1; }
        else if (!strcmp(a, "--emit=lowered")) { o->act = ACT_LOWERED; o->emit_given = 1; }
        else if (!strncmp(a, "--emit=", 7)) return die_usage("unknown --emit kind (ir, lowered)", a + 7);
        else if (!strcmp(a, "--schedule")) { o->act = ACT_SCHEDULE; o->emit_given = 1; }
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strncmp(a, "--passes=", 9)) o->passes = a + 9;
        else if (!strcmp(a, "--print-ir-after-all")) o->popt.print_after_all = true;
        else if (!strncmp(a, "--print-ir-after=", 17)) o->popt.print_after = a + 17;
        else if (!strcmp(a, "--set") || !strcmp(a, "-o")) {
            if (i + 1 >= argc) return die_usage("missing value after", a);
            if (a[1] == 'o') o->out = argv[++i];
            else o->sets[o->nsets++] = argv[++i];
        } else if (!strncmp(a, "--set=", 6)) o->sets[o->nsets++] = a + 6;
        else if (a[0] == '-' && a[1] != '\0') return die_usage("unknown option", a);
        else if (o->spec) return die_usage("more than one spec file given", a);
        else o->spec = a;
    }
    if (!o->spec) return die_usage("no spec file given", NULL);
    if (o->json && o->act != ACT_SCHEDULE) return die_usage("--json goes with --schedule", NULL);
    if (o->out && !o->emit_given)
        return die_usage("-o without --emit: building a training binary needs the code generator, "
                         "which this build does not have yet; use --emit=ir -o FILE", NULL);
    return 0;
}

static int run(options *o, FILE *out) {
    basp_spec *spec = basp_spec_parse_file(o->spec);
    if (!spec) return 1;
    int ok = 1;
    for (int i = 0; i < o->nsets && ok; i++) ok = basp_spec_set(spec, o->sets[i]);
    if (!ok || !basp_spec_check(spec)) { basp_spec_free(spec); return 1; }
    if (o->act == ACT_CHECK) { basp_spec_free(spec); return 0; }
    if (o->act == ACT_SPEC) { basp_spec_print(spec, out); basp_spec_free(spec); return 0; }

    basp_module *m = basp_lower(spec);
    basp_spec_free(spec);
    if (!m) return 1;
    if (o->act != ACT_LOWERED) {
        /* Printed-after IR goes to stdout even when -o names the final output. */
        if (!basp_run_pipeline(m, o->passes, &o->popt)) { basp_module_free(m); return 1; }
    }
    if (o->act == ACT_SCHEDULE) basp_print_schedule(m, out, o->json);
    else basp_print_ir(m, out);
    basp_module_free(m);
    return basp_error_count() ? 1 : 0;
}

int main(int argc, char **argv) {
    options o = {0};
    int r = parse_args(argc, argv, &o);
    if (r) { free(o.sets); return r == 1 ? 0 : 2; }
    basp_set_diagnostics(NULL, o.quiet);
    FILE *out = stdout;
    if (o.out && !(out = fopen(o.out, "w"))) {
        perror(o.out);
        free(o.sets);
        return 1;
    }
    int rc = run(&o, out);
    if (out != stdout && fclose(out) != 0) { perror(o.out); rc = 1; }
    if (rc && o.out) remove(o.out); /* never leave a half-written output behind */
    free(o.sets);
    return rc;
}
