#!/usr/bin/env python3
"""Writes a random-weight Llama-shaped GGUF file (f16 matrices, f32 norms) with
the tokenizer of another GGUF file, so that Strata and llama.cpp can run the
same large model in a benchmark (scripts/bench_peers.sh). The shape defaults
to strata_make_bench_model's (24 layers, hidden 2048, ff 8192, 16 heads; about
3.4 GB with the demo model's 49152-token vocabulary). The values are uniform
in +-sqrt(3 / inputs) / 2, as strata_make_bench_model writes them; norms are
ones. Needs the `gguf` and `numpy` packages (scripts/bench_peers.sh makes a
small virtual environment for them). Written to OUT.part, renamed when done.

  make_bench_gguf.py --tokenizer-from models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --out models/bench-f16-llama.gguf [--hidden 2048 --ff 8192 --layers 24 \
      --heads 16 --kv-heads 16 --ctx 4096 --seed 0]
"""
import argparse
import os
import sys

import numpy as np
import gguf

SHAPE_KEYS = {
    "block_count", "context_length", "embedding_length", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "rope.dimension_count",
    "vocab_size",
}


def copy_fields(reader, writer, arch):
    """The source's metadata but its shape, name and file type."""
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        if key.startswith(arch + ".") and key[len(arch) + 1:] in SHAPE_KEYS:
            continue
        if key.startswith("general.") and key != "general.quantization_version":
            continue
        vtype = field.types[0]
        value = field.contents()
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, value, vtype, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, value, vtype)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokenizer-from", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--ff", type=int, default=8192)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=16)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.hidden % a.heads or a.heads % a.kv_heads:
        sys.exit(f"make_bench_gguf: --hidden {a.hidden}, --heads {a.heads} and --kv-heads "
                 f"{a.kv_heads} do not divide")

    reader = gguf.GGUFReader(a.tokenizer_from)
    arch = reader.fields["general.architecture"].contents()
    if arch != "llama":
        sys.exit(f"make_bench_gguf: {a.tokenizer_from}: architecture {arch!r}, want 'llama'")
    vocab = len(reader.fields["tokenizer.ggml.tokens"].contents())
    head_dim = a.hidden // a.heads
    kv_dim = head_dim * a.kv_heads

    part = a.out + ".part"
    w = gguf.GGUFWriter(part, "llama")
    w.add_name("random f16 Llama-shaped benchmark model")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_block_count(a.layers)
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.hidden)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(vocab)
    copy_fields(reader, w, arch)

    # (name, numpy shape (out, in), norm): a norm is ones in f32, the others
    # uniform in +-sqrt(3 / in) / 2 in f16
    tensors = [("token_embd.weight", (vocab, a.hidden), False)]
    for layer in range(a.layers):
        b = f"blk.{layer}."
        tensors += [
            (b + "attn_norm.weight", (a.hidden,), True),
            (b + "attn_q.weight", (a.hidden, a.hidden), False),
            (b + "attn_k.weight", (kv_dim, a.hidden), False),
            (b + "attn_v.weight", (kv_dim, a.hidden), False),
            (b + "attn_output.weight", (a.hidden, a.hidden), False),
            (b + "ffn_norm.weight", (a.hidden,), True),
            (b + "ffn_gate.weight", (a.ff, a.hidden), False),
            (b + "ffn_up.weight", (a.ff, a.hidden), False),
            (b + "ffn_down.weight", (a.hidden, a.ff), False),
        ]
    tensors += [("output_norm.weight", (a.hidden,), True),
                ("output.weight", (vocab, a.hidden), False)]
    for name, shape, norm in tensors:
        dtype = np.float32 if norm else np.float16
        w.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(a.seed)
    for i, (name, shape, norm) in enumerate(tensors):
        if norm:
            w.write_tensor_data(np.ones(shape, np.float32))
            continue
        amp = np.sqrt(3.0 / shape[-1]) / 2
        w.write_tensor_data((rng.random(shape, np.float32) * (2 * amp) - amp).astype(np.float16))
        print(f"\r{i + 1}/{len(tensors)} tensors", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    w.close()
    os.replace(part, a.out)


if __name__ == "__main__":
    main()
