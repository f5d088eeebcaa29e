/* zerosim — a training run: engine, steps, results. */
#ifndef ZEROSIM_TRAIN_H
#define ZEROSIM_TRAIN_H

#include <stddef.h>
#include <stdio.h>
#include "zerosim/checkpoint.h"
#include "zerosim/comm.h"
#include "zerosim/config.h"
#include "zerosim/mem.h"
#include "zerosim/predict.h"
#include "zerosim/zero.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *backend;      /* "cpu" */
    size_t device_memory;     /* simulated capacity per rank in bytes, 0 = none */
    size_t host_memory;       /* the same for the host tier (offload) */
    FILE *log;                /* progress lines (rank 0 only), NULL = silent */
    int quiet;                /* no progress lines (step lines, "saved"); the
                                 start-up line, summary and tables still go to log */
    int print_every;          /* print every N steps (and the first and last) */
    int hash_every_step;      /* record param_hashes after every step */
    int trace;                /* collect the Chrome trace (r->trace_json) */
    const char *save_dir;     /* --save-dir: sharded training checkpoints, NULL = none */
    int save_every;           /* --save-every K: every K steps (and after the last); 0 = last only */
    const char *resume;       /* --resume: a checkpoint folder to start from, NULL = none */
    /* weights and tensors for other tools (zerosim/weights.h, README) */
    const char *init_from;    /* start from this weights file (the GPT's shapes
                                 must be the file's), NULL = the seed's */
    const char *export_path;  /* write the parameters after the last step */
    int export_format;        /* zs_weights_format */
    uint64_t export_shard_bytes; /* --shard-size: safetensors shards of at most
                                    this many bytes of tensors; 0 = one file */
    int no_steps;             /* build and load, export, take no step */
    const char *val_data;     /* held-out token file, NULL = none */
    int val_every;            /* held-out loss every K steps and after the last */
    const char *dump_dir;     /* per-step dumps (rank 0 writes) */
    const int *dump_steps;    /* [n_dump_steps] ascending, 1-based; 0 = before step 1 */
    int n_dump_steps;
    int report_rows;          /* zs_report_rows: --report-per-rank, else by class
                                 from 9 ranks on (zerosim/report.h) */
} zs_train_options;

/* Collective calls of one rank, summed per op and phase. */
typedef struct {
    double calls;
    double bytes;        /* full-buffer bytes (elements x element size) */
    double seconds;
    double wire;         /* this rank's traffic (zs_comm_record.wire_bytes) */
    double inter;        /* of which across nodes (zs_comm_record.inter_bytes) */
    double inter_api;    /* the same as full-buffer bytes (inter_api_bytes) */
} zs_comm_sum;

/* One row of the comms table (rank 0): calls of one op with one message size. */
typedef struct {
    int op;
    size_t msg_bytes;
    size_t count;
    double seconds;
} zs_comm_row;

typedef struct {
    int steps;                /* steps this run took */
    int first_step;           /* steps done before it (a resumed run), else 0;
                                 info[i] and hashes[i] are of step first_step + i */
    zs_step_info *info;       /* [steps] */
    char (*hashes)[17];       /* [steps] when hash_every_step (rank 0) */
    char param_hash[17];      /* after the last step (rank 0) */
    size_t num_params;
    size_t padded_params;
    double loss_floor;
    zs_mem_stats mem;         /* this rank */
    zs_mem_stats tier_mem[ZS_MEM_NTIERS]; /* this rank, per tier ([0] = mem) */
    size_t (*tier_peaks)[ZS_MEM_NTIERS][ZS_MEM_NCAT]; /* [world_size] (rank 0):
                                 peak bytes per tier and category (host, nvme) */
    size_t (*peaks)[ZS_MEM_NCAT]; /* [world_size] peak bytes per category (rank 0) */
    size_t *total_peaks;      /* [world_size] peak of the total (rank 0) */
    size_t (*at_peak)[ZS_MEM_NCAT];      /* [world_size] mix at the total's peak */
    size_t (*phase_peaks)[ZS_MEM_NPHASES]; /* [world_size] peak total per phase */
    zs_comm_sum (*comm)[ZS_OP_NOPS][ZS_PHASE_NPHASES]; /* [world_size] (rank 0) */
    /* [world_size] training calls per group (dp, tp, ...) and op: calls,
     * bytes (full buffers) and wire (this rank's traffic); seconds 0 */
    zs_comm_sum (*comm_group)[ZS_GROUP_NGROUPS][ZS_OP_NOPS];
    zs_comm_row *comm_rows;   /* rank 0's comms table */
    size_t n_comm_rows;
    zs_mem_event *timeline;   /* rank 0's memory during step timeline_step */
    size_t n_timeline;
    int timeline_step;
    zs_prediction pred;       /* for rank 0's shard size (every shard is the same) */
    zs_prediction *pp_pred;   /* [pp_size] pipeline: each stage's (rank 0), else NULL */
    int steps_applied;        /* steps not skipped */
    int compressed_steps;     /* steps whose gradients went compressed (or,
                                 1-bit Adam, whose momentum did) */
    int compressed_applied_steps; /* of them, those not skipped */
    int local_applied_steps;  /* 0/1 Adam: of them, the local steps (nothing
                                 exchanged) */
    double *h2d_pred;         /* [world_size] offload_param: bytes each rank's
                                 gathers send up per step, or NULL */
    double *a2a_pred;         /* [world_size] predicted all-to-all bytes per
                                 compressed step of each rank, or NULL */
    double *qgz_pred;         /* [2 * world_size] ZeRO++ qgZ: each rank's
                                 all-to-all bytes per step, then the part of
                                 them across nodes; or NULL */
    int hpz;                  /* ZeRO++ hpZ: the secondary group's size (0, 1: off) */
    size_t live_params_peak;  /* stage 3: most gathered parameters alive at once */
    double nb_span_s, nb_wait_s; /* this rank: stage 3's non-blocking gathers
                                 and overlap_comm's reduce-scatters, start to
                                 done, and the part spent starting, driving
                                 and waiting for them */
    double (*nb)[2];          /* [world_size] the same per rank (rank 0) */
    int units_over_live_bound;/* stage 3: units larger than stage3_max_live_parameters,
                                 each gathered alone (as DeepSpeed does) */
    double seconds;
    int world_size;
    int dp_size, tp_size;     /* the mesh: data- and tensor-parallel sizes */
    int pp_size;
    int *node_of;             /* [world_size] each rank's node, as its world
                                 communicator knows it (rank 0) */
    int nodes;                /* how many */
    unsigned char *node_cross;/* [world_size] bit 1 << g: the rank's ring
                                 neighbour in its group along g (dp, tp, pp)
                                 is on another node (rank 0) */
    int *dp_node_ranks;       /* [world_size] its data-parallel group's ranks
                                 on its node (rank 0) */
    int hierarchical;         /* two-level reduce-scatter and allgather */
    int skipped_steps;
    int error_rank;           /* after a failure: 1 when this rank should print it */
    int phantom;              /* a phantom run (zs_train_phantom) */
    double *val_loss;         /* [steps] held-out loss after each step, NaN when
                                 not evaluated (rank 0, with options.val_data or
                                 the MLP's image set) */
    int val_byte_level;       /* the held-out tokens are bytes of text (rank 0):
                                 val_loss / ln 2 is bits per byte */
    /* the MLP's image set (--data): [steps] the held-out images' accuracy
     * and the test images' loss and accuracy, NaN when not evaluated
     * (rank 0), and how many images each part holds; NULL and 0 without */
    double *val_accuracy, *test_loss, *test_accuracy;
    uint64_t val_samples, test_samples;
    char *trace_json;         /* rank 0, with options.trace: the trace of
                                 every rank, Chrome's trace event format */
    int trace_truncated;      /* the ledger kept only its first records */
    /* training checkpoints (--save-dir, --resume): files, not device memory */
    zs_ckpt_io ckpt;          /* this rank's */
    zs_ckpt_io *ckpt_ranks;   /* [world_size] (rank 0), NULL without checkpoints */
    uint64_t *ckpt_pred;      /* [world_size] predicted tensor bytes per save (rank 0) */
    char resumed_from[4200];  /* the checkpoint it started from, "" when none */
    char resumed_hash[17];    /* the parameters' hash as loaded (rank 0) */
    /* mixture of experts: each MoE block's routing in rank 0's last
     * micro-batch ([moe_n], block index in moe_block), NULL without */
    zs_moe_stats *moe;
    int *moe_block, moe_n;
} zs_train_result;

/* Train cfg (already finalized) over comm (collective) and fill r. Returns 0
 * or non-zero with a message; after a failure every rank returns non-zero
 * and exactly one has r->error_rank set (the lowest failing rank). Release r
 * with zs_train_result_free even after a failure. */
int zs_train(const zs_run_config *cfg, const zs_train_options *o, zs_comm_t comm,
             zs_train_result *r);
/* A phantom run: the same engine for each of `world` simulated ranks in
 * turn, on the phantom backend (no storage, no computation) and phantom
 * communicators (every collective recorded, none executed). Fills r as
 * zs_train fills rank 0's, with r->phantom set: memory and traffic are
 * exact; losses, norms and hashes are not computed (zeros and empty). No
 * MPI. Returns 0 or non-zero with a message. */
int zs_train_phantom(const zs_run_config *cfg, const zs_train_options *o, int world,
                     zs_train_result *r);
void zs_train_result_free(zs_train_result *r);

#ifdef __cplusplus
}
#endif
#endif
