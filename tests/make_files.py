#!/usr/bin/env python3
"""Write the files tests/test_file_readers.sh feeds zerosim.

    make_files.py KIND N OUT

KIND gpt: wte.weight [4, 2] and wpe.weight [4, 2] (F32, zeros), then N
empty blocks h.{i}.ln_1.weight [0]: a probe counts N blocks, then the file
is refused (the blocks' other tensors are missing).
KIND flat: N tensors t{i} of one F32 each (value i), in order.
KIND tokens: llm.c's token file (magic 20240520, version 1) of N tokens
i % 7.
KIND tokens32: the same tokens in llm.c's 32-bit file (magic 20240801,
version 7, uint32 tokens).
Written with struct and json alone.
"""
import json
import struct
import sys


def main():
    kind, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    header, data = {}, bytearray()
    if kind == "gpt":
        for name in ("wte.weight", "wpe.weight"):
            header[name] = {"dtype": "F32", "shape": [4, 2],
                            "data_offsets": [len(data), len(data) + 32]}
            data += bytes(32)
        end = len(data)
        for i in range(n):
            header["h.%d.ln_1.weight" % i] = {"dtype": "F32", "shape": [0],
                                              "data_offsets": [end, end]}
    elif kind == "flat":
        for i in range(n):
            header["t%d" % i] = {"dtype": "F32", "shape": [1],
                                 "data_offsets": [4 * i, 4 * i + 4]}
            data += struct.pack("<f", float(i))
    elif kind == "tokens":
        with open(out, "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
            f.write(struct.pack("<%dH" % n, *(i % 7 for i in range(n))))
        return
    elif kind == "tokens32":
        with open(out, "wb") as f:
            f.write(struct.pack("<256i", 20240801, 7, n, *([0] * 253)))
            f.write(struct.pack("<%dI" % n, *(i % 7 for i in range(n))))
        return
    else:
        sys.exit("make_files.py: KIND is gpt, flat, tokens or tokens32")
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(data))


main()
