/* zerosim — the `compress` and `decompress` commands (Deep Compression). */
#ifndef ZEROSIM_CLI_DEEPCOMP_CMD_H
#define ZEROSIM_CLI_DEEPCOMP_CMD_H
int zs_cmd_compress(int argc, char **argv);
int zs_cmd_decompress(int argc, char **argv);
#endif
