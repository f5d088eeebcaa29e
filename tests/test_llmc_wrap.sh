#!/bin/sh
# llm.c's header with values whose size wraps in 64-bit arithmetic (T=1,
# V=1, L=730,614, C=725,262: 4 x the parameter count is 2^64 + 125 MB) is
# refused by the size check, overflow-checked, with one line: by compare,
# eval and export --init-from, for a file of the wrapped size too (which
# the unchecked sum accepted, and compare then read past its buffer).
# Written with printf and truncate alone.
. "$(dirname "$0")/testlib.sh"

# shellcheck disable=SC2059 # the format is the octal escape of the byte to write
le() { # an int32, little-endian
    c=$(printf '%08x' "$1")
    printf "\\$(printf %03o $((0x$(echo "$c" | cut -c7-8))))\\$(printf %03o $((0x$(echo "$c" | cut -c5-6))))"
    printf "\\$(printf %03o $((0x$(echo "$c" | cut -c3-4))))\\$(printf %03o $((0x$(echo "$c" | cut -c1-2))))"
}
F="$T/wrap.bin"
: >"$F"
for v in 20240326 3 1 1 730614 1 725262 1; do le "$v" >>"$F"; done
for size in 1024 125374704; do
    truncate -s "$size" "$F"
    for cmd in "compare $F $F" "eval --from $F --heads 1" "export --init-from $F --out $T/o.bin"; do
        # shellcheck disable=SC2086
        if "$ZS" $cmd </dev/null >"$T/out" 2>"$T/err"; then
            bad "$cmd ($size bytes) accepted the header"
        elif [ "$(grep -c . "$T/err")" -eq 1 ] && grep -q "more bytes than 64 bits count" "$T/err"; then
            ok
        else
            bad "$cmd ($size bytes): $(head -3 "$T/err")"
        fi
    done
done
finish
