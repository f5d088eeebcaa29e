/* zerosim — `zerosim tokens` (a text file as byte-level token files) and
 * `zerosim sample` (text from a trained decoder): argument parsing only;
 * the work is zs_tokfile_write_bytes's (src/io/tokfile.c) and
 * zs_eval_sample's (src/run/eval.c). */
#include "text_cmd.h"
#include "cli_num.h"
#include "zerosim/error.h"
#include "zerosim/eval.h"
#include "zerosim/tokfile.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const zs_tokens_usage =
    "usage: zerosim tokens TEXT --out FILE [--val-out FILE [--val-fraction F]]\n"
    "                      [--bits 16|32]\n"
    "\n"
    "Tokenise a text file byte by byte (byte b is token b: a vocabulary of 256, no\n"
    "tokenizer to download) into a token file in llm.c's format, which zerosim train\n"
    "reads with --data and --val-data (train with --vocab 256). Files are written\n"
    "atomically and marked byte-level, so a held-out loss on them is also given in\n"
    "bits per byte (docs/text.md, docs/file-formats.md).\n"
    "  --out FILE               the training tokens\n"
    "  --val-out FILE           the held-out tokens: the text's last --val-fraction\n"
    "  --val-fraction F         the share of the text held out, in (0, 1) (0.1)\n"
    "  --bits 16|32             16: llm.c's GPT-2 files (magic 20240520, version 1,\n"
    "                           uint16 tokens); 32: its Llama 3 files (magic\n"
    "                           20240801, version 7, uint32 tokens) (16)\n";

static const char *const zs_sample_usage =
    "usage: zerosim sample --from CKPT|FILE --prompt TEXT --tokens N\n"
    "                      [--temperature T] [--seed S] [--heads H]\n"
    "\n"
    "Continue a prompt with a trained GPT or dense Llama, one token at a time, and\n"
    "print the prompt and the continuation (a Llama's weights file; its training\n"
    "checkpoint is not read yet).\n"
    "The prompt's bytes are its tokens and tokens below 256 are printed as bytes:\n"
    "the byte-level vocabulary of zerosim tokens (a token of 256 or more is\n"
    "printed as <N>). The context is the last --seq tokens. One process, the cpu\n"
    "backend (docs/text.md).\n"
    "  --from CKPT|FILE         a checkpoint (--save-dir of a tp = 1 run, or one of its\n"
    "                           global_step folders), GPT or Llama weights\n"
    "                           (.safetensors, llm.c .bin), a quantized (.zq) or\n"
    "                           compressed (.zc) file\n"
    "  --prompt TEXT            the text to continue (at least one byte)\n"
    "  --tokens N               tokens to generate\n"
    "  --temperature T          0: greedy, the most probable token each time;\n"
    "                           T > 0: token k with probability p_k^(1/T) / sum_j\n"
    "                           p_j^(1/T), softmax(logits / T) (1)\n"
    "  --seed S                 the draws of temperature sampling: the same seed, the\n"
    "                           same text (1)\n"
    "  --heads H                attention heads of a weights file that does not say\n";

/* ---- zerosim tokens ----------------------------------------------------------------- */

enum { TO_OUT = 1, TO_VAL_OUT, TO_VAL_FRACTION, TO_BITS, TO_HELP };

static int zs_tokens_parse(int argc, char **argv, zs_tokfile_request *rq, int *help)
{
    static const struct option opts[] = {
        {"out", required_argument, NULL, TO_OUT},
        {"val-out", required_argument, NULL, TO_VAL_OUT},
        {"val-fraction", required_argument, NULL, TO_VAL_FRACTION},
        {"bits", required_argument, NULL, TO_BITS},
        {"help", no_argument, NULL, TO_HELP},
        {NULL, 0, NULL, 0},
    };
    memset(rq, 0, sizeof *rq);
    rq->token_bits = 16;
    *help = 0;
    optind = 1;
    opterr = 0;
    int ch, has_fraction = 0;
    double v;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'h': case TO_HELP: *help = 1; return 0;
        case TO_OUT: rq->out = optarg; break;
        case TO_VAL_OUT: rq->val_out = optarg; break;
        case TO_VAL_FRACTION:
            ZS_TRY(zs_cli_parse_number("--val-fraction", optarg, 1e-9, 1.0 - 1e-9, &v));
            rq->val_fraction = v;
            has_fraction = 1;
            break;
        case TO_BITS:
            if (strcmp(optarg, "16") && strcmp(optarg, "32"))
                ZS_FAIL("--bits is 16 or 32 (the token's width in the file), got \"%s\"",
                        optarg);
            rq->token_bits = atoi(optarg);
            break;
        default:
            ZS_FAIL("%s %s (see zerosim tokens --help)",
                    optopt ? "option needs a value or is unknown:" : "unknown option",
                    argv[optind - 1]);
        }
    }
    if (optind >= argc)
        ZS_FAIL("give the text file to tokenise: zerosim tokens TEXT --out FILE");
    rq->text = argv[optind++];
    if (optind < argc)
        ZS_FAIL("unexpected argument \"%s\" after the text file %s (see zerosim tokens "
                "--help)", argv[optind], rq->text);
    if (!rq->out)
        ZS_FAIL("give --out FILE, the token file to write");
    if (has_fraction && !rq->val_out)
        ZS_FAIL("--val-fraction needs --val-out FILE, the held-out tokens' file");
    if (rq->val_out && !has_fraction)
        rq->val_fraction = 0.1;
    return 0;
}

int zs_cmd_tokens(int argc, char **argv)
{
    zs_tokfile_request rq;
    int help;
    if (zs_tokens_parse(argc, argv, &rq, &help)) {
        fprintf(stderr, "zerosim tokens: %s\n", zs_error_msg());
        return 2;
    }
    if (help) {
        fputs(zs_tokens_usage, stdout);
        return 0;
    }
    zs_tokfile_stats st;
    if (zs_tokfile_write_bytes(&rq, &st)) {
        fprintf(stderr, "zerosim tokens: %s\n", zs_error_msg());
        return 1;
    }
    printf("wrote %s: %" PRIu64 " tokens (bytes 0..%" PRIu64 " of %s), %d-bit, %" PRIu64
           " bytes\n", rq.out, st.train_tokens, st.train_tokens - 1, rq.text, rq.token_bits,
           st.train_file_bytes);
    if (rq.val_out)
        printf("wrote %s: %" PRIu64 " held-out tokens (bytes %" PRIu64 "..%" PRIu64 "), %d-bit, "
               "%" PRIu64 " bytes\n", rq.val_out, st.val_tokens, st.train_tokens,
               st.text_bytes - 1, rq.token_bits, st.val_file_bytes);
    printf("byte-level: vocabulary 256 (train with --vocab 256; a held-out loss of L nats "
           "is L / ln 2 bits per byte)\n");
    return 0;
}

/* ---- zerosim sample ----------------------------------------------------------------- */

enum { SO_FROM = 1, SO_PROMPT, SO_TOKENS, SO_TEMPERATURE, SO_SEED, SO_HEADS, SO_HELP };

typedef struct {
    const char *from, *prompt;
    long tokens, heads;
    double temperature;
    uint64_t seed;
} zs_sample_cli;

static int zs_sample_parse(int argc, char **argv, zs_sample_cli *c, int *help)
{
    static const struct option opts[] = {
        {"from", required_argument, NULL, SO_FROM},
        {"prompt", required_argument, NULL, SO_PROMPT},
        {"tokens", required_argument, NULL, SO_TOKENS},
        {"temperature", required_argument, NULL, SO_TEMPERATURE},
        {"seed", required_argument, NULL, SO_SEED},
        {"heads", required_argument, NULL, SO_HEADS},
        {"help", no_argument, NULL, SO_HELP},
        {NULL, 0, NULL, 0},
    };
    memset(c, 0, sizeof *c);
    c->temperature = 1.0;
    c->seed = 1;
    *help = 0;
    optind = 1;
    opterr = 0;
    int ch;
    long v;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'h': case SO_HELP: *help = 1; return 0;
        case SO_FROM: c->from = optarg; break;
        case SO_PROMPT: c->prompt = optarg; break;
        case SO_TOKENS: ZS_TRY(zs_cli_parse_long("--tokens", optarg, 1, 1L << 20, &c->tokens)); break;
        case SO_TEMPERATURE:
            ZS_TRY(zs_cli_parse_number("--temperature", optarg, 0.0, 100.0, &c->temperature));
            break;
        case SO_SEED:
            ZS_TRY(zs_cli_parse_long("--seed", optarg, 0, LONG_MAX, &v));
            c->seed = (uint64_t)v;
            break;
        case SO_HEADS: ZS_TRY(zs_cli_parse_long("--heads", optarg, 1, 1L << 20, &c->heads)); break;
        default:
            ZS_FAIL("%s %s (see zerosim sample --help)",
                    optopt ? "option needs a value or is unknown:" : "unknown option",
                    argv[optind - 1]);
        }
    }
    if (optind < argc)
        ZS_FAIL("unexpected argument \"%s\" (see zerosim sample --help)", argv[optind]);
    if (!c->from)
        ZS_FAIL("give the model: --from CKPT|FILE (see zerosim sample --help)");
    if (!c->prompt || !*c->prompt)
        ZS_FAIL("give --prompt TEXT, at least one byte to continue");
    if (!c->tokens)
        ZS_FAIL("give --tokens N, how many tokens to generate");
    return 0;
}

/* Token t as text: a byte below 256, else <t>. */
static void zs_sample_put(int32_t t)
{
    if (t < 256)
        putchar(t);
    else
        printf("<%d>", (int)t);
}

static int zs_sample_run(const zs_sample_cli *c)
{
    zs_model_src src;
    ZS_TRY(zs_model_src_load(c->from, "--from", (int)c->heads, &src));
    size_t np = strlen(c->prompt);
    zs_eval_sample_req rq = {.n_prompt = (int)np, .n_new = (int)c->tokens,
                             .temperature = c->temperature, .seed = c->seed};
    int32_t *prompt = malloc(np * sizeof(int32_t) + 1);
    int32_t *out = malloc((size_t)c->tokens * sizeof(int32_t));
    int rc = !prompt || !out ? zs_error_set("out of host memory for %ld tokens", c->tokens) : 0;
    if (!rc && np > (size_t)INT_MAX / 2)
        rc = zs_error_set("--prompt holds %zu bytes, too many", np);
    for (size_t i = 0; !rc && i < np; i++)
        prompt[i] = (unsigned char)c->prompt[i];
    rq.prompt = prompt;
    if (!rc)
        rc = zs_eval_sample(&src.mc, src.params, &rq, out);
    if (!rc) {
        fputs(c->prompt, stdout);
        for (long k = 0; k < c->tokens; k++)
            zs_sample_put(out[k]);
        putchar('\n');
    }
    free(prompt);
    free(out);
    zs_model_src_free(&src);
    return rc;
}

int zs_cmd_sample(int argc, char **argv)
{
    zs_sample_cli c;
    int help;
    if (zs_sample_parse(argc, argv, &c, &help)) {
        fprintf(stderr, "zerosim sample: %s\n", zs_error_msg());
        return 2;
    }
    if (help) {
        fputs(zs_sample_usage, stdout);
        return 0;
    }
    if (zs_sample_run(&c)) {
        fflush(stdout);
        fprintf(stderr, "zerosim sample: %s\n", zs_error_msg());
        return 1;
    }
    return 0;
}
