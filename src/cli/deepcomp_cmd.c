/* zerosim — `zerosim compress` and `zerosim decompress`: Deep Compression
 * of a trained model (zerosim/deepcomp.h, docs/quantization.md). */
#include "deepcomp_cmd.h"
#include "cli_num.h"
#include "zerosim/deepcomp.h"
#include "zerosim/error.h"
#include "zerosim/eval.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const zs_compress_usage =
    "usage: zerosim compress --from CKPT|FILE --out FILE [options]\n"
    "\n"
    "Deep Compression (Han et al., arXiv 1510.00149) of a trained model's linear\n"
    "weights: magnitude pruning with retraining, weight sharing by k-means per\n"
    "layer with fine-tuned centroids, Huffman coding of the cluster indices and of\n"
    "the relative (gap) indices. Writes one file atomically; prints per layer the\n"
    "nonzeros, bits per weight and index, the compression ratio against fp32 and\n"
    "the held-out loss after each stage, and the param_hash of the weights the file\n"
    "holds (zerosim decompress prints the same).\n"
    "  --from CKPT|FILE         a checkpoint (tp = 1) or GPT or dense Llama weights,\n"
    "                           as quantize's\n"
    "  --out FILE               the compressed file\n"
    "  --sparsity S[,S2,...]    fraction of each linear weight pruned, [0, 1) (0.92);\n"
    "                           a list: one per linear weight, in order (LeNet-300-100\n"
    "                           as the paper: 0.92,0.91,0.74)\n"
    "  --prune-rounds K         reach it in K rounds of prune + retrain (3)\n"
    "  --prune-schedule linear|geometric  equal steps of sparsity (S k/K), or each\n"
    "                           round pruning the same share of what is left (keeps\n"
    "                           (1-S)^(k/K)) (linear)\n"
    "  --retrain-steps N        retraining steps after each round (300)\n"
    "  --bits B                 2^B shared weights per layer, 1-16 (5)\n"
    "  --index-bits R           relative indices of 1 .. 2^R, 1-16 (5)\n"
    "  --kmeans-iters N         Lloyd iterations (30)\n"
    "  --finetune-steps N       centroid fine-tuning steps (300)\n"
    "  --lr X                   Adam's learning rate (1e-3)\n"
    "  --micro-batch B          samples a step (32)\n"
    "  --samples N              held-out samples for the losses (1024; 0: none)\n"
    "  --seed S                 the synthetic task's seed (the checkpoint's)\n"
    "  --data DIR|fashion-mnist the MLP: retrain on an image set's training images\n"
    "                           and give the loss and accuracy on its test images\n"
    "                           (docs/data.md) instead of the synthetic task\n"
    "  --heads H                attention heads of a weights file that does not say\n";

static const char *const zs_decompress_usage =
    "usage: zerosim decompress --from FILE [--samples N] [--micro-batch B]\n"
    "\n"
    "Decode a file of zerosim compress: per layer its nonzeros, bits and ratio, the\n"
    "param_hash of the decoded weights and their held-out loss. zerosim eval and\n"
    "zerosim quantize read compressed files too.\n";

enum { DO_FROM = 1, DO_OUT, DO_SPARSITY, DO_ROUNDS, DO_RETRAIN, DO_BITS, DO_IBITS, DO_KM,
       DO_FT, DO_LR, DO_MB, DO_SAMPLES, DO_SEED, DO_HEADS, DO_DATA, DO_SCHED, DO_HELP };

static int zs_dcli_int(const char *opt, const char *s, long lo, long hi, int *out)
{
    long v;
    ZS_TRY(zs_cli_parse_long(opt, s, lo, hi, &v));
    *out = (int)v;
    return 0;
}

typedef struct {
    const char *from, *out;
    zs_dc_options o;
    int has_seed, heads;
} zs_dcli;

/* --sparsity S or S1,S2,...: one for every linear weight, or one each
 * (checked below with the other options: [0, 1)). */
static int zs_dcli_sparsity(const char *s, zs_dc_options *o)
{
    char buf[64];
    int n = 0;
    o->n_layer_sparsity = 0;
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (n == ZS_DC_MAX_LAYERS || len >= sizeof buf)
            ZS_FAIL("--sparsity takes at most %d fractions, got \"%s\"", ZS_DC_MAX_LAYERS, s);
        memcpy(buf, p, len);
        buf[len] = 0;
        ZS_TRY(zs_cli_parse_number("--sparsity", buf, -INFINITY, INFINITY, &o->layer_sparsity[n++]));
        if (!comma)
            break;
        p = comma + 1;
    }
    o->sparsity = o->layer_sparsity[0];
    o->n_layer_sparsity = n > 1 ? n : 0;
    return 0;
}

static int zs_dcli_parse(int argc, char **argv, int comp, zs_dcli *c, int *help)
{
    static const struct option opts[] = {
        {"from", required_argument, NULL, DO_FROM}, {"out", required_argument, NULL, DO_OUT},
        {"sparsity", required_argument, NULL, DO_SPARSITY},
        {"prune-rounds", required_argument, NULL, DO_ROUNDS},
        {"retrain-steps", required_argument, NULL, DO_RETRAIN},
        {"bits", required_argument, NULL, DO_BITS},
        {"index-bits", required_argument, NULL, DO_IBITS},
        {"kmeans-iters", required_argument, NULL, DO_KM},
        {"finetune-steps", required_argument, NULL, DO_FT},
        {"lr", required_argument, NULL, DO_LR}, {"micro-batch", required_argument, NULL, DO_MB},
        {"samples", required_argument, NULL, DO_SAMPLES},
        {"seed", required_argument, NULL, DO_SEED}, {"heads", required_argument, NULL, DO_HEADS},
        {"data", required_argument, NULL, DO_DATA},
        {"prune-schedule", required_argument, NULL, DO_SCHED},
        {"help", no_argument, NULL, DO_HELP}, {NULL, 0, NULL, 0},
    };
    const char *cmd = comp ? "compress" : "decompress";
    memset(c, 0, sizeof *c);
    zs_dc_options_default(&c->o);
    *help = 0;
    optind = 1;
    opterr = 0;
    int ch;
    double v;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (!comp && ch != DO_FROM && ch != DO_SAMPLES && ch != DO_MB && ch != DO_HELP &&
            ch != 'h' && ch != '?')
            ZS_FAIL("%s is not an option of zerosim decompress (see zerosim decompress --help)",
                    argv[optind - 1]);
        switch (ch) {
        case 'h': case DO_HELP: *help = 1; return 0;
        case DO_FROM: c->from = optarg; break;
        case DO_OUT: c->out = optarg; break;
        case DO_SPARSITY: ZS_TRY(zs_dcli_sparsity(optarg, &c->o)); break;
        case DO_DATA: c->o.data = optarg; break;
        case DO_SCHED:
            if (strcmp(optarg, "linear") && strcmp(optarg, "geometric"))
                ZS_FAIL("--prune-schedule is linear or geometric, got \"%s\"", optarg);
            c->o.prune_geometric = !strcmp(optarg, "geometric");
            break;
        case DO_ROUNDS: ZS_TRY(zs_dcli_int("--prune-rounds", optarg, 1, 1000, &c->o.prune_rounds)); break;
        case DO_RETRAIN: ZS_TRY(zs_dcli_int("--retrain-steps", optarg, 0, 10000000, &c->o.retrain_steps)); break;
        case DO_BITS: ZS_TRY(zs_dcli_int("--bits", optarg, INT_MIN, INT_MAX, &c->o.bits)); break;
        case DO_IBITS: ZS_TRY(zs_dcli_int("--index-bits", optarg, INT_MIN, INT_MAX, &c->o.index_bits)); break;
        case DO_KM: ZS_TRY(zs_dcli_int("--kmeans-iters", optarg, 0, 100000, &c->o.kmeans_iters)); break;
        case DO_FT: ZS_TRY(zs_dcli_int("--finetune-steps", optarg, 0, 10000000, &c->o.finetune_steps)); break;
        case DO_LR:
            ZS_TRY(zs_cli_parse_number("--lr", optarg, 1e-12, 10, &v));
            c->o.lr = (float)v;
            break;
        case DO_MB: ZS_TRY(zs_dcli_int("--micro-batch", optarg, 1, 4096, &c->o.micro_batch)); break;
        case DO_SAMPLES: ZS_TRY(zs_dcli_int("--samples", optarg, 0, 1 << 20, &c->o.eval_samples)); break;
        case DO_HEADS: ZS_TRY(zs_dcli_int("--heads", optarg, 1, 1 << 20, &c->heads)); break;
        case DO_SEED:
            ZS_TRY(zs_cli_parse_number("--seed", optarg, 0, 9.0e15, &v));
            c->o.seed = (uint64_t)v;
            c->has_seed = 1;
            break;
        default:
            ZS_FAIL("%s %s (see zerosim %s --help)",
                    optopt ? "option needs a value or is unknown:" : "unknown option",
                    argv[optind - 1], cmd);
        }
    }
    if (optind < argc)
        ZS_FAIL("unexpected argument \"%s\" (see zerosim %s --help)", argv[optind], cmd);
    if (!c->from)
        ZS_FAIL("give the model: --from %s (see zerosim %s --help)", comp ? "CKPT|FILE" : "FILE",
                cmd);
    if (comp && !c->out)
        ZS_FAIL("give --out FILE, the compressed file to write");
    return zs_dc_options_check(&c->o);
}

static void zs_dcli_table(const zs_dc_result *r)
{
    printf("# %-22s %10s %10s %8s %9s %9s %12s %8s\n", "layer", "weights", "nonzeros", "kept",
           "bits/w", "bits/idx", "bits", "ratio");
    uint64_t lin_bits = 0, lin_dense = 0;
    for (int l = 0; l < r->nlayers; l++) {
        const zs_dc_layer *y = &r->layers[l];
        uint64_t bits = y->idx_bits + y->gap_bits + y->codebook_bits + y->table_bits;
        lin_bits += bits;
        lin_dense += 32 * (uint64_t)y->numel;
        printf("%-24s %10zu %10zu %7.2f%% %9.3f %9.3f %12" PRIu64 " %7.1fx\n", y->name, y->numel,
               y->nonzeros, 100.0 * (double)y->nonzeros / (double)y->numel,
               y->entries ? (double)y->idx_bits / (double)y->entries : 0.0,
               y->entries ? (double)y->gap_bits / (double)y->entries : 0.0, bits,
               (double)(32 * (uint64_t)y->numel) / (double)bits);
    }
    printf("# (bits/w, bits/idx: Huffman bits per stored entry, fillers included; bits: both\n"
           "#  streams, the codebook and the code tables)\n");
    printf("linear weights: %" PRIu64 " bytes fp32 -> %" PRIu64 " bytes: %.1fx\n", lin_dense / 8,
           (lin_bits + 7) / 8, (double)lin_dense / (double)lin_bits);
    printf("whole model: %" PRIu64 " bytes fp32 -> %" PRIu64 " bytes of tensors (%" PRIu64
           " of them fp32 biases and other entries), %" PRIu64 " with the header: %.1fx "
           "(%.1fx with the header)\n", r->dense_bytes, r->compressed_bytes, r->other_bytes,
           r->file_bytes, (double)r->dense_bytes / (double)r->compressed_bytes,
           (double)r->dense_bytes / (double)r->file_bytes);
}

/* With an image set: the ratio and the test accuracy after each stage, the
 * linear weights counted as the paper counts them: pruning alone stores
 * each entry (fillers too) as a 32-bit weight and an R-bit relative index;
 * sharing as a B-bit cluster index and the R-bit relative index, plus the
 * codebooks; Huffman coding, the coded streams, codebooks and code tables. */
static void zs_dcli_stages(const zs_dc_options *o, const zs_dc_result *r)
{
    uint64_t dense = 0, pruned = 0, shared = 0, coded = 0;
    for (int l = 0; l < r->nlayers; l++) {
        const zs_dc_layer *y = &r->layers[l];
        dense += 32 * (uint64_t)y->numel;
        pruned += (uint64_t)y->entries * (32 + (uint64_t)o->index_bits);
        shared += (uint64_t)y->entries * (uint64_t)(o->bits + o->index_bits) + y->codebook_bits;
        coded += y->idx_bits + y->gap_bits + y->codebook_bits + y->table_bits;
    }
    printf("# stage                     linear weights (bytes)    ratio   test loss  accuracy\n");
    printf("%-28s %22" PRIu64 " %7.1fx %11.6f %8.2f%%\n", "trained (fp32)", dense / 8, 1.0,
           r->loss[0], 100.0 * r->accuracy[0]);
    printf("%-28s %22" PRIu64 " %7.1fx %11.6f %8.2f%%\n", "pruned (+ relative indices)",
           (pruned + 7) / 8, (double)dense / (double)pruned, r->loss[1], 100.0 * r->accuracy[1]);
    printf("%-28s %22" PRIu64 " %7.1fx %11.6f %8.2f%%\n", "+ shared weights (k-means)",
           (shared + 7) / 8, (double)dense / (double)shared, r->loss[2], 100.0 * r->accuracy[2]);
    printf("%-28s %22" PRIu64 " %7.1fx %11.6f %8.2f%%\n", "+ fine-tuned centroids",
           (shared + 7) / 8, (double)dense / (double)shared, r->loss[3], 100.0 * r->accuracy[3]);
    printf("%-28s %22" PRIu64 " %7.1fx %11.6f %8.2f%%\n", "+ Huffman coding", (coded + 7) / 8,
           (double)dense / (double)coded, r->loss[3], 100.0 * r->accuracy[3]);
    printf("test accuracy %.2f%% before, %.2f%% after (%+.2f points) on the test images of "
           "--data %s\n", 100.0 * r->accuracy[0], 100.0 * r->accuracy[3],
           100.0 * (r->accuracy[3] - r->accuracy[0]), o->data);
}

static int zs_dcli_compress(zs_dcli *c)
{
    zs_model_src src;
    ZS_TRY(zs_model_src_load(c->from, "--from", c->heads, &src));
    if (!c->has_seed && src.has_seed)
        c->o.seed = src.seed;
    c->o.log = stdout;
    if (c->o.n_layer_sparsity) {
        printf("# zerosim compress %s: %zu parameters; prune ", c->from, src.n);
        for (int l = 0; l < c->o.n_layer_sparsity; l++)
            printf("%s%.4f", l ? "," : "", c->o.layer_sparsity[l]);
        printf(" of the linear weights");
    } else {
        printf("# zerosim compress %s: %zu parameters; prune %.4f of each linear weight",
               c->from, src.n, c->o.sparsity);
    }
    printf(" in %d rounds of %d retraining steps, %d shared weights per layer, %d-bit relative "
           "indices, %d fine-tuning steps\n", c->o.prune_rounds,
           c->o.retrain_steps, 1 << c->o.bits, c->o.index_bits, c->o.finetune_steps);
    zs_dc_result r;
    int rc = zs_dc_compress(&src.mc, src.params, &c->o, c->out, &r);
    if (!rc) {
        zs_dcli_table(&r);
        if (c->o.data)
            zs_dcli_stages(&c->o, &r);
        else if (c->o.eval_samples)
            printf("held-out loss (%d samples, seed %" PRIu64 "): before %.6f, pruned %.6f, "
                   "shared %.6f, fine-tuned %.6f (%+.2f%% against before)\n", c->o.eval_samples,
                   c->o.seed, r.loss[0], r.loss[1], r.loss[2], r.loss[3],
                   100.0 * (r.loss[3] - r.loss[0]) / r.loss[0]);
        printf("param_hash %s\nwrote %s\n", r.param_hash, c->out);
        zs_dc_result_free(&r);
    }
    zs_model_src_free(&src);
    return rc;
}

static int zs_dcli_decompress(const zs_dcli *c)
{
    zs_model_config mc;
    uint64_t seed;
    float *p;
    zs_dc_result r;
    ZS_TRY(zs_dc_read(c->from, &mc, &seed, &p, &r));
    zs_dcli_table(&r);
    int rc = 0;
    if (c->o.eval_samples) {
        double loss, floor;
        rc = zs_eval_loss(&mc, seed, p, NULL, c->o.eval_samples, c->o.micro_batch, &loss, &floor, NULL);
        if (!rc)
            printf("held-out loss (%d samples, seed %" PRIu64 "): %.6f\n", c->o.eval_samples,
                   seed, loss);
    }
    if (!rc)
        printf("param_hash %s\n", r.param_hash);
    free(p);
    zs_dc_result_free(&r);
    return rc;
}

static int zs_dcli_main(int argc, char **argv, int comp)
{
    const char *name = comp ? "compress" : "decompress";
    zs_dcli c;
    int help;
    if (zs_dcli_parse(argc, argv, comp, &c, &help)) {
        fprintf(stderr, "zerosim %s: %s\n", name, zs_error_msg());
        return 2;
    }
    if (help) {
        fputs(comp ? zs_compress_usage : zs_decompress_usage, stdout);
        return 0;
    }
    if (comp ? zs_dcli_compress(&c) : zs_dcli_decompress(&c)) {
        fflush(stdout);
        fprintf(stderr, "zerosim %s: %s\n", name, zs_error_msg());
        return 1;
    }
    return 0;
}

int zs_cmd_compress(int argc, char **argv) { return zs_dcli_main(argc, argv, 1); }
int zs_cmd_decompress(int argc, char **argv) { return zs_dcli_main(argc, argv, 0); }
