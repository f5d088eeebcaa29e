/* zerosim — the `tokens` and `sample` commands: a text as token files, and
 * text sampled from a trained decoder (docs/text.md). */
#ifndef ZEROSIM_CLI_TEXT_CMD_H
#define ZEROSIM_CLI_TEXT_CMD_H
int zs_cmd_tokens(int argc, char **argv);
int zs_cmd_sample(int argc, char **argv);
#endif
