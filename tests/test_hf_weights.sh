#!/bin/sh
# The Llama family's weights under Hugging Face's names (LlamaForCausalLM,
# Qwen2ForCausalLM), one file or sharded (model.safetensors.index.json):
# - zerosim export writes the names and (out, in) shapes, --shard-size
#   shards as save_pretrained names them, and export -> --init-from ->
#   export is byte-identical from one file, an index or a folder, in every
#   ZeRO stage, on 1-4 ranks and on a tensor-parallel mesh;
# - a checkpoint written the way transformers writes one (by
#   tests/hf_llama_files.py, not by zerosim: no head counts in it, the
#   weight_map sorted, rotary_emb.inv_freq buffers) loads with its
#   config.json (--hf-config) or --heads, its tensors become the run's
#   parameters bit for bit (the step-0 dump), and with torch its loss is
#   what transformers' arithmetic (rotate_half RoPE) gives, while RoPE
#   with interleaved pairs gives another;
# - zerosim compare reads sharded checkpoints, and the GPT's files shard too;
# - a missing tensor, a wrong shape, an unknown tensor, an index naming a
#   missing file, a tensor in two shards, a weight_map that disagrees with
#   the files are refused with one line naming the file and the tensor,
#   leaving no output.
# The quick form (ZS_TEST_LEVEL=fast) runs the first mesh case only.
. "$(dirname "$0")/testlib.sh"
PY=$(command -v python3 || true)
TPY=${TORCH_PYTHON:-/usr/bin/python3}
HF="$HERE/hf_llama_files.py"
run() { sh "$HERE/mpirun.sh" "$@" </dev/null; }
L="--model llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --ffn-hidden 48 --seq 16 --vocab 64"

# zerosim's own files: the names, shapes and metadata; shards and their index
"$ZS" export $L --seed 3 --out "$T/a.safetensors" >"$T/log" 2>&1 || { bad "export failed"; cat "$T/log"; }
hjson=$(dd if="$T/a.safetensors" bs=1 skip=8 count=6000 2>/dev/null | tr -d ' ')
for want in '"model.embed_tokens.weight":{"dtype":"F32","shape":[64,32]' \
            '"model.layers.1.self_attn.k_proj.weight":{"dtype":"F32","shape":[16,32]' \
            '"model.layers.0.self_attn.o_proj.weight":{"dtype":"F32","shape":[32,32]' \
            '"model.layers.0.mlp.down_proj.weight":{"dtype":"F32","shape":[32,48]' \
            '"model.layers.0.mlp.gate_proj.weight":{"dtype":"F32","shape":[48,32]' \
            '"lm_head.weight":{"dtype":"F32","shape":[64,32]' '"n_head":"4"' '"n_kv_head":"2"'; do
    echo "$hjson" | grep -qF "$want" && ok || bad "safetensors header lacks $want"
done
mkdir -p "$T/s"
"$ZS" export --init-from "$T/a.safetensors" --shard-size 8KB --out "$T/s/model.safetensors" \
    >"$T/log" 2>&1 || { bad "export --shard-size failed"; cat "$T/log"; }
# shellcheck disable=SC2010 # the shard names export wrote, which have no spaces
n=$(ls "$T/s" | grep -c '^model-000[0-9][0-9]-of-000[0-9][0-9]\.safetensors$')
[ "$n" -ge 3 ] && [ -f "$T/s/model.safetensors.index.json" ] && [ ! -e "$T/s/model.safetensors" ] &&
    ok || bad "--shard-size 8KB: $n shards, index or a stray model.safetensors"
grep -q '"model.layers.1.mlp.up_proj.weight": "model-000[0-9][0-9]-of-000[0-9][0-9].safetensors"' \
    "$T/s/model.safetensors.index.json" && grep -q '"total_size": 78464' "$T/s/model.safetensors.index.json" &&
    ok || bad "the index lacks the weight_map or total_size"
for from in "$T/s" "$T/s/model.safetensors.index.json"; do
    "$ZS" export --init-from "$from" --out "$T/b.safetensors" >"$T/log" 2>&1 || { bad "--init-from $from failed"; cat "$T/log"; }
    cmp -s "$T/a.safetensors" "$T/b.safetensors" && ok || bad "--init-from $from: the round trip differs"
done
"$ZS" compare "$T/s" "$T/a.safetensors" --rtol 0 --atol 0 >"$T/log" 2>&1 && ok || bad "compare of the shards and the file"
"$ZS" export $L --seed 4 --out "$T/c.safetensors" >/dev/null 2>&1
# one file written over shards removes their index, which would shadow it
cp -r "$T/s" "$T/s1"
"$ZS" export --init-from "$T/c.safetensors" --out "$T/s1/model.safetensors" >/dev/null 2>&1
[ ! -e "$T/s1/model.safetensors.index.json" ] &&
    "$ZS" compare "$T/s1" "$T/c.safetensors" --rtol 0 --atol 0 >/dev/null 2>&1 && ok ||
    bad "one file over shards: the older index stayed, or the folder reads otherwise"
"$ZS" compare "$T/s/model.safetensors.index.json" "$T/c.safetensors" >/dev/null 2>&1 && bad "compare: seeds 3 and 4 equal" || ok

# the GPT's files shard the same way (GPT-2's names)
G="--layers 2 --hidden 24 --heads 4 --seq 8 --vocab 30"
mkdir -p "$T/g"
"$ZS" export $G --seed 5 --out "$T/g.safetensors" >/dev/null 2>&1
"$ZS" export --init-from "$T/g.safetensors" --shard-size 3KB --out "$T/g/model.safetensors" >"$T/log" 2>&1 &&
    [ -f "$T/g/model.safetensors.index.json" ] &&
    "$ZS" export --init-from "$T/g" --out "$T/g2.safetensors" >>"$T/log" 2>&1 &&
    cmp -s "$T/g.safetensors" "$T/g2.safetensors" && ok || { bad "GPT-2 shards: the round trip differs"; cat "$T/log"; }

# the round trip in every stage, on 1-4 ranks and a tensor-parallel mesh,
# into one file and into shards
for nsp in "2 3 bf16 --tp 2" "1 0 fp32" "2 1 fp16" "3 2 fp32" "3 3 bf16" "4 1 fp32 --tp 2 --sequence-parallel"; do
    set -- $nsp; n=$1; st=$2; p=$3; shift 3
    run "$n" "$ZS" export --init-from "$T/s" --stage "$st" --precision "$p" "$@" \
        --out "$T/r.safetensors" >"$T/log" 2>&1 || { bad "N=$n stage $st $p $*: failed"; cat "$T/log"; continue; }
    cmp -s "$T/a.safetensors" "$T/r.safetensors" && ok || bad "N=$n stage $st $p $*: the round trip differs"
    rm -rf "$T/rs"; mkdir "$T/rs"
    run "$n" "$ZS" export --init-from "$T/a.safetensors" --stage "$st" --precision "$p" "$@" \
        --shard-size 8KB --out "$T/rs/model.safetensors" >"$T/log" 2>&1 || { bad "N=$n $*: sharded export failed"; continue; }
    # shellcheck disable=SC2045 # the shard names export wrote, which have no spaces
    for f in $(ls "$T/s"); do cmp -s "$T/s/$f" "$T/rs/$f" || bad "N=$n stage $st $*: shard $f differs"; done
    [ "$(ls "$T/s")" = "$(ls "$T/rs")" ] && ok || bad "N=$n stage $st $*: other shards"
    zs_fast && break
done

# training from the file is training from the seed; --export equals export --from
run 2 "$ZS" train $L --init-from "$T/s" --seed 3 --steps 2 --micro-batch 2 --stage 3 \
    --save-dir "$T/ck" --export "$T/t1.safetensors" --report "$T/r1.json" --quiet >"$T/log" 2>&1 ||
    { bad "train --init-from failed"; cat "$T/log"; }
run 2 "$ZS" train $L --seed 3 --steps 2 --micro-batch 2 --stage 3 --report "$T/r2.json" --quiet >/dev/null 2>&1
[ -n "$(hashes "$T/r1.json")" ] && [ "$(hashes "$T/r1.json")" = "$(hashes "$T/r2.json")" ] && ok ||
    bad "--init-from seed 3's shards differs from --seed 3"
"$ZS" export $L --from "$T/ck" --out "$T/t2.safetensors" >"$T/log" 2>&1 || { bad "export --from failed"; cat "$T/log"; }
cmp -s "$T/t1.safetensors" "$T/t2.safetensors" && ok || bad "train --export differs from export --from"

[ -n "$PY" ] || { echo "SKIP: no python3: checkpoints written as transformers writes them"; finish; }

# a checkpoint as transformers writes it, its config.json beside it
"$PY" "$HF" tokens "$T/tok.bin"
"$PY" "$HF" write "$T/hf" --shard-bytes 6000 --inv-freq || bad "hf_llama_files.py write failed"
mkdir -p "$T/z"
run 2 "$ZS" train --init-from "$T/hf" --hf-config "$T/hf/config.json" --data "$T/tok.bin" \
    --steps 1 --micro-batch 2 --stage 2 --dump-dir "$T/z" --dump-steps 0-1 --quiet >"$T/log" 2>&1 ||
    { bad "train from the transformers-style checkpoint failed"; cat "$T/log"; }
"$PY" "$HF" same "$T/hf" "$T/z/step_000000.safetensors" >"$T/log" && ok ||
    { bad "the step-0 parameters are not the checkpoint's"; cat "$T/log"; }
"$ZS" export --init-from "$T/hf" --heads 4 --out "$T/h1.safetensors" >"$T/log" 2>&1 &&
    "$ZS" export --init-from "$T/hf/model.safetensors.index.json" --hf-config "$T/hf/config.json" \
        --out "$T/h2.safetensors" >>"$T/log" 2>&1 &&
    "$ZS" compare "$T/h2.safetensors" "$T/h1.safetensors" --rtol 0 --atol 0 >>"$T/log" 2>&1 &&
    ok || { bad "--heads 4 (key/value heads from k_proj) or --hf-config export differs"; cat "$T/log"; }
if "$TPY" -c "import torch" >/dev/null 2>&1; then
    "$TPY" "$HF" loss "$T/hf" "$T/z/step_000001.safetensors" && ok || bad "the loss is not transformers' arithmetic's"
    "$TPY" "$HF" loss "$T/hf" "$T/z/step_000001.safetensors" --interleaved >/dev/null &&
        bad "control: RoPE with interleaved pairs gave the same loss" || ok
else
    echo "SKIP: $TPY cannot import torch: the loss against PyTorch is not checked"
fi
# Qwen2-style: q/k/v biases, the head tied, one key/value head, one file
"$PY" "$HF" write "$T/qw" --bias --tied --kv-heads 1
"$ZS" export --init-from "$T/qw" --hf-config "$T/qw/config.json" --out "$T/qw.safetensors" >"$T/log" 2>&1 &&
    "$ZS" compare "$T/qw.safetensors" "$T/qw/model.safetensors" --rtol 0 --atol 0 >>"$T/log" 2>&1 &&
    grep -q "1 key/value heads" "$T/log" && grep -q "head tied" "$T/log" && ok ||
    { bad "the Qwen2-style checkpoint"; cat "$T/log"; }

# refusals: one line naming the file and the tensor, no output left
X=$T/x.safetensors
refuse -o "$X" -m "does not say the number of heads" export --init-from "$T/hf" --out "$X"
refuse -o "$X" -m "holds a Llama with layers 2, but the command line gives 3" \
    export --init-from "$T/hf" --heads 4 --layers 3 --out "$X"
refuse -o "$X" -m "kv-heads 2.*gives 1" export --init-from "$T/hf" --heads 4 --kv-heads 1 --out "$X"
refuse -o "$X" -m "holds a llama, but the command line gives --model gpt" \
    export --init-from "$T/hf" --model gpt --heads 4 --out "$X"
refuse -o "$X" -m "tie-embeddings 0, but the command line gives 1" \
    export --init-from "$T/hf" --heads 4 --tie-embeddings --out "$X"
refuse -o "$X" -m "llm.c's .bin holds GPT-2 models only" export $L --out "$T/x.bin"
refuse -o "$X" -m "shard-size splits safetensors" export --layers 1 --hidden 8 --heads 2 --seq 4 --vocab 8 \
    --shard-size 1KB --out "$T/x.bin"
refuse -o "$X" -m "shard-size must be a size" export $L --shard-size lots --out "$X"
"$PY" "$HF" write "$T/d1" --drop model.layers.1.mlp.up_proj.weight
refuse -o "$X" -m "d1: missing tensor model.layers.1.mlp.up_proj.weight" \
    export --init-from "$T/d1" --heads 4 --out "$X"
"$PY" "$HF" write "$T/d2" --bad-shape model.layers.0.self_attn.v_proj.weight --shard-bytes 6000
refuse -o "$X" -m "d2/model-000[0-9][0-9]-of-000[0-9][0-9].safetensors: tensor model.layers.0.self_attn.v_proj.weight has shape \[17, 32\]" \
    export --init-from "$T/d2" --heads 4 --out "$X"
"$PY" "$HF" write "$T/d3" --extra model.layers.0.mlp.extra.weight
refuse -o "$X" -m "tensor model.layers.0.mlp.extra.weight is not part of a Llama" \
    export --init-from "$T/d3" --heads 4 --out "$X"
"$PY" "$HF" write "$T/d4" --shard-bytes 6000 --dup model.embed_tokens.weight
refuse -o "$X" -m "tensor model.embed_tokens.weight is in two shards, .*d4/model-00001-of-.* and .*d4/model-000" \
    export --init-from "$T/d4" --heads 4 --out "$X"
cp -r "$T/hf" "$T/d5" && rm "$T/d5/model-00002-of-"*.safetensors
refuse -o "$X" -m "d5/model.safetensors.index.json: the weight_map puts tensor .* in a shard that cannot be read: .*model-00002-of-" \
    export --init-from "$T/d5" --heads 4 --out "$X"
cp -r "$T/hf" "$T/d6" && sed -i 's/"model.norm.weight": "model-000\([0-9]*\)-of/"model.norm.weight": "model-00001-of/' "$T/d6/model.safetensors.index.json"
refuse -o "$X" -m "d6/model.safetensors.index.json: the weight_map puts tensor model.norm.weight in model-00001-of-.*, but it is in .*d6/model-000" \
    export --init-from "$T/d6" --heads 4 --out "$X"
cp -r "$T/hf" "$T/d7" && sed -i '/"model.layers.0.input_layernorm.weight"/d' "$T/d7/model.safetensors.index.json"
refuse -o "$X" -m "holds tensor model.layers.0.input_layernorm.weight, which the weight_map of .*d7/model.safetensors.index.json does not list" \
    export --init-from "$T/d7" --heads 4 --out "$X"
cp -r "$T/hf" "$T/d8" && sed -i 's/"model.norm.weight": "/"model.norm.weight": "..\//' "$T/d8/model.safetensors.index.json"
refuse -o "$X" -m "puts tensor model.norm.weight in \"../model-.*\": a shard is a plain file name" \
    export --init-from "$T/d8" --heads 4 --out "$X"
printf '{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}' >"$T/dup.index.json"
refuse -o "$X" -m "dup.index.json: line 1: duplicate object key" export --init-from "$T/dup.index.json" --heads 4 --out "$X"
mkdir -p "$T/empty"
refuse -o "$X" -m "empty: a folder with neither model.safetensors.index.json nor model.safetensors" \
    export --init-from "$T/empty" --heads 4 --out "$X"
# a failed sharded export leaves no shard behind (the folder is read-only
# halfway: the index cannot be written because a file of its name is a folder)
mkdir -p "$T/ro/model.safetensors.index.json"
if ! "$ZS" export --init-from "$T/a.safetensors" --shard-size 8KB --out "$T/ro/model.safetensors" >/dev/null 2>&1 &&
   [ "$(ls "$T/ro")" = "model.safetensors.index.json" ]; then ok; else bad "a failed sharded export left: $(ls "$T/ro")"; fi
finish
