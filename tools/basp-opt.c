/* basp-opt — the IR-level pass runner: reads textual IR, runs named passes
 * (verifying after each) and prints the result.  Used by the pass tests, one
 * pass at a time on hand-written IR. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "basp.h"
#include "basp_pass.h"
#include "support/support.h"

static void usage(FILE *out) {
    fprintf(out, "usage: basp-opt FILE.bir|- [options]\n"
                 "  --passes=A,B,C         run these passes in order (default: none)\n"
                 "  --print-ir-after-all   print the IR after every pass\n"
                 "  --print-ir-after=PASS  print the IR after the named pass(es)\n"
                 "  --verify-only          parse and verify, print nothing\n"
                 "  --schedule [--json]    print the communication schedule instead of the IR\n"
                 "  --list-passes          list the registered passes\n"
                 "  --load-pass-plugin=FILE  load a pass plugin (repeatable; docs/writing-a-pass.md)\n"
                 "  -o FILE                write the output to FILE (- : standard output)\n"
                 "  -q, --quiet            only errors\n");
}

/* The plugin file of the option at argv[*i] (stepping over its value), or NULL. */
static const char *plugin_arg(int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strncmp(a, "--load-pass-plugin=", 19)) return a + 19;
    if (strcmp(a, "--load-pass-plugin") || *i + 1 >= argc) return NULL;
    return argv[++*i];
}

/* -o against the input IR and every plugin (support's path identity),
 * before a plugin is loaded or the input read: false when one is the
 * other (reported). */
static bool check_io(int argc, char **argv, const char *in, const char *out_path) {
    sup_io io = {0};
    if (out_path && strcmp(out_path, "-")) sup_io_output(&io, "-o", out_path);
    sup_io_input(&io, "the input IR", in);
    for (int i = 1; i < argc; i++) sup_io_input(&io, "--load-pass-plugin", plugin_arg(argc, argv, &i));
    bool ok = !io.clashed;
    sup_io_free(&io);
    return ok;
}

int main(int argc, char **argv) {
    const char *in = NULL, *out_path = NULL, *passes = NULL;
    bool verify_only = false, schedule = false, json = false, quiet = false, list = false;
    basp_pass_options popt = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (plugin_arg(argc, argv, &i)) continue; /* loaded below */
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--list-passes")) {
            list = true;
            break;
        }
        if (!strncmp(a, "--passes=", 9))
            passes = a + 9;
        else if (!strcmp(a, "--print-ir-after-all"))
            popt.print_after_all = true;
        else if (!strncmp(a, "--print-ir-after=", 17))
            popt.print_after = a + 17;
        else if (!strcmp(a, "--verify-only"))
            verify_only = true;
        else if (!strcmp(a, "--schedule"))
            schedule = true;
        else if (!strcmp(a, "--json"))
            json = true;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet"))
            quiet = true;
        else if ((!strcmp(a, "-o") || !strcmp(a, "--load-pass-plugin")) && i + 1 >= argc) {
            fprintf(stderr, "basp-opt: error: missing value after %s\n", a);
            return 2;
        } else if (!strcmp(a, "-o"))
            out_path = argv[++i];
        else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "basp-opt: error: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (in) {
            fprintf(stderr, "basp-opt: error: more than one input file\n");
            return 2;
        } else
            in = a;
    }
    basp_set_diagnostics(NULL, quiet);
    if (!list && !check_io(argc, argv, in, out_path)) return 1;
    /* plugins before --list-passes and --passes= so that those see their passes */
    for (int i = 1; i < argc; i++) {
        const char *file = plugin_arg(argc, argv, &i);
        if (file && !basp_load_pass_plugin(file)) return 1;
    }
    if (list) {
        basp_list_passes(stdout);
        return 0;
    }
    if (!in) {
        usage(stderr);
        return 2;
    }
    if ((popt.print_after || popt.print_after_all) && !(passes && *passes)) {
        fprintf(stderr, "basp-opt: error: --print-ir-after%s needs --passes=...: no pass runs otherwise\n",
                popt.print_after_all ? "-all" : "");
        return 2;
    }
    basp_module *m = basp_module_parse_file(in);
    if (!m) return 1;
    int rc = 0;
    if (!basp_module_verify(m))
        rc = 1;
    else if (passes && *passes && !basp_run_pipeline(m, passes, &popt))
        rc = 1;
    if (rc == 0 && !verify_only) {
        bool to_stdout = !out_path || strcmp(out_path, "-") == 0; /* -o -: standard output */
        sup_outfile of = {.f = stdout};
        if (!to_stdout && !sup_out_open(&of, out_path, "basp-opt")) {
            basp_module_free(m);
            return 1;
        }
        if (schedule)
            basp_print_schedule(m, of.f, json);
        else
            basp_print_ir(m, of.f);
        if (!to_stdout && !sup_out_close(&of, 1)) rc = 1;
    }
    basp_module_free(m);
    return rc;
}
