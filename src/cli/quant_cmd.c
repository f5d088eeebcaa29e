/* zerosim — `zerosim quantize` and `zerosim eval`: post-training
 * quantization of a trained model's weights, and the held-out loss and
 * bytes of a model in each weight format (docs/quantization.md). */
#include "quant_cmd.h"
#include "cli_num.h"
#include "zerosim/data.h"
#include "zerosim/error.h"
#include "zerosim/eval.h"
#include "zerosim/quant.h"
#include "zerosim/quantfile.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const zs_quantize_usage =
    "usage: zerosim quantize --from CKPT|FILE --format int8|int8-zp|nf4 --out FILE\n"
    "                        [--block B | --per-channel] [--double-quant]\n"
    "\n"
    "Quantize the weights of the linear layers of a trained model (biases,\n"
    "LayerNorms and embeddings stay fp32) and write one safetensors file,\n"
    "atomically. Prints the bytes of the fp32 model and of the quantized one and\n"
    "the loss of each on held-out samples of the run's synthetic task.\n"
    "  --from CKPT|FILE         a checkpoint (--save-dir of a tp = 1 run, or one of its\n"
    "                           global_step folders), GPT or dense Llama weights\n"
    "                           (.safetensors from zerosim export, llm.c .bin) or a\n"
    "                           quantized file\n"
    "  --format F               int8 (absmax), int8-zp (zero-point) or nf4\n"
    "  --block B                one scale per B consecutive weights (nf4: 64)\n"
    "  --per-channel            one scale per output channel (row)\n"
    "                           (neither: one scale per tensor; nf4: blocks of 64)\n"
    "  --double-quant           nf4: the block scales in 8 bits, blocks of 256\n"
    "  --out FILE               the quantized file (.safetensors)\n"
    "  --samples N              held-out samples for the loss (256; 0: no loss)\n"
    "  --micro-batch B          samples per forward (8; 500 with --data)\n"
    "  --data DIR|fashion-mnist the MLP: the loss and the accuracy on an image set's\n"
    "                           test images, all of them (IDX files, as train's\n"
    "                           --data; docs/data.md), instead of synthetic samples\n"
    "  --seed S                 the synthetic task's seed (the checkpoint's or the\n"
    "                           quantized file's; else 1234, train's default)\n"
    "  --heads H                attention heads of a weights file that does not say\n";

static const char *const zs_eval_usage =
    "usage: zerosim eval --from CKPT|FILE [--formats] [--samples N] [--seed S]\n"
    "\n"
    "The loss of a model on held-out samples of its synthetic task (indices from\n"
    "2^40, which no run trains on), or with --data the loss and accuracy on an\n"
    "image set's test images, and its bytes. With --formats, the same for the\n"
    "model quantized in memory in each format: int8 per tensor and per channel,\n"
    "int8-zp per channel, nf4 blocks of 64 with and without double quantization.\n"
    "  --from, --samples, --micro-batch, --data, --seed, --heads as zerosim\n"
    "                           quantize's\n";

enum { QO_FROM = 1, QO_FORMAT, QO_BLOCK, QO_PER_CHANNEL, QO_DQ, QO_OUT, QO_SAMPLES, QO_MB,
       QO_SEED, QO_HEADS, QO_FORMATS, QO_DATA, QO_HELP, QO_N };

typedef struct {
    const char *from, *out;
    const char *data;     /* --data: an image set's test images, or NULL */
    int has_samples, has_mb;
    zs_quant_spec spec;
    int formats;
    long samples, mb, heads;
    int has_seed;
    uint64_t seed;
} zs_qcli;

static int zs_qcli_parse(int argc, char **argv, int quantize, zs_qcli *c, int *help)
{
    static const struct option opts[] = {
        {"from", required_argument, NULL, QO_FROM},
        {"format", required_argument, NULL, QO_FORMAT},
        {"block", required_argument, NULL, QO_BLOCK},
        {"per-channel", no_argument, NULL, QO_PER_CHANNEL},
        {"double-quant", no_argument, NULL, QO_DQ},
        {"out", required_argument, NULL, QO_OUT},
        {"samples", required_argument, NULL, QO_SAMPLES},
        {"micro-batch", required_argument, NULL, QO_MB},
        {"seed", required_argument, NULL, QO_SEED},
        {"heads", required_argument, NULL, QO_HEADS},
        {"formats", no_argument, NULL, QO_FORMATS},
        {"data", required_argument, NULL, QO_DATA},
        {"help", no_argument, NULL, QO_HELP},
        {NULL, 0, NULL, 0},
    };
    memset(c, 0, sizeof *c);
    c->samples = 256;
    c->mb = 8;
    *help = 0;
    optind = 1;
    opterr = 0;
    int ch;
    long v;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int only_q = ch == QO_FORMAT || ch == QO_BLOCK || ch == QO_PER_CHANNEL || ch == QO_DQ ||
                     ch == QO_OUT;
        if ((only_q && !quantize) || (ch == QO_FORMATS && quantize))
            ZS_FAIL("%s is not an option of zerosim %s (see zerosim %s --help)", argv[optind - 1],
                    quantize ? "quantize" : "eval", quantize ? "quantize" : "eval");
        switch (ch) {
        case 'h': case QO_HELP: *help = 1; return 0;
        case QO_FROM: c->from = optarg; break;
        case QO_OUT: c->out = optarg; break;
        case QO_FORMAT: ZS_TRY(zs_quant_format_parse(optarg, &c->spec.format)); break;
        case QO_BLOCK:
            ZS_TRY(zs_cli_parse_long("--block", optarg, 1, 1L << 30, &v));
            c->spec.block = (size_t)v;
            break;
        case QO_PER_CHANNEL: c->spec.per_channel = 1; break;
        case QO_DQ: c->spec.double_quant = 1; break;
        case QO_SAMPLES:
            ZS_TRY(zs_cli_parse_long("--samples", optarg, 0, 1L << 20, &c->samples));
            c->has_samples = 1;
            break;
        case QO_MB:
            ZS_TRY(zs_cli_parse_long("--micro-batch", optarg, 1, 4096, &c->mb));
            c->has_mb = 1;
            break;
        case QO_DATA: c->data = optarg; break;
        case QO_HEADS: ZS_TRY(zs_cli_parse_long("--heads", optarg, 1, 1L << 20, &c->heads)); break;
        case QO_SEED:
            ZS_TRY(zs_cli_parse_long("--seed", optarg, 0, LONG_MAX, &v));
            c->seed = (uint64_t)v;
            c->has_seed = 1;
            break;
        case QO_FORMATS: c->formats = 1; break;
        default:
            ZS_FAIL("%s %s (see zerosim %s --help)",
                    optopt ? "option needs a value or is unknown:" : "unknown option",
                    argv[optind - 1], quantize ? "quantize" : "eval");
        }
    }
    if (optind < argc)
        ZS_FAIL("unexpected argument \"%s\" (see zerosim %s --help)", argv[optind],
                quantize ? "quantize" : "eval");
    if (!c->from)
        ZS_FAIL("give the model: --from CKPT|FILE (see zerosim %s --help)",
                quantize ? "quantize" : "eval");
    if (quantize) {
        if (c->spec.format == ZS_QUANT_NONE)
            ZS_FAIL("give --format int8, int8-zp or nf4");
        if (!c->out)
            ZS_FAIL("give --out FILE, the quantized file to write");
        ZS_TRY(zs_quant_spec_finalize(&c->spec));
    }
    if (c->data && c->has_samples)
        ZS_FAIL("--samples counts synthetic samples; --data %s evaluates every test image: "
                "give one of them", c->data);
    if (c->data && !c->has_mb)
        c->mb = 500;
    if (!c->data && c->samples % c->mb)
        ZS_FAIL("--samples %ld must be a multiple of --micro-batch %ld", c->samples, c->mb);
    return 0;
}

static void zs_qcli_model_line(const zs_model_src *s, const char *path)
{
    const zs_model_config *m = &s->mc;
    if (m->kind == ZS_MODEL_GPT)
        printf("# model: %s (%s), GPT layers %d hidden %d heads %d seq %d vocab %d, %zu "
               "parameters\n", path, s->kind, m->n_layer, m->n_embd, m->n_head, m->seq_len,
               m->vocab, s->n);
    else if (m->kind == ZS_MODEL_LLAMA)
        printf("# model: %s (%s), Llama layers %d hidden %d heads %d kv-heads %d ffn-hidden %d "
               "seq %d vocab %d, %zu parameters\n", path, s->kind, m->n_layer, m->n_embd,
               m->n_head, m->n_kv_head > 0 ? m->n_kv_head : m->n_head, m->ffn_hidden,
               m->seq_len, m->vocab, s->n);
    else {
        printf("# model: %s (%s), MLP %d", path, s->kind, m->input_dim);
        for (int i = 0; i < m->n_hidden; i++)
            printf("-%d", m->widths[i]);
        printf("-%d, %zu parameters\n", m->n_classes, s->n);
    }
}

/* One row: the format, its bytes, bits per quantized parameter, loss and,
 * on an image set, accuracy (acc NaN: none). */
static void zs_qcli_row(const char *name, uint64_t bytes, double bits, double loss,
                        double loss0, double acc, double acc0, int with_loss)
{
    printf("%-34s %14" PRIu64 " %10.3f", name, bytes, bits);
    if (with_loss)
        printf(" %12.6f %+12.6f", loss, loss - loss0);
    if (with_loss && !isnan(acc))
        printf(" %8.2f%% %+8.2f", 100.0 * acc, 100.0 * (acc - acc0));
    printf("\n");
}

static void zs_qcli_header(const zs_qcli *c, uint64_t seed, double floor, uint64_t images,
                           int with_loss)
{
    if (with_loss && c->data)
        printf("# test loss and accuracy: the %" PRIu64 " test images of --data %s\n", images,
               c->data);
    else if (with_loss)
        printf("# held-out loss: %ld samples of the synthetic task (seed %" PRIu64
               ", from sample 2^40); loss floor %.6f\n", c->samples, seed, floor);
    printf("# %-32s %14s %10s%s%s\n", "format", "bytes", "bits/w", with_loss ?
           "         loss   vs fp32" : "", with_loss && c->data ? "  accuracy  vs fp32" : "");
    printf("# (bytes: the whole model, fp32 entries included; bits/w: per quantized weight,\n"
           "#  scales and zero points included%s)\n",
           with_loss && c->data ? "; accuracy in %, its change in points" : "");
}

/* The loss of src's parameters held as q says (NULL: fp32): on synthetic
 * samples, or with data on its test images, with their accuracy (else NaN). */
static int zs_qcli_eval(const zs_qcli *c, const zs_model_src *src, const zs_data *data,
                        uint64_t seed, const zs_quant_spec *q, double *loss, double *acc,
                        double *floor, zs_mem_stats *ms)
{
    *acc = NAN;
    if (!data)
        return zs_eval_loss(&src->mc, seed, src->params, q, (int)c->samples, (int)c->mb, loss,
                            floor, ms);
    zs_eval_score sc;
    ZS_TRY(zs_eval_split(&src->mc, data, ZS_DATA_TEST, src->params, q, (int)c->mb, &sc, ms));
    *loss = sc.loss;
    *acc = sc.accuracy;
    *floor = NAN;
    return 0;
}

/* The evaluation's ledger at its peak: what an inference holds. */
static void zs_qcli_ledger(const char *name, const zs_mem_stats *ms)
{
    printf("# ledger (%s): peak %zu bytes = quantized_weights %zu + params %zu + workspace %zu "
           "+ activations %zu\n", name, ms->total_peak, ms->at_total_peak[ZS_MEM_QUANTIZED],
           ms->at_total_peak[ZS_MEM_PARAMS], ms->at_total_peak[ZS_MEM_WORKSPACE],
           ms->at_total_peak[ZS_MEM_ACTIVATIONS]);
}

static int zs_qcli_run(const zs_qcli *c, int quantize)
{
    zs_model_src src;
    ZS_TRY(zs_model_src_load(c->from, "--from", (int)c->heads, &src));
    uint64_t seed = c->has_seed ? c->seed : src.has_seed ? src.seed : 1234;
    int with_loss = c->samples > 0 || c->data;
    double loss0 = 0.0, acc0 = NAN, floor = 0.0;
    int rc = 0;
    zs_mem_stats ms;
    zs_data *data = NULL;
    if (c->data && src.mc.kind != ZS_MODEL_MLP)
        rc = zs_error_set("--data %s: image sets are the MLP's; %s is a GPT (its loss is on "
                          "synthetic samples: drop --data)", c->data, c->from);
    if (!rc && c->data)
        rc = zs_data_create_images(&src.mc, seed, c->data, &data);
    if (!rc && with_loss)
        rc = zs_qcli_eval(c, &src, data, seed, NULL, &loss0, &acc0, &floor, &ms);
    float *dq = rc ? NULL : malloc(src.n * 4 + 1);
    if (!rc && !dq)
        rc = zs_error_set("out of host memory quantizing %s", c->from);
    if (!rc) {
        zs_qcli_model_line(&src, c->from);
        zs_qcli_header(c, seed, floor, data ? zs_data_split_size(data, ZS_DATA_TEST) : 0,
                       with_loss);
        zs_qcli_row("fp32", 4 * (uint64_t)src.n, 32.0, loss0, loss0, acc0, acc0, with_loss);
        if (with_loss)
            zs_qcli_ledger("fp32", &ms);
    }
    static const zs_quant_spec all[] = {
        {ZS_QUANT_INT8, 0, 0, 0}, {ZS_QUANT_INT8, 0, 1, 0}, {ZS_QUANT_INT8_ZP, 0, 1, 0},
        {ZS_QUANT_NF4, 64, 0, 0}, {ZS_QUANT_NF4, 64, 0, 1},
    };
    int nspec = quantize ? 1 : c->formats ? (int)(sizeof all / sizeof all[0]) : 0;
    for (int k = 0; k < nspec && !rc; k++) {
        zs_quant_spec s = quantize ? c->spec : all[k];
        zs_qfile_stats st;
        rc = quantize ? zs_qfile_write(c->out, &src.mc, seed, &s, src.params, dq, &st)
                      : zs_quant_model(&src.mc, &s, src.params, dq, &st);
        double loss = 0.0, acc = NAN;
        /* the linear weights held quantized, dequantized a unit at a time */
        if (!rc && with_loss)
            rc = zs_qcli_eval(c, &src, data, seed, &s, &loss, &acc, &floor, &ms);
        if (rc)
            break;
        char name[96];
        zs_quant_spec_describe(&s, name, sizeof name);
        zs_qcli_row(name, st.quantized_bytes + st.other_bytes,
                    8.0 * (double)st.quantized_bytes / (double)st.quantized_params, loss, loss0,
                    acc, acc0, with_loss);
        if (with_loss)
            zs_qcli_ledger(name, &ms);
        if (quantize)
            printf("# quantized %zu of %zu parameters (the linear layers' weights); wrote %s, "
                   "%" PRIu64 " bytes (safetensors header included)\n", st.quantized_params,
                   src.n, c->out, st.file_bytes);
    }
    free(dq);
    zs_data_destroy(data);
    zs_model_src_free(&src);
    return rc;
}

static int zs_qcli_main(int argc, char **argv, int quantize)
{
    const char *name = quantize ? "quantize" : "eval";
    zs_qcli c;
    int help;
    if (zs_qcli_parse(argc, argv, quantize, &c, &help)) {
        fprintf(stderr, "zerosim %s: %s\n", name, zs_error_msg());
        return 2;
    }
    if (help) {
        fputs(quantize ? zs_quantize_usage : zs_eval_usage, stdout);
        return 0;
    }
    if (zs_qcli_run(&c, quantize)) {
        fflush(stdout);
        fprintf(stderr, "zerosim %s: %s\n", name, zs_error_msg());
        return 1;
    }
    return 0;
}

int zs_cmd_quantize(int argc, char **argv) { return zs_qcli_main(argc, argv, 1); }
int zs_cmd_eval(int argc, char **argv) { return zs_qcli_main(argc, argv, 0); }
