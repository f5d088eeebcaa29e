/* zerosim — the options of `zerosim train` and `zerosim export`
 * (src/cli/train_cmd.c). */
#ifndef ZEROSIM_CLI_TRAIN_CMD_H
#define ZEROSIM_CLI_TRAIN_CMD_H

#include "zerosim/config.h"
#include "zerosim/train.h"

/* Parse train's (or export's: argv[0] "export") options, load --config and
 * check them on `world` ranks. Returns 0 to run, -1 after --help (exit 0),
 * else the exit code after one line on rank 0's stderr. *phantom_world: the
 * simulated world size of a phantom run or --print-program, else 0;
 * *print_program: 1 for --print-program, 2 for --print-config, else 0. */
int zs_train_setup(int argc, char **argv, int rank, int world, zs_run_config *cfg,
                   zs_train_options *o, const char **report, const char **csv,
                   const char **trace, int *phantom_world, int *print_program);

#endif
