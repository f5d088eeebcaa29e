/* zerosim — the command-line program: main() dispatches to each command,
 * and zs_cmd_train runs `zerosim train` and `zerosim export` (their options
 * are parsed in train_cmd.c).
 *
 *   zerosim train [options]     train a model (see --help)
 *   zerosim --help | --version
 *
 * Options are applied after the --config file, so they override it. Only
 * main() prints errors and exits.
 */
#include "build-config.h"
#include "cli/bench.h"
#include "zerosim/backend.h"
#include "zerosim/comm.h"
#include "zerosim/config.h"
#include "zerosim/compat.h"
#include "zerosim/error.h"
#include "zerosim/mem.h"
#include "zerosim/model.h"
#include "zerosim/program.h"
#include "zerosim/report.h"
#include "zerosim/train.h"
#include "zerosim/weights.h"
#include "compare_cmd.h"
#include "quant_cmd.h"
#include "deepcomp_cmd.h"
#include "plan_cmd.h"
#include "mesh_cmd.h"
#include "text_cmd.h"
#include "train_cmd.h"
#include "usage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* With --ep: which of the engine's two layouts the run took, and why
 * (zs_step_ep_split, zerosim/program.h). */
static void zs_print_ep_layout(FILE *f, const zs_run_config *cfg, int world)
{
    if (cfg->ep <= 1)
        return;
    int T = cfg->tp > 1 ? cfg->tp : 1, P = cfg->pp > 1 ? cfg->pp : 1, D = world / (T * P);
    const char *why = NULL;
    if (zs_step_ep_split(cfg, D, &why))
        fprintf(f, "expert parallelism --ep %d: DeepSpeed's layout, each rank the dense "
                "parameters and %d of %d experts per MoE block, their states over "
                "expert-data-parallel groups of %d%s\n", cfg->ep,
                cfg->model.moe_experts / cfg->ep, cfg->model.moe_experts, D / cfg->ep,
                zs_step_ep_exact(cfg, D) ? ""
                                         : " (--ep-layout deepspeed: the experts' gradients "
                                           "summed over edp as floats, not in --ep 1's order: "
                                           "close to --ep 1, not byte-identical)");
    else
        fprintf(f, "expert parallelism --ep %d: --ep 1's layout, every expert's states on "
                "every rank and the expert gradients sent home (DeepSpeed's layout: not with "
                "%s)\n", cfg->ep, why);
}


/* Whether the arguments ask for a phantom run or the step program (getopt's
 * unambiguous abbreviations included), which must not start MPI; nor must
 * --help or -h outside mpirun (under it, rank 0 alone prints the usage). */
static int zs_wants_phantom(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        size_t n = strlen(argv[i]);
        if (!strcmp(argv[i], "--"))
            break;
        if ((!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) &&
            !zs_comm_launcher_size())
            return 1;
        if (n >= 4 && !strncmp(argv[i], "--phantom", n))
            return 1;
        if (n >= 4 && !strncmp(argv[i], "--print-program", n))
            return 1;
        if (n >= 9 && !strncmp(argv[i], "--print-config", n))
            return 1;
    }
    return 0;
}

/* The step program of rank 0 of cfg on `world` ranks, one op a line. */
static int zs_print_program_one(const zs_run_config *cfg, int world, FILE *f)
{
    zs_model *m;
    ZS_TRY(zs_model_create(&cfg->model, &m));
    zs_step_shape s;
    zs_step_program p;
    int rc = zs_step_shape_build(cfg, m, world, &s);
    if (!rc) {
        rc = zs_step_program_build(&s, m, 0, &p);
        if (!rc) {
            zs_step_program_print(&s, &p, f);
            zs_step_program_free(&p);
        }
        zs_step_shape_free(&s);
    }
    zs_model_destroy(m);
    return rc;
}

static int zs_print_program(const zs_run_config *cfg, int world, FILE *f)
{
    if (cfg->pp > 1) { /* each pipeline stage runs its own program */
        for (int st = 0; st < cfg->pp; st++) {
            zs_run_config c = *cfg; /* over the stage's data-parallel ranks */
            ZS_TRY(zs_pp_stage_config(&c, st));
            ZS_TRY(zs_print_program_one(&c, world / (cfg->pp * (cfg->tp > 1 ? cfg->tp : 1)), f));
        }
        return 0;
    }
    return zs_print_program_one(cfg, world, f);
}

static int zs_print_notices_stage(const zs_run_config *cfg, int dp_world, FILE *f);

/* Rank 0's notices before training: stage-3 units larger than
 * stage3_max_live_parameters, which are gathered alone. */
static int zs_print_notices(const zs_run_config *cfg, int dp_world, FILE *f)
{
    if (cfg->stage != 3)
        return 0;
    int rc = 0;
    for (int st = 0; st < (cfg->pp > 1 ? cfg->pp : 1) && !rc; st++) {
        zs_run_config c = *cfg; /* a pipeline: each stage's units */
        if (cfg->pp > 1 && (rc = zs_pp_stage_config(&c, st)))
            break;
        rc = zs_print_notices_stage(&c, dp_world, f);
    }
    return rc;
}

static int zs_print_notices_stage(const zs_run_config *cfg, int dp_world, FILE *f)
{
    zs_model *m;
    ZS_TRY(zs_model_create(&cfg->model, &m));
    zs_step_shape s;
    int rc = zs_step_shape_build(cfg, m, dp_world, &s);
    if (!rc) {
        int first, n = zs_step_shape_units_over_bound(&s, &first);
        if (n > 0) {
            char name[64]; /* the GPT's units: embeddings, blocks, head */
            if (!zs_model_is_decoder(&cfg->model))
                snprintf(name, sizeof name, "layer %d", first);
            else if (first == 0 || first == s.U - 1)
                snprintf(name, sizeof name, "%s", first == 0 ? "embeddings" : "head");
            else
                snprintf(name, sizeof name, "block %d", first - 1);
            fprintf(f, "stage 3: unit '%s' holds %zu parameters, more than "
                    "stage3_max_live_parameters (%zu): it is gathered alone, as DeepSpeed does",
                    name, s.gelems[first], cfg->stage3_max_live_parameters);
            if (n > 1)
                fprintf(f, " (and so are %d more units of the %d)", n - 1, s.U);
            fputc('\n', f);
        }
        zs_step_shape_free(&s);
    }
    zs_model_destroy(m);
    return rc;
}

/* --print-config (print_program 2) and --print-program (1): what the run
 * would be, without running it. Returns the exit code. */
static int zs_train_print_setup(const zs_run_config *cfg, int world, int print_program)
{
    if (print_program == 2) {
        char *text = zs_run_config_json(cfg);
        if (text)
            printf("%s\n", text);
        else
            fprintf(stderr, "zerosim: out of host memory\n");
        free(text);
        return text ? 0 : 1;
    }
    int rc = zs_print_program(cfg, world, stdout);
    if (rc)
        fprintf(stderr, "zerosim: %s\n", zs_error_msg());
    return rc ? 1 : 0;
}

/* Rank 0's lines before training: what the configuration became, then the
 * run in one line and the stage-3 notices. */
static void zs_train_print_start(const zs_run_config *cfg, const zs_train_options *o, int world,
                                 int phantom)
{
    if (cfg->auto_mask) {
        char buf[2048];
        fprintf(o->log, "config: \"auto\" became %s\n",
                zs_run_config_describe_auto(cfg, buf, sizeof buf));
    }
    if (cfg->noeffect[0])
        fprintf(o->log, "config: accepted with no effect in zerosim: %s\n", cfg->noeffect);
    if (cfg->adjusted[0])
        fprintf(o->log, "config: adjusted: %s\n", cfg->adjusted);
    if (o->no_steps)
        return;
    const char *reduce = "";
    if (cfg->grad_reduce == ZS_GRAD_REDUCE_STEP)
        reduce = cfg->stage <= 1 ? ", gradients reduced once per step (--grad-reduce step)"
                                 : ", --grad-reduce step (no effect in stages 2-3: they "
                                   "reduce every micro-batch)";
    char offl[160] = "";
    if (cfg->offload_optimizer == ZS_OFFLOAD_CPU)
        snprintf(offl, sizeof offl, ", optimizer offloaded to the host");
    else if (cfg->offload_optimizer == ZS_OFFLOAD_NVME)
        snprintf(offl, sizeof offl, ", optimizer offloaded to files in %.100s", cfg->nvme_path);
    fprintf(o->log, "zerosim %s: %s model, %s, ZeRO stage %d on %d %srank%s%s, micro-batch %d x "
            "grad-accum %d x %d%s%s%s, %d steps\n",
            PACKAGE_VERSION, zs_model_kind_name(cfg->model.kind),
            zs_dtype_name(cfg->precision), cfg->stage, world, phantom ? "simulated " : "",
            world == 1 ? "" : "s",
            cfg->deterministic ? " (deterministic)" : "", cfg->micro_batch, cfg->grad_accum,
            world / (cfg->tp * cfg->pp * cfg->cp), cfg->tp * cfg->pp * cfg->cp > 1 ? " data-parallel" : "",
            reduce, offl, cfg->steps);
    if (cfg->cp > 1 && cfg->cp_attention == ZS_CP_ULYSSES)
        fprintf(o->log, "context parallelism: each sample's %d positions over %d ranks (%d "
                "consecutive each, Ulysses: all-to-alls to %d of the %d heads per rank); ZeRO "
                "over the %d ranks of data x context\n", cfg->model.seq_len, cfg->cp,
                cfg->model.seq_len / cfg->cp, cfg->model.n_head / (cfg->tp * cfg->cp),
                cfg->model.n_head / cfg->tp, world / (cfg->tp * cfg->pp));
    else if (cfg->cp > 1)
        fprintf(o->log, "context parallelism: each sample's %d positions over %d ranks (chunks "
                "of %d, ring attention); ZeRO over the %d ranks of data x context\n",
                cfg->model.seq_len, cfg->cp, cfg->model.seq_len / (2 * cfg->cp),
                world / (cfg->tp * cfg->pp));
    if (zs_print_notices(cfg, world / (cfg->tp * cfg->pp), o->log))
        fprintf(stderr, "zerosim: %s\n", zs_error_msg()); /* the run says it again */
}

/* "wrote FILE (format)", or the index of the shards --shard-size wrote. */
static void zs_print_export_path(FILE *log, const zs_train_options *o)
{
    char index[4200];
    snprintf(index, sizeof index, "%s.index.json", o->export_path);
    if (o->export_shard_bytes && access(index, F_OK) == 0) /* written in shards */
        fprintf(log, "wrote %s, the index of shards of at most %llu bytes beside it "
                "(safetensors)", index, (unsigned long long)o->export_shard_bytes);
    else
        fprintf(log, "wrote %s (%s)", o->export_path,
                zs_weights_format_name((zs_weights_format)o->export_format));
}

/* zerosim export's line: what it wrote. */
static void zs_train_print_export(FILE *log, const zs_run_config *cfg, const zs_train_options *o,
                                  const zs_train_result *r)
{
    const zs_model_config *m = &cfg->model;
    zs_print_export_path(log, o);
    if (m->kind == ZS_MODEL_LLAMA)
        fprintf(log, ": a Llama of %d blocks, hidden %d, %d heads, %d key/value heads, "
                "intermediate %d, vocab %d, head %s", m->n_layer, m->n_embd, m->n_head,
                m->n_kv_head, m->ffn_hidden, m->vocab, m->tie_embeddings ? "tied" : "untied");
    else
        fprintf(log, ": a GPT of %d blocks, hidden %d, %d heads, seq %d, vocab %d", m->n_layer,
                m->n_embd, m->n_head, m->seq_len, m->vocab);
    fprintf(log, "; %zu parameters, param_hash %s\n", zs_model_count_params(m), r->param_hash);
}

/* A phantom run's summary: sizes and memory, no values. */
static void zs_train_print_phantom_summary(FILE *log, const zs_run_config *cfg, int world,
                                           const zs_train_result *r)
{
    fprintf(log, "phantom run: %zu parameters%s (padded %zu%s) on %d simulated "
            "ranks, %.2f s; nothing was stored, computed or sent, so there are no "
            "losses and no param_hash; memory and traffic below are what a real run "
            "records\n", r->num_params, cfg->tp > 1 ? " on each tensor-parallel rank" : "",
            r->padded_params, cfg->pp > 1 ? " on pipeline stage 0" : "", world, r->seconds);
    fprintf(log, "peak accounted memory on rank 0: %zu bytes; peak host memory of "
            "this process: %zu bytes\n", r->mem.total_peak, zs_report_peak_rss());
    zs_print_ep_layout(log, cfg, world);
}

/* A real run's summary: parameters, the last steps' mean loss against the
 * floor, the held-out loss, what it wrote, the hash, and MoE routing. */
/* " (B bits per byte)" after a held-out loss on bytes of text, else "". */
static const char *zs_val_bpb_text(const zs_train_result *r, double loss)
{
    static char text[48];
    text[0] = 0;
    if (r->val_byte_level)
        snprintf(text, sizeof text, " (%.4f bits per byte)", loss / M_LN2);
    return text;
}

static void zs_train_print_summary(FILE *log, const zs_run_config *cfg, const zs_train_options *o,
                                   int world, const zs_train_result *r)
{
    int k = r->steps < 10 ? r->steps : 10;
    double last = 0.0;
    for (int i = r->steps - k; i < r->steps; i++)
        last += r->info[i].loss / k;
    if (cfg->tp > 1)
        fprintf(log, "model %zu parameters, %zu on each of the %d tensor-parallel "
                "ranks (below)\n", zs_model_count_params(&cfg->model), r->num_params,
                cfg->tp);
    if (isnan(r->loss_floor)) /* real tokens: no known floor */
        fprintf(log, "parameters %zu (padded %zu), mean loss of the last %d steps "
                "%.4f, loss floor unknown (real data), %.2f s\n", r->num_params,
                r->padded_params, k, last, r->seconds);
    else
        fprintf(log, "parameters %zu (padded %zu), mean loss of the last %d steps "
                "%.4f, loss floor %.4f (%+.1f%%), %.2f s\n", r->num_params,
                r->padded_params, k, last, r->loss_floor,
                r->loss_floor > 0 ? 100.0 * (last - r->loss_floor) / r->loss_floor : 0.0,
                r->seconds);
    if (r->test_loss && r->steps > 0 && !isnan(r->test_loss[r->steps - 1]))
        fprintf(log, "after step %d (the fp32 parameters): held-out loss %.4f, accuracy "
                "%.2f%% (%llu images); test loss %.4f, accuracy %.2f%% (%llu images)\n",
                r->first_step + r->steps, r->val_loss[r->steps - 1],
                100.0 * r->val_accuracy[r->steps - 1], (unsigned long long)r->val_samples,
                r->test_loss[r->steps - 1], 100.0 * r->test_accuracy[r->steps - 1],
                (unsigned long long)r->test_samples);
    else if (r->val_loss && r->steps > 0 && !isnan(r->val_loss[r->steps - 1]))
        fprintf(log, "held-out loss %.4f%s after step %d (%s, samples 0..%d, the fp32 "
                "parameters)\n", r->val_loss[r->steps - 1],
                zs_val_bpb_text(r, r->val_loss[r->steps - 1]), r->steps, o->val_data,
                cfg->train_batch_size - 1);
    if (o->export_path) {
        zs_print_export_path(log, o);
        fprintf(log, "\n");
    }
    fprintf(log, "param_hash %s, peak accounted memory on rank 0: %zu bytes\n",
            r->param_hash, r->mem.total_peak);
    zs_print_ep_layout(log, cfg, world);
    for (int i = 0; i < r->moe_n; i++) { /* routing, rank 0's last micro-batch */
        const zs_moe_stats *st = &r->moe[i];
        fprintf(log, "moe block %d: %d tokens, capacity %d, routed", r->moe_block[i],
                st->tokens, st->capacity);
        for (int j = 0; j < st->experts && j < 256; j++)
            fprintf(log, "%s%d", j ? "," : " ", st->routed[j]);
        fprintf(log, ", dropped %d, l_aux %.4f\n", st->dropped, st->l_aux);
    }
}

/* Rank 0 after a run that succeeded: the summary and tables, then the
 * files. Returns 1 when a file could not be written (said on stderr). */
static int zs_train_finish(const zs_run_config *cfg, const zs_train_options *o, int world,
                           int phantom, const char *report, const char *csv, const char *trace,
                           const zs_train_result *r)
{
    if (o->log && phantom)
        zs_train_print_phantom_summary(o->log, cfg, world, r);
    else if (o->log)
        zs_train_print_summary(o->log, cfg, o, world, r);
    if (o->log)
        zs_report_print(o->log, cfg, r, (zs_report_rows)o->report_rows);
    /* the JSON last: a run whose outputs failed leaves no report */
    if ((trace && zs_report_write_trace(trace, r)) ||
        (csv && zs_report_write_csv(csv, cfg, r)) ||
        (report && zs_report_write_json(report, cfg, r, (zs_report_rows)o->report_rows))) {
        fprintf(stderr, "zerosim: %s\n", zs_error_msg());
        return 1;
    }
    return 0;
}

/* --collective-timeout S (or =S) as given, before MPI and the options are
 * parsed: start-up's deadline (zs_comm_set_startup_timeout). 0 when absent
 * or not a number in the option's range (the parser then refuses it). */
static double zs_early_collective_timeout(int argc, char **argv)
{
    const char *name = "--collective-timeout";
    size_t n = strlen(name);
    double t = 0.0;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], name) && i + 1 < argc)
            v = argv[++i];
        else if (!strncmp(argv[i], name, n) && argv[i][n] == '=')
            v = argv[i] + n + 1;
        char *end;
        double f = v ? strtod(v, &end) : 0.0;
        if (v && *v && !*end && f >= 1e-3 && f <= 1e9)
            t = f;
    }
    return t;
}

/* The communicator: MPI's, or this process alone for a phantom run (or
 * --print-program); NULL after one line on stderr. */
static zs_comm_t zs_train_open_comm(int phantom)
{
    zs_comm_t comm;
    if (phantom) {
        comm = zs_comm_self();
        if (!comm)
            fprintf(stderr, "zerosim: out of host memory\n");
        return comm;
    }
    if (zs_comm_init(NULL, NULL, &comm)) {
        fprintf(stderr, "zerosim: %s\n", zs_error_msg());
        return NULL;
    }
    return comm;
}

static int zs_cmd_train(int argc, char **argv)
{
    int phantom = zs_wants_phantom(argc, argv);
    zs_comm_set_startup_timeout(zs_early_collective_timeout(argc, argv));
    zs_comm_t comm = zs_train_open_comm(phantom);
    if (!comm)
        return 1;
    int rank = zs_comm_rank(comm), world = zs_comm_size(comm);
    if (phantom) { /* started by mpirun anyway? setup refuses it */
        int ws = zs_comm_launcher_size();
        if (ws > 1)
            world = ws;
    }
    zs_train_options o = {.backend = "cpu", .log = stdout, .print_every = 10};
    zs_run_config cfg;
    const char *report = NULL, *csv = NULL, *trace = NULL;
    int phantom_world = 0, print_program = 0;
    int rc = zs_train_setup(argc, argv, rank, world, &cfg, &o, &report, &csv, &trace,
                            &phantom_world, &print_program);
    if (phantom_world)
        world = phantom_world;
    if (!rc) /* every wait from here on: the configured collective timeout */
        zs_comm_set_timeout(comm, cfg.collective_timeout);
    int setup_failed = 0; /* some checks run on rank 0 only: agree */
    if (!phantom && world > 1 &&
        zs_comm_agree(comm, rc > 0, zs_comm_timeout(comm), &setup_failed))
        zs_comm_abort(comm, 1);
    if (!rc && setup_failed)
        rc = 1;
    if (!rc && print_program)
        rc = zs_train_print_setup(&cfg, world, print_program);
    if (rc || print_program) {
        zs_comm_finalize(comm);
        return rc < 0 ? 0 : rc;
    }
    o.hash_every_step = report != NULL;
    if (rank == 0 && o.log)
        zs_train_print_start(&cfg, &o, world, phantom);
    zs_train_result r;
    rc = phantom ? zs_train_phantom(&cfg, &o, world, &r) : zs_train(&cfg, &o, comm, &r);
    if (!rc && rank == 0 && o.no_steps) { /* zerosim export */
        if (o.log)
            zs_train_print_export(o.log, &cfg, &o, &r);
    } else if (!rc && rank == 0) {
        rc = zs_train_finish(&cfg, &o, world, phantom, report, csv, trace, &r);
    } else if (rc && r.error_rank) {
        fprintf(stderr, "zerosim: %s\n", zs_error_msg());
    }
    /* the report's outcome decides every rank's exit code */
    int any = 0;
    if (zs_comm_agree(comm, rc != 0, zs_comm_timeout(comm), &any))
        zs_comm_abort(comm, 1);
    zs_train_result_free(&r);
    zs_comm_finalize(comm);
    return any ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(zs_usage, stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(zs_usage, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("zerosim %s (backends: %s)\n", PACKAGE_VERSION, zs_backend_list());
        return 0;
    }
    if (!strcmp(argv[1], "train") || !strcmp(argv[1], "export"))
        return zs_cmd_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "compare"))
        return zs_cmd_compare(argc - 1, argv + 1);
    if (!strcmp(argv[1], "quantize"))
        return zs_cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(argv[1], "eval"))
        return zs_cmd_eval(argc - 1, argv + 1);
    if (!strcmp(argv[1], "compress"))
        return zs_cmd_compress(argc - 1, argv + 1);
    if (!strcmp(argv[1], "decompress"))
        return zs_cmd_decompress(argc - 1, argv + 1);
    if (!strcmp(argv[1], "tokens"))
        return zs_cmd_tokens(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sample"))
        return zs_cmd_sample(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench"))
        return zs_cmd_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "plan"))
        return zs_cmd_plan(argc - 1, argv + 1);
    if (!strcmp(argv[1], "mesh"))
        return zs_cmd_mesh(argc - 1, argv + 1);
    if (!strcmp(argv[1], "config-keys")) {
        if (argc == 2) {
            zs_config_print_keys(stdout);
            return 0;
        }
        if (argc == 3 && !strcmp(argv[2], "--combinations")) {
            zs_compat_print(stdout);
            return 0;
        }
        if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
            printf("usage: zerosim config-keys [--combinations]\n\n"
                   "Every DeepSpeed configuration key zerosim reads, one a line, and whether it\n"
                   "is used, has no effect or is not modelled (with what to do instead).\n"
                   "--combinations: the rules about combinations of features (refused or\n"
                   "adjusted, with the reason) and the matrix of every pair of the main\n"
                   "features (docs/configuration.md).\n");
            return 0;
        }
        fprintf(stderr, "zerosim: config-keys takes --combinations or --help, got \"%s\"\n",
                argv[2]);
        return 2;
    }
    fprintf(stderr, "zerosim: unknown command \"%s\" (commands: train, export, compare, quantize, eval, compress, decompress, tokens, sample, plan, mesh, bench, config-keys; see zerosim --help)\n",
            argv[1]);
    return 2;
}
