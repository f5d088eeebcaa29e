/* zerosim — the `plan` command (src/cli/plan_cmd.c). */
#ifndef ZEROSIM_CLI_PLAN_CMD_H
#define ZEROSIM_CLI_PLAN_CMD_H

/* argv[0] is "plan". Returns the exit code: 0, 1 (a bad model, setup or
 * file), 2 (a bad option). Runs without MPI. */
int zs_cmd_plan(int argc, char **argv);

#endif
