/* zerosim — the `mesh` command. */
#ifndef ZEROSIM_CLI_MESH_CMD_H
#define ZEROSIM_CLI_MESH_CMD_H
int zs_cmd_mesh(int argc, char **argv);
#endif
