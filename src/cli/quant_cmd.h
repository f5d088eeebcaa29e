/* zerosim — the `quantize` and `eval` commands. */
#ifndef ZEROSIM_CLI_QUANT_CMD_H
#define ZEROSIM_CLI_QUANT_CMD_H
int zs_cmd_quantize(int argc, char **argv);
int zs_cmd_eval(int argc, char **argv);
#endif
