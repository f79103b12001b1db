/* embed_layouts — embeds the basp compiler: builds a spec in memory for
 * several micro-batch sizes, lowers each through the default pipeline and
 * prints the layout it ends up with.
 *
 *   $ embed_layouts            # Llama-3.2-1B shapes on 2 × 4 A100
 *   micro_batch  groups G  group size K  all-to-all peers
 *             1         1             8                 7
 *   ...
 */
#include <stdio.h>
#include <stdlib.h>

#include "basp.h"

static const char *spec_template = "model llama_3_2_1b {\n"
                                   "  hidden 2048 layers 16 heads 32 kv_heads 8 head_dim 64\n"
                                   "  ffn 8192 vocab 128256 rope_theta 500000 norm_eps 1e-5 tie_embeddings true\n"
                                   "}\n"
                                   "mesh a100_2x4 {\n"
                                   "  nodes 2 devices_per_node 4 device a100_40gb\n"
                                   "  link intra nvlink bandwidth 300GB/s latency 2us\n"
                                   "  link inter ib bandwidth 400Gb/s latency 5us\n"
                                   "}\n"
                                   "train  { micro_batch %d seq_len 16K precision bf16 zero 1 }\n"
                                   "layout { sequence ulysses batch_aware auto }\n";

/* Lowers one spec text; returns 0 and fills G and K on success. */
static int layout_for(const char *text, const char *name, long *G, long *K) {
    basp_spec *spec = basp_spec_parse_string(name, text);
    if (!spec || !basp_spec_check(spec)) {
        basp_spec_free(spec);
        return 1;
    }
    basp_module *m = basp_lower(spec);
    basp_spec_free(spec);
    if (!m || !basp_run_pipeline(m, NULL, NULL)) {
        basp_module_free(m);
        return 1;
    }
    const char *g = basp_module_config(m, "batch_groups");
    const char *k = basp_module_config(m, "sp_size");
    *G = g ? atol(g) : 1;
    *K = k ? atol(k) : 0;
    basp_module_free(m);
    return 0;
}

int main(void) {
    basp_set_diagnostics(NULL, true); /* errors only: the table is the output */
    printf("%11s  %8s  %12s  %16s  %s\n", "micro_batch", "groups G", "group size K", "all-to-all peers", "layout");
    const int batches[] = {1, 2, 4, 8, 16};
    for (size_t i = 0; i < sizeof batches / sizeof *batches; i++) {
        char text[1024], name[32];
        snprintf(text, sizeof text, spec_template, batches[i]);
        snprintf(name, sizeof name, "<micro_batch=%d>", batches[i]);
        long G = 0, K = 0;
        if (layout_for(text, name, &G, &K) != 0) {
            fprintf(stderr, "embed_layouts: micro_batch %d did not compile\n", batches[i]);
            return 1;
        }
        const char *kind = K == 1 ? "data parallel (no all-to-all)" : G == 1 ? "Ulysses over all ranks" : "batch-aware";
        printf("%11d  %8ld  %12ld  %16ld  %s\n", batches[i], G, K, K - 1, kind);
    }
    return 0;
}
