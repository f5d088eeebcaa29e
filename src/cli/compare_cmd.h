/* zerosim — the `compare` command. */
#ifndef ZEROSIM_CLI_COMPARE_CMD_H
#define ZEROSIM_CLI_COMPARE_CMD_H
int zs_cmd_compare(int argc, char **argv);
#endif
