/* layout.h — the sequence-parallel layouts: which exist, which are legal for
 * a model, batch and mesh, and the device and link presets they are costed
 * with.  The only header of layout/.
 *
 * One home for these decisions: the frontend checks a spec with
 * layout_illegal (located errors), the passes check the IR with it (a
 * hand-written module has no spec), the planner enumerates
 * layout_candidates.  Nothing here depends on the frontend, the IR or the
 * passes: the rules work on plain dimensions.
 *
 * A layout is a choice of
 *   groups G   batch-aware groups: N = G*K ranks, group g = ranks
 *              [g*K, (g+1)*K) holds sequences [g*B/G, (g+1)*B/G)
 *   seq        how a group's K ranks share a sequence: Ulysses (all-to-all
 *              seq<->heads), ring attention (R = K ranks pass kv blocks),
 *              or hybrid (U = K/R Ulysses ranks x R ring ranks)
 *   variant    a strategy registered on top of a sequence family (the
 *              two-level all-to-all of api/strategies/two_level.c, or one a
 *              plugin registers), or none: the family's own strategy
 * layout/README.md has the rules, the strategy registry and how to add one. */
#ifndef BASP_LAYOUT_H
#define BASP_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The packer of documents into rows (layout_pack, common/cm_pack.c): a
 * layout decides which rows a group owns, the packer what they hold. */
#include "../common/common.h"

typedef enum { LAYOUT_ULYSSES, LAYOUT_RING, LAYOUT_HYBRID } layout_seq;
struct layout_strategy;

/* The sizes the rules read: world N = nodes*dpn ranks (dpn: devices per
 * node), micro-batch B, sequence length S, q heads H and kv heads Hk (Hk 0:
 * MHA, Hk = H). */
typedef struct layout_dims {
    int64_t N, nodes, dpn, B, S, H, Hk;
} layout_dims;

typedef struct layout_choice {
    layout_seq seq;                        /* the sequence family: LAYOUT_ULYSSES, LAYOUT_RING, LAYOUT_HYBRID */
    int ring_degree;                       /* R; 1 for ulysses, K for ring */
    const struct layout_strategy *variant; /* NULL: the family's own strategy; else a registered variant of it */
    int groups;                            /* G >= 1 batch-aware groups, K = N/G */
} layout_choice;

/* Plain Ulysses with G groups (G = 1: over all N ranks). */
layout_choice layout_ulysses(int groups);

/* NULL when the choice is legal for dims, else a reason ("heads (12) not
 * divisible by group size K=N/G=8"); `fix` (may be NULL) receives a hint
 * naming what would make it legal.  The reason lives in the registry's
 * buffer until the next reason. */
const char *layout_illegal(const layout_dims *d, const layout_choice *c, char *fix, size_t nfix);

/* Every legal choice, in order: each G dividing N and B ascending; for
 * each, every family (Ulysses, ring, hybrid) followed by its variants in
 * the order they were registered (Ulysses, two-level Ulysses, ring, hybrid
 * for each R with 1 < R < K ascending, then plugins').  Writes at most max;
 * returns how many there are. */
int layout_candidates(const layout_dims *d, layout_choice *out, int max);

/* Every G (ascending) for which `like` with that G is legal; returns how
 * many (may exceed max). */
int layout_legal_groups(const layout_dims *d, const layout_choice *like, int64_t *out, int max);

/* True when K ranks split the heads unevenly (ir/README.md, uneven
 * splits): kv heads >= K, not divisible by K, heads % kv_heads == 0.  Rank
 * p holds Hk/K + (p < Hk%K) kv heads. */
bool layout_heads_uneven(const layout_dims *d, int64_t K);

/* K = N/G, the ranks that share one sequence (0 when G does not divide N). */
int64_t layout_group_size(const layout_dims *d, const layout_choice *c);

/* Names: "ulysses" "ring" "hybrid"; parsing returns false for other text. */
const char *layout_seq_name(layout_seq s);
bool layout_seq_parse(const char *name, layout_seq *out);
/* "ulysses", "ulysses+two_level", "ring", "hybrid R=2"; with G > 1 prefixed
 * by "batch-aware G=g" ("batch-aware G=2", "batch-aware G=2 ring"). */
void layout_choice_name(const layout_choice *c, char *buf, size_t n);
/* The spec settings that select c, as `--set` arguments
 * ("layout.sequence=hybrid", "layout.ring_degree=2", "layout.a2a=flat",
 * "layout.batch_aware=groups 2"): fills out[0..], returns how many. */
#define LAYOUT_SET_MAX 64
int layout_choice_sets(const layout_choice *c, char out[][LAYOUT_SET_MAX], int max);

/* ---- the strategy registry ---------------------------------------------------
 * One row per strategy, in the compilation context (support.h).  Every row
 * is registered through api/basp_pass.h (basp_register_strategy), the
 * built-in ones at the library's initialisation (api/strategies/), a
 * plugin's when it is loaded: first the three families' own rows (ulysses,
 * ring, hybrid; key NULL), in layout_seq's order, then the variants (the
 * two-level all-to-all, a plugin's), each naming the spec words that select
 * it (`layout { KEY WORD }`, KEY "a2a") and the family it builds on.
 * `legal` holds the rules beyond the common ones (G >= 1, G | N, G | B),
 * for a variant also the family's (layout_family_legal); `candidates`
 * lists the choices of the strategy for one G (legal or not); `passes`
 * names the passes that build it after batch-aware and `after_zero` any
 * that run right after zero (passes/registry.c derives the pipeline from
 * both). */
typedef struct layout_strategy {
    const char *name;  /* "ulysses+two_level": the planner's and the messages' name */
    layout_seq seq;    /* the family it builds on */
    const char *key;   /* spec key that selects it ("a2a"); NULL for a family's own row */
    const char *word;  /* the key's value ("two_level"); the module config holds key = word */
    const char *title; /* for the training binary's banner ("Ulysses, two-level all-to-all"); may be NULL */
    const char *(*legal)(const struct layout_strategy *self, const layout_dims *d, const layout_choice *c, char *fix,
                         size_t nfix);
    int (*candidates)(const struct layout_strategy *self, const layout_dims *d, int groups, layout_choice *out,
                      int max);
    const char *passes;     /* comma-separated, run after batch-aware */
    const char *after_zero; /* comma-separated, run right after zero; NULL: none */
    const char *owner;      /* where it came from, for messages: "built in" or a plugin's path */
    const void *user;       /* the registering code's own (api/basp_pass.c: the public row) */
} layout_strategy;
enum { LAYOUT_MAX_STRATEGIES = 64, LAYOUT_MAX_CHOICES = 1024 /* per strategy and G */ };
/* The spec keys a variant may be selected by. */
bool layout_variant_key(const char *key);
/* Adds a row (copied; its strings must outlive the registry).  False, with
 * the reason in err, for a missing field, a family's row out of order or
 * after a variant, a variant of a family without its row, a key no spec
 * can set, or a name or (key, word) already registered. */
bool layout_strategy_register(const layout_strategy *s, char *err, size_t nerr);
/* Every registered row: the families first, then the variants in the order
 * they were registered.  Rows never move, so pointers to them stay valid. */
const layout_strategy *layout_strategies(int *n);
/* The row of c: its variant, else its family's own row (NULL before the
 * families are registered). */
const layout_strategy *layout_strategy_of(const layout_choice *c);
/* The variant selected by `key word` (a (key, word) pair selects one
 * variant, of whichever family); NULL when none is registered, and for the
 * families' own word of key "a2a", "flat". */
const layout_strategy *layout_variant_find(const char *key, const char *word);
/* The row named `name` ("ulysses+two_level"), or NULL. */
const layout_strategy *layout_strategy_named(const char *name);
/* The family's own rules (for a variant's `legal` to build on). */
const char *layout_family_legal(const layout_dims *d, const layout_choice *c, char *fix, size_t nfix);
/* A reason in the registry's buffer (what legal functions return), with
 * the hint in fix. */
const char *layout_reason(char *fix, size_t nfix, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- presets (presets.c) ------------------------------------------------ */
typedef struct layout_link {
    char kind[64];     /* nvlink, ib, pcie, ethernet, shm, tcp ... */
    double bandwidth;  /* bytes per second */
    double latency;    /* seconds */
    double efficiency; /* achievable fraction of bandwidth, default 1 */
} layout_link;

/* Device presets (name, memory bytes, peak flops, links). */
typedef struct layout_device_preset {
    const char *name;
    double mem_bytes;
    double peak_flops_bf16, peak_flops_fp32;
    double mem_bw;
    layout_link intra, inter; /* defaults for a mesh that names no link */
    /* Cost-model efficiencies (config cost.compute_fraction,
     * cost.attention_fraction, cost.mem_bw_fraction) and per-op overhead;
     * 0 = the model's defaults.  Set by fitted presets (bench/calibrate.py). */
    double compute_fraction, attention_fraction, mem_bw_fraction;
    double op_overhead; /* config cost.op_overhead, seconds per compute op */
    double exp_rate;    /* config device_exp_rate, exponentials per second; 0 = not modelled */
    /* The host: memory per node that offloaded values may use, and the
     * link from one device to it (a kind naming a link preset takes that
     * preset's numbers, frontend link_defaults). */
    double host_mem_bytes;
    layout_link host;
    /* How far the cost model's step time has been measured to miss on this
     * kind of device (a fraction; presets.c names the measurements): the
     * planner's "within the model's error" band. */
    double model_error;
    /* CPU ranks sharing a core (mesh cores_per_node < devices_per_node)
     * take turns on it, and each runs slower than its share: the cache
     * refills after every switch.  The fraction of its share a rank keeps
     * (config cost.shared_core_efficiency; bench/calibrate.py measures it:
     * R copies of one program on one core against one alone); 0 = 1, not
     * measured. */
    double shared_core_efficiency;
} layout_device_preset;
/* A device by name: one added at run time, else a built-in preset; NULL
 * for neither. */
const layout_device_preset *layout_device_lookup(const char *name);
/* The built-in presets (presets.c). */
const layout_device_preset *layout_device_presets(int *n);
/* Devices added at run time (baspc --device-file, frontend/devfile.c),
 * kept in the compilation context: a measured machine described without
 * rebuilding the compiler.  layout_device_add copies d (and its name); it
 * refuses a malformed name, a name already defined (built-in presets
 * included) and more than LAYOUT_MAX_DEVICES, saying why in err. */
enum { LAYOUT_MAX_DEVICES = 16, LAYOUT_DEVICE_NAME_MAX = 64 };
bool layout_device_add(const layout_device_preset *d, char *err, size_t nerr);
const layout_device_preset *layout_devices_added(int *n);
/* Forgets the devices added (tests and fuzzers, between runs). */
void layout_devices_reset(void);
/* Link presets by kind (nvlink3, nvlink4, pcie4, pcie5, ib_hdr, ib_ndr,
 * ethernet_100g).  NULL for other kinds. */
const layout_link *layout_link_lookup(const char *kind);
const layout_link *layout_link_presets(int *n);
/* The fraction of a device's bf16 peak that attention implementation impl
 * reaches on one causal attention op (forward, or backward when bwd) of
 * head dim head_dim over seq query rows, from the measurements and
 * published figures in presets.c (each row names its source); between
 * measured points, linear in head_dim and in log2(seq), clamped at the
 * ends.  0 when the device has no figures for impl. */
double layout_attention_fraction(const char *device, cm_attn_impl impl, bool bwd, int64_t head_dim, int64_t seq);
/* Packed documents on cuDNN (cudnn-docs) are zero-padded to a power of
 * two (cm_docs_padded): the allowance layout_attention_fraction takes for
 * it when the lengths are not known (at most 2x, 1.33x for lengths spread
 * evenly on a log scale). */
#define LAYOUT_DOCS_PADDING 0.75

#endif
