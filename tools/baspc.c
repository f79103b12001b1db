/* baspc — compile a basp layout spec: check it, lower it to IR, run the pass
 * pipeline, and build the training executable (-o FILE), or print the IR,
 * the generated C program or the communication schedule.  A thin driver
 * over the embedding API (api/basp.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basp.h"
#include "basp_pass.h"
#include "support/support.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: baspc SPEC.basp [options]\n"
            "       baspc MODULE.bir [options]   (textual IR, taken as lowered: no passes\n"
            "                                     run unless --passes names some)\n"
            "\n"
            "Actions (default: build the executable with -o FILE, else --emit=ir):\n"
            "  -o FILE                  build the training executable FILE: generate the C\n"
            "                           program and compile it against the runtime\n"
            "                           (run it with: mpirun -np N ./FILE --data DATA);\n"
            "                           with another action: write its output to FILE\n"
            "                           (written next to FILE and renamed at the end: a failed\n"
            "                           run leaves FILE as it was; an input file is refused;\n"
            "                           -o - is standard output)\n"
            "  --emit=c                 print the generated C program (to -o FILE or stdout)\n"
            "  --check                  parse and check the spec only\n"
            "  --print-spec             print the checked spec with every default filled in\n"
            "  --emit=ir                print the IR after the pipeline (to -o FILE or stdout)\n"
            "  --emit=lowered           print the IR straight after lowering (no passes)\n"
            "  --schedule               print every collective per layer and phase with its\n"
            "                           groups, bytes, peers and inter-node bytes\n"
            "  --plan                   compare every legal layout (Ulysses flat and two-level,\n"
            "                           ring, hybrid R, each for every batch-aware G) with the\n"
            "                           cost model: predicted step\n"
            "                           time, all-to-all share, memory per rank; names the\n"
            "                           fastest that fits (exit 1 when none fits)\n"
            "  --doc-lengths FILE       with --plan: rows packed from documents of these lengths\n"
            "                           (the training data, split at train.eot_token, or a text\n"
            "                           list of lengths): each layout's step with sequential and\n"
            "                           balanced packing; the choice by the spec's packing\n"
            "  --memory                 the memory plan of one rank: peak per rank (arena +\n"
            "                           kernel workspace), what is live at the peak op by\n"
            "                           category, the largest buffers, whether it fits the\n"
            "                           device (exit 1 when not, naming what would fit)\n"
            "  --max-seq-len            the longest seq_len whose memory plan fits the device,\n"
            "                           for Ulysses and every batch-aware G (and the spec's ring,\n"
            "                           hybrid or two-level strategy), with recompute none,\n"
            "                           selective and full, each without and with the spec's\n"
            "                           train.offload when it has one\n"
            "  --trace FILE             write the predicted timeline of one step (Chrome trace\n"
            "                           JSON: pid = rank, tid 0 compute, tid 1 communication)\n"
            "  --json                   with --schedule, --plan, --memory or --max-seq-len: one\n"
            "                           JSON object instead of a table\n"
            "\n"
            "Options:\n"
            "  --set BLOCK.KEY=VALUE    override a spec key (repeatable), e.g.\n"
            "                           --set train.micro_batch=4 --set layout.batch_aware=off\n"
            "  --passes=A,B,C           run these passes instead of the layout strategy's pipeline,\n"
            "                           which is this one with its own strategy's passes only:\n"
            "                           %s\n"
            "                           (--list-passes says what each does); --passes= runs none\n"
            "  --print-ir-after-all     print the IR after every pass (to stdout)\n"
            "  --print-ir-after=PASS    print the IR after the named pass(es), comma-separated\n"
            "  --list-passes            list the registered passes\n"
            "  --load-pass-plugin=FILE  load a pass plugin: its passes and layout strategies\n"
            "                           (repeatable; docs/writing-a-pass.md)\n"
            "  --device-file FILE       add the devices of a JSON device file (measured figures,\n"
            "                           e.g. bench/calibrate.py --device-file) to the presets a\n"
            "                           spec's `device NAME` can name (repeatable; docs/language.md)\n"
            "  --keep-c                 when building, keep the C program as FILE.c\n"
            "  --no-memory-plan         build a program that gives every value its own buffer\n"
            "                           (no reuse): the reference for the memory plan; --memory\n"
            "                           and the fit check then judge what that program allocates\n"
            "  --target=cpu|cuda        backend of the generated program (default cpu; cuda: GPUs, NCCL, bf16);\n"
            "                           the memory plan (--memory, --plan) sizes its buffers\n"
            "  -v                       print the compiler command line when building\n"
            "                           (env BASP_CC, BASP_RUNTIME_DIR, BASP_CFLAGS, BASP_LDFLAGS\n"
            "                           override the compiler and the runtime's location)\n"
            "  -q, --quiet              no remarks or warnings, only errors\n"
            "  --version, --help\n",
            basp_default_pipeline());
}

typedef enum {
    ACT_IR,
    ACT_LOWERED,
    ACT_CHECK,
    ACT_SPEC,
    ACT_SCHEDULE,
    ACT_PLAN,
    ACT_MEMORY,
    ACT_MAXSEQ,
    ACT_C,
    ACT_BUILD
} action;

typedef struct options {
    const char *spec;
    const char *out;
    const char *passes; /* NULL = default pipeline */
    const char *trace;  /* --trace FILE: predicted timeline of one step */
    const char **sets;
    int nsets;
    const char **devfiles; /* --device-file FILE, in order */
    int ndevfiles;
    action act;
    int emit_given;
    int json, quiet, keep_c, verbose;
    int answered;            /* --plan/--memory/--max-seq-len wrote a negative answer: keep it */
    const char *doc_lengths; /* --doc-lengths FILE (with --plan) */
    basp_pass_options popt;
    /* The first usage error, reported by report_usage once the plugins are
     * loaded (their errors say more about a mistyped plugin argument). */
    char usage_msg[1024];
    sup_io io; /* what the run reads and writes (below) */
} options;

static int die_usage(options *o, const char *msg, const char *arg) {
    if (!o->usage_msg[0]) snprintf(o->usage_msg, sizeof o->usage_msg, "%s%s%s", msg, arg ? ": " : "", arg ? arg : "");
    return 2;
}

static int report_usage(const options *o) {
    fprintf(stderr, "baspc: error: %s\n", o->usage_msg);
    fprintf(stderr, "run 'baspc --help' for usage\n");
    return 2;
}

/* ---- inputs and outputs --------------------------------------------------
 * Every file the compilation reads (the spec or .bir, each import, each
 * config.json, each --load-pass-plugin, --doc-lengths) against every file
 * it writes (-o, --keep-c's FILE.c, --trace), by support's path identity:
 * the outputs and the command line's inputs are checked before any plugin
 * is loaded, imports and config.json files as the parser reaches them,
 * and a clash stops the run before anything is written.  Outputs are
 * written to a temporary file next to their name (mkstemps, so never an
 * existing file) and renamed over it at the end, so that baspc never
 * truncates or deletes a file it did not create in this run.  ud: the
 * options' sup_io. */
static void note_input(const char *path, void *ud) {
    size_t n = path ? strlen(path) : 0;
    sup_io_input(ud, n > 5 && !strcmp(path + n - 5, ".json") ? "the model file" : "the import", path);
}

/* The plugin file of the option at argv[*i] (stepping over its value), or NULL. */
static const char *plugin_arg(int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strncmp(a, "--load-pass-plugin=", 19)) return a + 19;
    if (strcmp(a, "--load-pass-plugin") || *i + 1 >= argc) return NULL;
    return argv[++*i];
}

/* Textual IR (basp-opt's input) instead of a spec: FILE.bir. */
static int is_ir_file(const char *path) {
    size_t n = strlen(path);
    return n > 4 && !strcmp(path + n - 4, ".bir");
}

/* --load-pass-plugin=FILE (or FILE as the next argument), loaded before
 * anything else so that --list-passes, --passes= and the spec's layout
 * words see the plugin's passes and strategies.  Returns 0, 1 when a load
 * failed (reported), 2 on a usage error. */
static int load_plugins(int argc, char **argv, options *o) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--load-pass-plugin") && i + 1 >= argc)
            return die_usage(o, "missing value after", argv[i]);
        const char *file = plugin_arg(argc, argv, &i);
        if (file && !basp_load_pass_plugin(file)) return 1;
    }
    return 0;
}

/* Returns 0 to go on, 1 when done (help/version), 2 on a usage error
 * (reported later: report_usage), 3 for --list-passes (after the plugins). */
static int parse_args(int argc, char **argv, options *o) {
    o->sets = calloc((size_t)argc + 1, sizeof *o->sets);
    o->devfiles = calloc((size_t)argc + 1, sizeof *o->devfiles);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--version")) {
            printf("baspc %s\n", BASP_VERSION);
            return 1;
        }
        if (!strcmp(a, "--list-passes")) return 3;
        if (!strncmp(a, "--load-pass-plugin=", 19)) continue; /* load_plugins */
        if (!strcmp(a, "--load-pass-plugin")) {
            i++;
            continue;
        }
        if (!strcmp(a, "--check")) {
            o->act = ACT_CHECK;
            o->emit_given = 1;
        } else if (!strcmp(a, "--print-spec")) {
            o->act = ACT_SPEC;
            o->emit_given = 1;
        } else if (!strcmp(a, "--emit=ir")) {
            o->act = ACT_IR;
            o->emit_given = 1;
        } else if (!strcmp(a, "--emit=lowered")) {
            o->act = ACT_LOWERED;
            o->emit_given = 1;
        } else if (!strcmp(a, "--emit=c")) {
            o->act = ACT_C;
            o->emit_given = 1;
        } else if (!strncmp(a, "--emit=", 7))
            return die_usage(o, "unknown --emit kind (ir, lowered, c)", a + 7);
        else if (!strcmp(a, "--keep-c"))
            o->keep_c = 1;
        else if (!strcmp(a, "--no-memory-plan"))
            basp_set_memory_plan(false);
        else if (!strncmp(a, "--target=", 9)) {
            if (!basp_set_target(a + 9)) return die_usage(o, "unknown --target (cpu, cuda)", a + 9);
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose"))
            o->verbose = 1;
        else if (!strcmp(a, "--schedule")) {
            o->act = ACT_SCHEDULE;
            o->emit_given = 1;
        } else if (!strcmp(a, "--plan")) {
            o->act = ACT_PLAN;
            o->emit_given = 1;
        } else if (!strcmp(a, "--memory")) {
            o->act = ACT_MEMORY;
            o->emit_given = 1;
        } else if (!strcmp(a, "--max-seq-len")) {
            o->act = ACT_MAXSEQ;
            o->emit_given = 1;
        } else if (!strcmp(a, "--json"))
            o->json = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet"))
            o->quiet = 1;
        else if (!strncmp(a, "--passes=", 9))
            o->passes = a + 9;
        else if (!strcmp(a, "--print-ir-after-all"))
            o->popt.print_after_all = true;
        else if (!strncmp(a, "--print-ir-after=", 17))
            o->popt.print_after = a + 17;
        else if (!strcmp(a, "--set") || !strcmp(a, "-o") || !strcmp(a, "--trace") || !strcmp(a, "--doc-lengths")) {
            if (i + 1 >= argc) return die_usage(o, "missing value after", a);
            if (a[1] == 'o')
                o->out = argv[++i];
            else if (a[2] == 't')
                o->trace = argv[++i];
            else if (a[2] == 'd')
                o->doc_lengths = argv[++i];
            else
                o->sets[o->nsets++] = argv[++i];
        } else if (!strncmp(a, "--set=", 6))
            o->sets[o->nsets++] = a + 6;
        else if (!strcmp(a, "--device-file")) {
            if (i + 1 >= argc) return die_usage(o, "missing value after", a);
            o->devfiles[o->ndevfiles++] = argv[++i];
        } else if (!strncmp(a, "--device-file=", 14))
            o->devfiles[o->ndevfiles++] = a + 14;
        else if (a[0] == '-' && a[1] != '\0')
            return die_usage(o, "unknown option", a);
        else if (o->spec)
            return die_usage(o, "more than one spec file given", a);
        else
            o->spec = a;
    }
    if (!o->spec) return die_usage(o, "no spec file given", NULL);
    if (o->trace && (o->act == ACT_CHECK || o->act == ACT_SPEC || o->act == ACT_PLAN || o->act == ACT_MAXSEQ ||
                     o->act == ACT_LOWERED))
        return die_usage(o, "--trace needs the lowered schedule: use it with --emit=ir, --schedule, --emit=c or -o",
                         NULL);
    if (o->doc_lengths && o->act != ACT_PLAN) return die_usage(o, "--doc-lengths goes with --plan", NULL);
    if (o->json && o->act != ACT_SCHEDULE && o->act != ACT_PLAN && o->act != ACT_MEMORY && o->act != ACT_MAXSEQ)
        return die_usage(o, "--json goes with --schedule, --plan, --memory or --max-seq-len", NULL);
    if (o->out && !o->emit_given) o->act = ACT_BUILD;
    if (o->out && strcmp(o->out, "-") == 0) { /* the usual name of standard output */
        if (o->act == ACT_BUILD)
            return die_usage(o,
                             "-o - is standard output, which cannot hold a training binary: name a file, or add "
                             "--emit=c for the program's source",
                             NULL);
        o->out = NULL;
    }
    if (o->keep_c && o->act != ACT_BUILD) return die_usage(o, "--keep-c goes with building (-o FILE, no --emit)", NULL);
    if (is_ir_file(o->spec)) {
        if (o->nsets) return die_usage(o, "--set applies to specs, not to textual IR", o->spec);
        if (o->act == ACT_SPEC || o->act == ACT_LOWERED || o->act == ACT_PLAN || o->act == ACT_MAXSEQ)
            return die_usage(o,
                             "textual IR has no spec: --print-spec, --emit=lowered, --plan and --max-seq-len need "
                             "a .basp file",
                             o->spec);
        if (!o->passes) o->passes = ""; /* already lowered */
    }
    return 0;
}

/* The module after the pipeline (or straight after lowering for
 * --emit=lowered); NULL when a stage failed or the action is done.  *specp
 * gets the checked spec (NULL for textual IR); the caller frees it.
 * Printed-after IR goes to stdout even when -o names the final output. */
static basp_module *compile(options *o, FILE *out, int *rc, basp_spec **specp) {
    basp_module *m;
    *specp = NULL;
    if (is_ir_file(o->spec)) {
        if (!(m = basp_module_parse_file(o->spec)) || !basp_module_verify(m)) {
            basp_module_free(m);
            return NULL;
        }
        if (o->act == ACT_CHECK) {
            basp_module_free(m);
            *rc = 0;
            return NULL;
        }
        if (!basp_run_pipeline(m, o->passes, &o->popt)) {
            basp_module_free(m);
            return NULL;
        }
        return m;
    }
    basp_spec *spec = basp_spec_parse_file(o->spec);
    if (o->io.clashed) {
        basp_spec_free(spec);
        return NULL;
    } /* an import or config.json is an output */
    if (!spec) return NULL;
    int ok = 1;
    for (int i = 0; i < o->nsets && ok; i++) ok = basp_spec_set(spec, o->sets[i]);
    if (!ok || !basp_spec_check(spec)) {
        basp_spec_free(spec);
        return NULL;
    }
    if (o->act == ACT_CHECK || o->act == ACT_SPEC || o->act == ACT_PLAN || o->act == ACT_MAXSEQ) {
        if (o->act == ACT_SPEC) basp_spec_print(spec, out);
        *rc = o->act == ACT_PLAN && !basp_plan_docs(spec, o->doc_lengths, out, o->json);
        if (o->act == ACT_MAXSEQ) *rc = !basp_max_seq_len(spec, out, o->json);
        /* "nothing fits" is the answer, with the reason: keep the output */
        if (*rc && !basp_error_count()) o->answered = 1;
        basp_spec_free(spec);
        return NULL;
    }
    /* A layout that does not fit: --memory reports it (as an error), -o
     * refuses to build it, every other action that runs the pipeline warns. */
    basp_fit fit = o->act == ACT_MEMORY ? BASP_FIT_QUIET : o->act == ACT_BUILD ? BASP_FIT_ERROR : BASP_FIT_WARN;
    m = o->act == ACT_LOWERED ? basp_lower(spec) : basp_compile(spec, o->passes, &o->popt, fit);
    if (!m) {
        basp_spec_free(spec);
        return NULL;
    }
    *specp = spec;
    return m;
}

/* Writes the predicted one-step timeline (Chrome trace JSON) to o->trace. */
static bool write_trace(const options *o, const basp_module *m) {
    sup_outfile f;
    if (!sup_out_open(&f, o->trace, "baspc")) return false;
    bool ok = basp_write_trace(m, f.f);
    ok = sup_out_close(&f, ok) && ok;
    if (!ok) fprintf(stderr, "baspc: error: could not write the trace to %s\n", o->trace);
    return ok;
}

static int run(options *o, FILE *out) {
    int rc = 1;
    basp_spec *spec;
    basp_module *m = compile(o, out, &rc, &spec);
    if (!m) return rc;
    bool ok = sup_io_recheck(&o->io) && (!o->trace || write_trace(o, m));
    if (o->act == ACT_SCHEDULE)
        basp_print_schedule(m, out, o->json);
    else if (o->act == ACT_MEMORY) {
        bool fits = basp_memory(spec, m, out, o->json);
        if (!fits && ok) o->answered = 1; /* the report says why it does not fit: keep it */
        ok = fits && ok;
    } else if (o->act == ACT_C)
        ok = basp_emit_c(m, o->spec, out) && ok;
    else if (o->act == ACT_BUILD) {
        ok = ok && sup_io_recheck(&o->io) && basp_build(m, o->spec, o->out, o->keep_c);
    } else
        basp_print_ir(m, out);
    basp_module_free(m);
    basp_spec_free(spec);
    return ok && !basp_error_count() ? 0 : 1;
}

/* The outputs and the command line's inputs, before any plugin is loaded
 * or anything is read; false when one is the other (reported). */
static bool plan_io(int argc, char **argv, options *o) {
    char cfile[4096];
    snprintf(cfile, sizeof cfile, "%s.c", o->out ? o->out : "");
    sup_io_output(&o->io, "-o", o->out);
    if (o->act == ACT_BUILD && o->keep_c) sup_io_output(&o->io, "--keep-c's C file", cfile);
    sup_io_output(&o->io, "--trace", o->trace);
    sup_io_input(&o->io, is_ir_file(o->spec) ? "the IR file" : "the spec", o->spec);
    sup_io_input(&o->io, "--doc-lengths", o->doc_lengths);
    for (int i = 1; i < argc; i++) sup_io_input(&o->io, "--load-pass-plugin", plugin_arg(argc, argv, &i));
    for (int i = 0; i < o->ndevfiles; i++) sup_io_input(&o->io, "--device-file", o->devfiles[i]);
    return !o->io.clashed;
}

/* -o FILE for an action other than building: written to a temporary next
 * to FILE, renamed over it only when the run succeeded (or gave a negative
 * answer worth keeping) and no input turned out to be FILE. */
static int run_to_file(options *o) {
    sup_outfile of = {0};
    FILE *out = stdout;
    if (o->out) {
        if (!sup_out_open(&of, o->out, "baspc")) return 1;
        out = of.f;
    }
    int rc = run(o, out);
    if (o->out) {
        int clash = !sup_io_recheck(&o->io);
        if (clash) rc = 1;
        /* never leave a half-written output behind; a negative answer of
         * --plan, --memory or --max-seq-len is kept (and exit status 1) */
        if (!sup_out_close(&of, !clash && (rc == 0 || o->answered))) rc = 1;
    }
    return rc;
}

int main(int argc, char **argv) {
    options o = {0};
    int r = parse_args(argc, argv, &o);
    if (r == 1) {
        free(o.sets);
        free(o.devfiles);
        return 0;
    }
    basp_set_diagnostics(NULL, o.quiet);
    /* A plugin's constructors run when it loads: an output that would
     * replace one of the inputs is refused before that. */
    if (r == 0 && !plan_io(argc, argv, &o)) {
        sup_io_free(&o.io);
        free(o.sets);
        free(o.devfiles);
        return 1;
    }
    int lr = load_plugins(argc, argv, &o);
    for (int i = 0; lr == 0 && r == 0 && i < o.ndevfiles; i++)
        if (!basp_load_device_file(o.devfiles[i])) lr = 1;
    if (lr == 1)
        r = 1; /* the plugin's or device file's error says it all */
    else if (r == 2 || lr == 2)
        r = report_usage(&o);
    else if (r == 3)
        basp_list_passes(stdout), r = 0, o.spec = NULL;
    if (r || !o.spec) {
        sup_io_free(&o.io);
        free(o.sets);
        free(o.devfiles);
        return r;
    } /* done, or failed */
    basp_set_verbosity(o.verbose ? 2 : o.quiet ? 0 : 1);
    basp_set_input_hook(note_input, &o.io);
    int rc = 1;
    struct stat st;
    if (o.act != ACT_BUILD)
        rc = run_to_file(&o);
    else if (stat(o.out, &st) == 0 && !S_ISREG(st.st_mode)) /* the compiler writes o.out itself */
        fprintf(stderr, "baspc: error: the output '%s' exists and is not a regular file; refusing to build over it\n",
                o.out);
    else
        rc = run(&o, stdout);
    sup_io_free(&o.io);
    free(o.sets);
    free(o.devfiles);
    return rc;
}
