/* basp-opt — the IR-level pass runner: reads textual IR, runs named passes
 * (verifying after each) and prints the result.  Used by the pass tests, one
 * pass at a time on hand-written IR. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "basp.h"
#include "basp_pass.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: basp-opt FILE.bir|- [options]\n"
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

int main(int argc, char **argv) {
    const char *in = NULL, *out_path = NULL, *passes = NULL;
    bool verify_only = false, schedule = false, json = false, quiet = false;
    basp_pass_options popt = {0};
    /* plugins first, so that --list-passes and --passes= see their passes */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *file = !strncmp(a, "--load-pass-plugin=", 19) ? a + 19 : NULL;
        if (!strcmp(a, "--load-pass-plugin")) {
            if (i + 1 >= argc) { fprintf(stderr, "basp-opt: error: missing value after %s\n", a); return 2; }
            file = argv[++i];
        }
        if (file && !basp_load_pass_plugin(file)) return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "--load-pass-plugin=", 19)) continue;
        if (!strcmp(a, "--load-pass-plugin")) { i++; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--list-passes")) { basp_list_passes(stdout); return 0; }
        if (!strncmp(a, "--passes=", 9)) passes = a + 9;
        else if (!strcmp(a, "--print-ir-after-all")) popt.print_after_all = true;
        else if (!strncmp(a, "--print-ir-after=", 17)) popt.print_after = a + 17;
        else if (!strcmp(a, "--verify-only")) verify_only = true;
        else if (!strcmp(a, "--schedule")) schedule = true;
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = true;
        else if (!strcmp(a, "-o") && i + 1 < argc) out_path = argv[++i];
        else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "basp-opt: error: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (in) {
            fprintf(stderr, "basp-opt: error: more than one input file\n");
            return 2;
        } else in = a;
    }
    if (!in) { usage(stderr); return 2; }
    if ((popt.print_after || popt.print_after_all) && !(passes && *passes)) {
        fprintf(stderr, "basp-opt: error: --print-ir-after%s needs --passes=...: no pass runs otherwise\n",
                popt.print_after_all ? "-all" : "");
        return 2;
    }
    basp_set_diagnostics(NULL, quiet);
    basp_module *m = basp_module_parse_file(in);
    if (!m) return 1;
    int rc = 0;
    if (!basp_module_verify(m)) rc = 1;
    else if (passes && *passes && !basp_run_pipeline(m, passes, &popt)) rc = 1;
    if (rc == 0 && !verify_only) {
        bool to_stdout = !out_path || strcmp(out_path, "-") == 0; /* -o -: standard output */
        FILE *out = to_stdout ? stdout : fopen(out_path, "w");
        if (!out) { perror(out_path); basp_module_free(m); return 1; }
        if (schedule) basp_print_schedule(m, out, json);
        else basp_print_ir(m, out);
        if (out != stdout) fclose(out);
    }
    basp_module_free(m);
    return rc;
}
