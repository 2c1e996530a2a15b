#!/usr/bin/env python3
"""Writes the committed test fixtures under tests/data from PyTorch,
Hugging Face transformers, tokenizers and gguf (the reference framework).

Run with the virtual environment of scripts/make-venv.sh:

    scripts/make-venv.sh
    scripts/fetch-demo-model.sh          # for the SmolLM2 parts
    .venv/bin/python scripts/make_fixtures.py

It writes
  tests/data/models/{opt,llama,qwen2}/   tiny random models saved by transformers
                                         (save_pretrained) + tokenizer.json + expect.json
  tests/data/models/llama-gguf/          tiny-llama.gguf (mixed F32/F16/Q8_0/Q4_0/Q4_1)
                                         + expect.json
  tests/data/tokenizer/golden.json       ids of TOKENIZER_CASES through every tokenizer
  tests/data/golden/{opt,llama,qwen2,llama-gguf}.json   logits + greedy tokens
  tests/data/golden/smollm2.json         demo model: logits, greedy tokens, perplexity

Deterministic: fixed seeds, one torch thread, no timestamps; running it twice
gives the same bytes. Each golden file carries a header with the library
versions. The test suite reads only these files and never needs Python.
"""

import argparse
import json
import math
import platform
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
import torch

import gguf
import safetensors
import tokenizers
import transformers
from gguf import GGMLQuantizationType as QT
from safetensors.torch import load_file as load_safetensors
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM,
                          OPTConfig, OPTForCausalLM, PreTrainedTokenizerFast, Qwen2Config,
                          Qwen2ForCausalLM)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fixture_cases as cases  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
MODELS = DATA / "models"
GOLDEN = DATA / "golden"
TEXT = DATA / "text"
DEMO_DIR = ROOT / "models"
DEMO_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

SEED = 20240611

# Pre-tokenizer patterns, as in the tokenizer.json files of the models they are named after.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CHATML_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
                   "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

GREEDY_METHOD = ("greedy: at each step the full sequence (prompt + tokens so far) is run again "
                 "without a KV cache, the next token is argmax of the float32 logits at the last "
                 "position (ties: lowest id), nothing is suppressed and nothing stops the run "
                 "(no EOS check); cross-checked against model.generate(do_sample=False, "
                 "eos_token_id=None) with a KV cache")


# ----------------------------------------------------------------------------
# Output helpers


def header(**extra):
    h = {
        "generator": "scripts/make_fixtures.py",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "safetensors": safetensors.__version__,
        "gguf": _gguf_version(),
        "numpy": np.__version__,
        "seed": SEED,
        "torch_threads": torch.get_num_threads(),
    }
    h.update(extra)
    return h


def _gguf_version():
    from importlib.metadata import version
    return version("gguf")


def _scalar(x):
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"non-finite value {x!r} in a golden file")
    return json.dumps(x, ensure_ascii=False)


def _is_flat(v):
    return all(not isinstance(e, (dict, list)) for e in v)


def _fmt(obj, level):
    """JSON with one key per line, lists of scalars (and lists of short scalar
    lists such as [index, value] pairs) kept on one line. Floats are Python
    reprs: the shortest text that reads back as the same double, so float32
    values are exact."""
    ind = " " * level
    ind1 = " " * (level + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{ind1}{json.dumps(str(k), ensure_ascii=False)}: {_fmt(v, level + 1)}"
                 for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + ind + "}"
    if isinstance(obj, (list, tuple)):
        if _is_flat(obj):
            return "[" + ", ".join(_scalar(e) for e in obj) + "]"
        if all(isinstance(e, (list, tuple)) and _is_flat(e) and len(e) <= 4 for e in obj):
            return "[" + ", ".join(_fmt(e, level + 1) for e in obj) + "]"
        return "[\n" + ",\n".join(ind1 + _fmt(e, level + 1) for e in obj) + "\n" + ind + "]"
    return _scalar(obj)


def write_json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_fmt(obj, 0) + "\n", encoding="utf-8")
    print(f"  wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")


def rel(path):
    return str(Path(path).resolve().relative_to(DATA.resolve()))


def floats(t):
    """A float32 tensor as Python floats (exact: float32 -> double is exact)."""
    return [float(v) for v in t.detach().to(torch.float32).reshape(-1).tolist()]


# ----------------------------------------------------------------------------
# Tokenizers


def training_texts():
    return [(TEXT / "train.txt").read_text(encoding="utf-8"),
            (TEXT / "ppl.txt").read_text(encoding="utf-8")]


def train_bpe(vocab_size, pre_tokenizer, normalizer=None, leading_specials=()):
    """Byte-level BPE trained on tests/data/text. leading_specials get ids 0..k-1."""
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(leading_specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training_texts(), trainer=trainer)
    return tok


def special(content):
    return AddedToken(content, special=True, normalized=False, lstrip=False, rstrip=False,
                      single_word=False)


def make_tokenizers():
    """Four tokenizers, one per fixture, each with a different pre-tokenizer."""
    toks = {}

    # OPT: GPT-2 ByteLevel regex; OPT's layout of specials (<s> <pad> </s> <unk> first)
    # and its habit of starting every sequence with </s>.
    t = train_bpe(700, pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                use_regex=True),
                  leading_specials=["<s>", "<pad>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>"])
    t.post_processor = processors.TemplateProcessing(
        single="</s> $A", pair="</s> $A </s> $B", special_tokens=[("</s>", t.token_to_id("</s>"))])
    toks["opt"] = dict(tok=t, bos="</s>", eos="</s>", unk="<unk>", pad="<pad>",
                       extra=["<|im_start|>", "<|im_end|>"], adds_bos=True)

    # Llama 3: Split(regex) + ByteLevel(use_regex=false), ignore_merges, specials after the
    # vocabulary, <|begin_of_text|> added in front.
    t = train_bpe(900, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]))
    t.model.ignore_merges = True
    t.add_special_tokens([special(s) for s in
                          ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]])
    bos_id = t.token_to_id("<|begin_of_text|>")
    t.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A",
            pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bos_id)])])
    toks["llama"] = dict(tok=t, bos="<|begin_of_text|>", eos="<|end_of_text|>", unk=None, pad=None,
                         extra=["<|im_start|>", "<|im_end|>"], adds_bos=True)

    # Qwen2: NFC + Split(regex, single digits) + ByteLevel(use_regex=false); no BOS.
    t = train_bpe(800, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)]),
        normalizer=normalizers.NFC())
    t.add_special_tokens([special(s) for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    t.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                            use_regex=False)
    toks["qwen2"] = dict(tok=t, bos=None, eos="<|im_end|>", unk=None, pad="<|endoftext|>",
                         extra=["<|im_start|>", "<|im_end|>"], adds_bos=False)

    # GGUF llama: GPT-2 regex (tokenizer.ggml.pre = "gpt2"), Llama-2 layout of specials.
    t = train_bpe(600, pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                use_regex=True),
                  leading_specials=["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"])
    toks["llama-gguf"] = dict(tok=t, bos="<s>", eos="</s>", unk="<unk>", pad=None,
                              extra=["<|im_start|>", "<|im_end|>"], adds_bos=True)
    return toks


def save_tokenizer(spec, out_dir):
    kw = dict(tokenizer_object=spec["tok"], bos_token=spec["bos"], eos_token=spec["eos"],
              unk_token=spec["unk"], pad_token=spec["pad"],
              additional_special_tokens=spec["extra"], clean_up_tokenization_spaces=False,
              model_max_length=4096, chat_template=CHATML_TEMPLATE)
    kw = {k: v for k, v in kw.items() if v is not None}
    fast = PreTrainedTokenizerFast(**kw)
    fast.save_pretrained(out_dir)
    return fast


# ----------------------------------------------------------------------------
# Models


def randomize(model, seed, std_embed, gain):
    """Replaces every parameter with seeded random values so that nothing is
    trivially zero or one: matrices N(0, gain^2/fan_in), embeddings and
    untied heads N(0, std_embed^2), norm weights 1 + N(0, 0.25^2), all biases
    N(0, 0.1^2). Independent of transformers' own init."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            if "norm" in name and name.endswith("weight"):
                v = 1.0 + 0.25 * torch.randn(shape, generator=g)
            elif name.endswith("bias"):
                v = 0.1 * torch.randn(shape, generator=g)
            elif "embed" in name or "lm_head" in name:
                v = std_embed * torch.randn(shape, generator=g)
            else:
                v = (gain / math.sqrt(shape[1])) * torch.randn(shape, generator=g)
            p.copy_(v)
    return model


def model_specs(toks):
    v_opt = toks["opt"]["tok"].get_vocab_size()
    v_llama = toks["llama"]["tok"].get_vocab_size()
    v_qwen = toks["qwen2"]["tok"].get_vocab_size()
    v_qwen_padded = (v_qwen + 63) // 64 * 64  # Qwen pads its embedding rows
    tid = lambda name, s: toks[name]["tok"].token_to_id(s)  # noqa: E731

    opt = OPTConfig(
        vocab_size=v_opt, hidden_size=64, num_hidden_layers=2, ffn_dim=256, num_attention_heads=4,
        max_position_embeddings=128, do_layer_norm_before=True, word_embed_proj_dim=64,
        activation_function="relu", dropout=0.0, attention_dropout=0.0, layerdrop=0.0,
        enable_bias=True, layer_norm_elementwise_affine=True, tie_word_embeddings=True,
        pad_token_id=tid("opt", "<pad>"), bos_token_id=tid("opt", "</s>"),
        eos_token_id=tid("opt", "</s>"))
    llama = LlamaConfig(
        vocab_size=v_llama, hidden_size=64, intermediate_size=172, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rope_theta=10000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        hidden_act="silu", bos_token_id=tid("llama", "<|begin_of_text|>"),
        eos_token_id=[tid("llama", "<|end_of_text|>"), tid("llama", "<|im_end|>")])
    qwen2 = Qwen2Config(
        vocab_size=v_qwen_padded, hidden_size=96, intermediate_size=200, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        use_sliding_window=False, hidden_act="silu", bos_token_id=None,
        eos_token_id=tid("qwen2", "<|im_end|>"))
    return {
        "opt": dict(cls=OPTForCausalLM, config=opt, dtype=torch.float16, seed=SEED + 1,
                    std_embed=0.25, gain=1.2, shard=None),
        "llama": dict(cls=LlamaForCausalLM, config=llama, dtype=torch.float32, seed=SEED + 2,
                      std_embed=0.25, gain=1.2, shard=2),
        "qwen2": dict(cls=Qwen2ForCausalLM, config=qwen2, dtype=torch.bfloat16, seed=SEED + 3,
                      std_embed=0.25, gain=1.2, shard=None),
    }


DTYPE_NAME = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def config_summary(cfg, dtype_name, tokenizer_size):
    """The fields a loader derives from config.json, under engine-neutral names."""
    if cfg.model_type == "opt":
        return {
            "architecture": "OPTForCausalLM", "family": "opt",
            "n_layer": cfg.num_hidden_layers, "hidden": cfg.hidden_size,
            "heads": cfg.num_attention_heads, "kv_heads": cfg.num_attention_heads,
            "head_dim": cfg.hidden_size // cfg.num_attention_heads, "ffn": cfg.ffn_dim,
            "vocab": cfg.vocab_size, "tokenizer_size": tokenizer_size,
            "max_pos": cfg.max_position_embeddings, "pos_offset": 2,
            "norm": "layernorm", "norm_eps": 1e-5, "act": cfg.activation_function,
            "do_layer_norm_before": cfg.do_layer_norm_before, "qkv_bias": cfg.enable_bias,
            "tie_embeddings": cfg.tie_word_embeddings, "bos_id": cfg.bos_token_id,
            "eos_ids": [cfg.eos_token_id], "pad_id": cfg.pad_token_id, "dtype": dtype_name,
        }
    eos = cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id]
    return {
        "architecture": cfg.architectures[0] if cfg.architectures else None,
        "family": "llama",
        "n_layer": cfg.num_hidden_layers, "hidden": cfg.hidden_size,
        "heads": cfg.num_attention_heads, "kv_heads": cfg.num_key_value_heads,
        "head_dim": getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
        "ffn": cfg.intermediate_size, "vocab": cfg.vocab_size, "tokenizer_size": tokenizer_size,
        "max_pos": cfg.max_position_embeddings, "norm": "rmsnorm", "norm_eps": cfg.rms_norm_eps,
        "act": cfg.hidden_act, "qkv_bias": cfg.model_type == "qwen2",
        "tie_embeddings": cfg.tie_word_embeddings, "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling, "bos_id": cfg.bos_token_id, "eos_ids": eos,
        "dtype": dtype_name,
    }


def sample_indices(name, numel, k=6):
    """Deterministic per tensor: first, second, last and k seeded others."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    idx = {0, min(1, numel - 1), numel - 1}
    idx.update(int(i) for i in rng.integers(0, numel, size=k))
    return sorted(idx)


def saved_tensor_expectations(model_dir):
    """Reads back the safetensors files transformers wrote: name -> shape, dtype, sample values."""
    out = {}
    files = sorted(model_dir.glob("*.safetensors"))
    for f in files:
        for name, t in sorted(load_safetensors(str(f)).items()):
            flat = t.reshape(-1).to(torch.float32)
            out[name] = {
                "file": f.name,
                "shape": list(t.shape),
                "dtype": DTYPE_NAME[t.dtype],
                "values": [[i, float(flat[i])] for i in sample_indices(name, flat.numel())],
            }
    return dict(sorted(out.items())), [f.name for f in files]


def save_model(name, spec, tok_spec):
    out_dir = MODELS / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    cfg = spec["config"]
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    model = spec["cls"](cfg).eval()
    randomize(model, spec["seed"], spec["std_embed"], spec["gain"])
    model = model.to(spec["dtype"])
    kw = dict(safe_serialization=True)
    if spec["shard"]:
        total = sum(p.numel() * p.element_size() for p in model.state_dict().values()
                    if p is not None)
        # A limit a little above half the bytes gives exactly two shards here;
        # checked below.
        kw["max_shard_size"] = int(total * 0.55)
    model.save_pretrained(out_dir, **kw)
    save_tokenizer(tok_spec, out_dir)
    tensors, files = saved_tensor_expectations(out_dir)
    if spec["shard"] and len(files) != spec["shard"]:
        raise SystemExit(f"{name}: expected {spec['shard']} shards, transformers wrote {files}")
    expect = {
        "header": header(),
        "config": config_summary(cfg, DTYPE_NAME[spec["dtype"]], tok_spec["tok"].get_vocab_size()),
        "files": files,
        "tensors": tensors,
    }
    write_json(out_dir / "expect.json", expect)


# ----------------------------------------------------------------------------
# GGUF llama


def hf_permute(w, n_head, n_head_kv):
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute: HF's rotate-half row
    order of Q/K to the interleaved pairs llama.cpp's rope expects."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


# Tensor types of the tiny GGUF: each quantized type in several roles.
GGUF_TYPES = {
    "token_embd.weight": QT.Q8_0,
    "output.weight": QT.F16,
    "output_norm.weight": QT.F32,
    0: {"attn_norm": QT.F32, "ffn_norm": QT.F32, "attn_q": QT.Q4_0, "attn_k": QT.Q4_1,
        "attn_v": QT.Q8_0, "attn_output": QT.F16, "ffn_gate": QT.Q4_1, "ffn_up": QT.Q4_0,
        "ffn_down": QT.Q8_0},
    1: {"attn_norm": QT.F32, "ffn_norm": QT.F32, "attn_q": QT.Q8_0, "attn_k": QT.Q4_0,
        "attn_v": QT.F32, "attn_output": QT.Q4_1, "ffn_gate": QT.Q4_0, "ffn_up": QT.Q8_0,
        "ffn_down": QT.Q4_1},
}
HF_TO_GGUF = {
    "input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "ffn_norm",
    "self_attn.q_proj.weight": "attn_q", "self_attn.k_proj.weight": "attn_k",
    "self_attn.v_proj.weight": "attn_v", "self_attn.o_proj.weight": "attn_output",
    "mlp.gate_proj.weight": "ffn_gate", "mlp.up_proj.weight": "ffn_up",
    "mlp.down_proj.weight": "ffn_down",
}


def gguf_tensor_name(hf_name):
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight", GGUF_TYPES["token_embd.weight"]
    if hf_name == "lm_head.weight":
        return "output.weight", GGUF_TYPES["output.weight"]
    if hf_name == "model.norm.weight":
        return "output_norm.weight", GGUF_TYPES["output_norm.weight"]
    parts = hf_name.split(".")
    layer = int(parts[2])
    role = HF_TO_GGUF[".".join(parts[3:])]
    return f"blk.{layer}.{role}.weight", GGUF_TYPES[layer][role]


def make_gguf(tok_spec):
    out_dir = MODELS / "llama-gguf"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    tok = tok_spec["tok"]
    tj = json.loads(tok.to_str())
    vocab = tj["model"]["vocab"]
    n_tok = tok.get_vocab_size()
    n_vocab = (n_tok + 15) // 16 * 16  # padded like convert_hf_to_gguf does: [PAD<i>] tokens
    tokens = [None] * n_tok
    for s, i in vocab.items():
        tokens[i] = s
    for a in tj["added_tokens"]:
        tokens[a["id"]] = a["content"]
    specials = {a["content"] for a in tj["added_tokens"] if a["special"]}
    types = [int(gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL)
             for t in tokens]
    for i in range(n_tok, n_vocab):
        tokens.append(f"[PAD{i}]")
        types.append(int(gguf.TokenType.UNUSED))
    merges = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]

    cfg = LlamaConfig(
        vocab_size=n_vocab, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        rope_theta=50000.0, rope_scaling=None, rms_norm_eps=1e-6, tie_word_embeddings=False,
        hidden_act="silu", bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"))
    cfg._attn_implementation = "eager"
    seed = SEED + 4
    torch.manual_seed(seed)
    src = randomize(LlamaForCausalLM(cfg).eval(), seed, 0.25, 1.2)

    path = out_dir / "tiny-llama.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_type("model")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    w.add_vocab_size(n_vocab)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tok.token_to_id("<s>"))
    w.add_eos_token_id(tok.token_to_id("</s>"))
    w.add_unk_token_id(tok.token_to_id("<unk>"))
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    expect_tensors = {}
    for hf_name, t in src.state_dict().items():
        name, qtype = gguf_tensor_name(hf_name)
        data = t.detach().to(torch.float32).numpy()
        permuted = False
        if hf_name.endswith("q_proj.weight"):
            data = hf_permute(data, cfg.num_attention_heads, cfg.num_attention_heads)
            permuted = True
        elif hf_name.endswith("k_proj.weight"):
            data = hf_permute(data, cfg.num_attention_heads, cfg.num_key_value_heads)
            permuted = True
        data = np.ascontiguousarray(data)
        if qtype == QT.F32:
            stored = data.astype(np.float32)
            w.add_tensor(name, stored)
            values = stored
        elif qtype == QT.F16:
            stored = data.astype(np.float16)
            w.add_tensor(name, stored)
            values = stored.astype(np.float32)
        else:
            stored = gguf.quants.quantize(data, qtype)
            w.add_tensor(name, stored, raw_dtype=qtype)
            values = gguf.quants.dequantize(stored, qtype)
        flat = values.reshape(-1)
        entry = {
            "hf_name": hf_name,
            "dtype": qtype.name.lower(),
            "ne": list(reversed(data.shape)),
            "shape": list(data.shape),
            "permuted": permuted,
            "nbytes": int(stored.nbytes),
            "values": [[i, float(flat[i])] for i in sample_indices(name, flat.size)],
        }
        if qtype not in (QT.F32, QT.F16):
            block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
            entry["block_size"] = block_size
            entry["first_block_hex"] = bytes(stored.reshape(-1)[:type_size]).hex()
        expect_tensors[name] = entry
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"  wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")

    expect = {
        "header": header(),
        "config": {
            "architecture": "llama", "family": "llama", "n_layer": cfg.num_hidden_layers,
            "hidden": cfg.hidden_size, "heads": cfg.num_attention_heads,
            "kv_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
            "ffn": cfg.intermediate_size, "vocab": n_vocab, "tokenizer_size": n_tok,
            "max_pos": cfg.max_position_embeddings, "norm": "rmsnorm", "norm_eps": cfg.rms_norm_eps,
            "act": "silu", "qkv_bias": False, "tie_embeddings": False,
            "rope_theta": cfg.rope_theta, "rope_scaling": None,
            "rope_layout": "interleaved (Q/K rows permuted as convert_hf_to_gguf.py does)",
            "bos_id": cfg.bos_token_id, "eos_ids": [cfg.eos_token_id],
            "unk_id": tok.token_to_id("<unk>"), "add_bos": True, "tokenizer_pre": "gpt2",
            "n_merges": len(merges), "file_type": int(gguf.LlamaFileType.MOSTLY_Q4_1),
        },
        "tensors": dict(sorted(expect_tensors.items())),
    }
    write_json(out_dir / "expect.json", expect)
    return src, path


# ----------------------------------------------------------------------------
# Tokenizer golden


def digits_isolated_tokenizer(fast):
    """The demo model's tokenizer with tokenizer.ggml.pre = "smollm" honoured:
    every \\p{N} split off before the GPT-2 regex (llama.cpp's smollm pre-tokenizer,
    and SmolLM2's own tokenizer.json). transformers' GGUF loader ignores that key."""
    t = Tokenizer.from_str(fast.backend_tokenizer.to_str())
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    t.post_processor = None
    return t


def run_cases(fast, raw, strings, add_bos):
    out = []
    for s in strings:
        ids = fast(s, add_special_tokens=add_bos)["input_ids"]
        if raw is not None:
            ids_raw = raw.encode(s, add_special_tokens=add_bos).ids
            if ids_raw != ids:
                raise SystemExit(f"tokenizer and its tokenizer.json disagree on {s!r}")
        out.append({"text": s, "ids": ids,
                    "tokens": fast.convert_ids_to_tokens(ids),
                    "decoded": fast.backend_tokenizer.decode(ids, skip_special_tokens=False)})
    return out


def tokenizer_golden(toks, with_model):
    entries = []
    bos_cases = cases.TOKENIZER_CASES[:8] + cases.TOKENIZER_CASES[31:34]
    for name in ["opt", "llama", "qwen2"]:
        d = MODELS / name
        fast = AutoTokenizer.from_pretrained(d)
        raw = Tokenizer.from_file(str(d / "tokenizer.json"))
        base = {"name": name, "source": rel(d / "tokenizer.json"), "kind": "json"}
        entries.append({**base, "add_bos": False,
                        "cases": run_cases(fast, raw, cases.TOKENIZER_CASES, False)})
        if toks[name]["adds_bos"]:
            entries.append({**base, "name": name + "/bos", "add_bos": True,
                            "bos_id": fast.bos_token_id,
                            "cases": run_cases(fast, raw, bos_cases, True)})

    gpath = MODELS / "llama-gguf" / "tiny-llama.gguf"
    fast = AutoTokenizer.from_pretrained(gpath.parent, gguf_file=gpath.name)
    raw = toks["llama-gguf"]["tok"]  # the tokenizer the GGUF metadata was written from
    base = {"name": "llama-gguf", "source": rel(gpath), "kind": "gguf"}
    entries.append({**base, "add_bos": False,
                    "cases": run_cases(fast, raw, cases.TOKENIZER_CASES, False)})
    raw_bos = Tokenizer.from_str(raw.to_str())
    raw_bos.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", raw.token_to_id("<s>"))])
    entries.append({**base, "name": "llama-gguf/bos", "add_bos": True, "bos_id": fast.bos_token_id,
                    "cases": run_cases(fast, raw_bos, bos_cases, True)})

    if with_model:
        fast = AutoTokenizer.from_pretrained(DEMO_DIR, gguf_file=DEMO_NAME)
        iso = digits_isolated_tokenizer(fast)
        cs = run_cases(fast, None, cases.TOKENIZER_CASES, False)
        n_diff = 0
        for c in cs:
            alt = iso.encode(c["text"], add_special_tokens=False).ids
            if alt != c["ids"]:
                c["ids_pre_smollm"] = alt
                n_diff += 1
        entries.append({
            "name": "smollm2", "source": "../../models/" + DEMO_NAME, "kind": "gguf",
            "requires_model": True, "add_bos": False,
            "note": ("ids: the tokenizer transformers rebuilds from the GGUF (GPT-2 ByteLevel "
                     "regex; it ignores tokenizer.ggml.pre). ids_pre_smollm, present only "
                     "where it differs: with tokenizer.ggml.pre = 'smollm' honoured, i.e. every "
                     "\\p{N} split off first, as llama.cpp and SmolLM2's own tokenizer.json "
                     f"do ({n_diff} cases differ)."),
            "cases": cs})
    write_json(DATA / "tokenizer" / "golden.json", {
        "header": header(),
        "tokenizers": entries,
    })


# ----------------------------------------------------------------------------
# Forward goldens


def layer_modules(model):
    if model.config.model_type == "opt":
        dec = model.model.decoder
        return dec.layers, dec.final_layer_norm
    return model.model.layers, model.model.norm


def forward_with_hidden(model, ids):
    """Logits [n_tokens, n_vocab] and, at the last position, the input of layer 0
    (embeddings, + positions for OPT), the output of every layer and of the final norm."""
    layers, final_norm = layer_modules(model)
    rec = {}

    def pre_hook(m, args, kwargs):
        h = args[0] if args else kwargs["hidden_states"]
        rec["embed"] = h[0, -1].clone()

    hooks = [layers[0].register_forward_pre_hook(pre_hook, with_kwargs=True)]
    for i, layer in enumerate(layers):
        def hook(m, args, out, i=i):
            h = out[0] if isinstance(out, tuple) else out
            rec[f"layer{i}"] = h[0, -1].clone()
        hooks.append(layer.register_forward_hook(hook))
    hooks.append(final_norm.register_forward_hook(
        lambda m, args, out: rec.__setitem__("final_norm", out[0, -1].clone())))
    try:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].to(torch.float32)
    finally:
        for h in hooks:
            h.remove()
    hidden = {"embed": floats(rec["embed"]),
              "layers": [floats(rec[f"layer{i}"]) for i in range(len(layers))],
              "final_norm": floats(rec["final_norm"])}
    return logits, hidden


def greedy(model, ids, n):
    seq = list(ids)
    margins = []
    with torch.no_grad():
        for _ in range(n):
            last = model(torch.tensor([seq])).logits[0, -1].to(torch.float32)
            top2 = torch.topk(last, 2).values
            nxt = int(torch.argmax(last))
            margins.append(float(top2[0] - top2[1]))
            seq.append(nxt)
        gen = model.generate(torch.tensor([ids]),
                             attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=n, min_new_tokens=0,
                             eos_token_id=None, pad_token_id=0, num_beams=1)
    cached = gen[0, len(ids):].tolist()
    if cached != seq[len(ids):]:
        print(f"  note: generate() with a KV cache gives {cached}, the recompute loop "
              f"{seq[len(ids):]} (min margin {min(margins):.3g})")
    return seq[len(ids):], margins, cached == seq[len(ids):]


def forward_golden(name, model, tokenize, source, note):
    prompts = []
    for text, n in cases.FORWARD_PROMPTS:
        ids_full = tokenize(text)
        if len(ids_full) < n:
            raise SystemExit(f"{name}: prompt {text!r} gives {len(ids_full)} tokens, need {n}")
        ids = ids_full[:n]
        logits, hidden = forward_with_hidden(model, ids)
        first = n - cases.LOGIT_POSITIONS
        gen, margins, same = greedy(model, ids, cases.N_GREEDY)
        prompts.append({
            "text": text,
            "ids": ids,
            "logits_positions": list(range(first, n)),
            "logits": [floats(logits[p]) for p in range(first, n)],
            "greedy": gen,
            "greedy_margins": margins,
            "greedy_matches_kv_cache_generate": same,
            "hidden_last_position": hidden,
        })
    write_json(GOLDEN / f"{name}.json", {
        "header": header(),
        "fixture": name,
        "model": source,
        "compute": note,
        "prompt_ids": "the first n ids the fixture's tokenizer gives for text, with its default "
                      "special tokens (a BOS where it adds one)",
        "greedy_method": GREEDY_METHOD,
        "hidden": "at the last prompt position: embed = input of layer 0 (token embedding, "
                  "plus the learned position for OPT); layers[i] = output of layer i "
                  "(residual stream); final_norm = output of the final norm",
        "n_vocab": model.config.vocab_size,
        "prompts": prompts,
    })


def load_f32(path, **kw):
    m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                             attn_implementation="eager", **kw)
    return m.eval()


def forward_goldens(gguf_src):
    for name in ["opt", "llama", "qwen2"]:
        d = MODELS / name
        fast = AutoTokenizer.from_pretrained(d)
        stored = json.loads((d / "expect.json").read_text())["config"]["dtype"]
        forward_golden(name, load_f32(d), lambda s: fast(s)["input_ids"], rel(d),
                       f"transformers {name} model loaded from the saved files with "
                       f"torch_dtype=float32 (stored {stored} weights upcast exactly), eager "
                       f"attention, CPU")
    gpath = MODELS / "llama-gguf" / "tiny-llama.gguf"
    model = load_f32(gpath.parent, gguf_file=gpath.name)
    check_gguf_model(model, gguf_src, gpath)
    fast = AutoTokenizer.from_pretrained(gpath.parent, gguf_file=gpath.name)
    forward_golden("llama-gguf", model, lambda s: fast(s)["input_ids"], rel(gpath),
                   "transformers LlamaForCausalLM loaded from the GGUF (gguf_file=): quantized "
                   "tensors dequantized to float32 by gguf.quants, Q/K rows un-permuted back to "
                   "Hugging Face order; float32, eager attention, CPU")


def hf_unpermute(w, n_head, n_head_kv):
    """Inverse of hf_permute (what transformers' GGUF loader applies)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def check_gguf_model(model, src, gpath):
    """The model transformers reads back from the GGUF must hold exactly the
    stored (dequantized, un-permuted) values, and those must be close to the
    source weights (a wrong row order or block layout would not be)."""
    reader = gguf.GGUFReader(str(gpath))
    cfg = src.config
    by_gguf = {gguf_tensor_name(k)[0]: k for k in src.state_dict()}
    ref_sd = src.state_dict()
    got_sd = model.state_dict()
    for t in reader.tensors:
        hf_name = by_gguf[t.name]
        ref = ref_sd[hf_name].numpy()
        stored = gguf.quants.dequantize(t.data, t.tensor_type).reshape(ref.shape).astype(np.float32)
        if hf_name.endswith("q_proj.weight"):
            stored = hf_unpermute(stored, cfg.num_attention_heads, cfg.num_attention_heads)
        elif hf_name.endswith("k_proj.weight"):
            stored = hf_unpermute(stored, cfg.num_attention_heads, cfg.num_key_value_heads)
        got = got_sd[hf_name].numpy()
        if not np.array_equal(got, stored):
            raise SystemExit(f"transformers read {t.name} back differently from what was stored")
        err = float(np.abs(stored - ref).max())
        if err > 0.1 * float(np.abs(ref).max()) or (t.tensor_type == QT.F32 and err != 0.0):
            raise SystemExit(f"{t.name} ({t.tensor_type.name}): error {err} against the source")
    if len(reader.tensors) != len(ref_sd):
        raise SystemExit("the GGUF does not hold every tensor of the source model")


# ----------------------------------------------------------------------------
# SmolLM2


def smollm2_golden():
    fast = AutoTokenizer.from_pretrained(DEMO_DIR, gguf_file=DEMO_NAME)
    iso = digits_isolated_tokenizer(fast)

    def tokenize(text):
        ids = fast(text, add_special_tokens=False)["input_ids"]
        alt = iso.encode(text, add_special_tokens=False).ids
        if alt != ids:
            raise SystemExit(f"smollm2: the two pre-tokenizations differ on {text[:40]!r}; "
                             "pick text where they agree")
        return ids

    model = load_f32(DEMO_DIR, gguf_file=DEMO_NAME)
    prompts = []
    for text in cases.SMOLLM2_PROMPTS:
        ids = tokenize(text)
        with torch.no_grad():
            last = model(torch.tensor([ids])).logits[0, -1].to(torch.float32)
        top = torch.topk(last, cases.SMOLLM2_TOPK)
        gen, margins, same = greedy(model, ids, cases.N_GREEDY)
        entry = {
            "text": text,
            "ids": ids,
            "last_logits_top_ids": [int(i) for i in top.indices],
            "last_logits_top_values": floats(top.values),
            "last_logits_logsumexp": float(torch.logsumexp(last, 0)),
            "greedy": gen,
            "greedy_text": fast.decode(gen),
            "greedy_margins": margins,
            "greedy_matches_kv_cache_generate": same,
        }
        if not prompts:
            entry["last_logits"] = floats(last)
        prompts.append(entry)

    text = (TEXT / "ppl.txt").read_text(encoding="utf-8")
    ids = tokenize(text)
    n_ctx = cases.PPL_CTX
    n_chunks = len(ids) // n_ctx
    chunk_nll = []
    with torch.no_grad():
        for c in range(n_chunks):
            chunk = ids[c * n_ctx:(c + 1) * n_ctx]
            logits = model(torch.tensor([chunk])).logits[0].to(torch.float32)
            logp = torch.log_softmax(logits[:-1], dim=-1)
            nll = -logp.gather(1, torch.tensor(chunk[1:]).unsqueeze(1)).squeeze(1)
            chunk_nll.append(float(nll.to(torch.float64).sum()))
    n_scored = n_chunks * (n_ctx - 1)
    total = math.fsum(chunk_nll)
    write_json(GOLDEN / "smollm2.json", {
        "header": header(),
        "model": "../../models/" + DEMO_NAME,
        "requires_model": True,
        "compute": "transformers LlamaForCausalLM loaded from the GGUF (gguf_file=), every "
                   "tensor dequantized to float32 by gguf.quants; float32, eager attention, CPU",
        "bos": "none: tokenizer.ggml.add_bos_token is false in the file. (transformers' GGUF "
               "tokenizer would prepend id 1 <|im_start|> because it ignores that key; "
               "the ids here are tokenizer(text, add_special_tokens=False).)",
        "tokenizer": "prompt and text ids checked equal under both pre-tokenizations "
                     "(GPT-2 regex, and 'smollm': digits split off first)",
        "greedy_method": GREEDY_METHOD,
        "n_vocab": model.config.vocab_size,
        "prompts": prompts,
        "perplexity": {
            "text": rel(TEXT / "ppl.txt"),
            "procedure": (f"ids = tokenizer(text) without BOS; cut into non-overlapping chunks "
                          f"of n_ctx = {n_ctx} tokens from the start, the incomplete tail chunk "
                          f"dropped; each chunk is run alone (fresh context, no BOS added); in "
                          f"each chunk positions 0..n_ctx-2 predict tokens 1..n_ctx-1, all "
                          f"scored; nll = -log_softmax(float32 logits)[next token]; ppl = "
                          f"exp(sum nll / n_scored)"),
            "n_ctx": n_ctx,
            "n_tokens": len(ids),
            "n_chunks": n_chunks,
            "n_scored": n_scored,
            "chunk_nll_sum": chunk_nll,
            "nll_mean": total / n_scored,
            "ppl": math.exp(total / n_scored),
            "ids": ids,
        },
    })


# ----------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-model", action="store_true",
                    help="skip everything that needs the demo model (smollm2.json and the "
                         "smollm2 entry of tokenizer/golden.json)")
    args = ap.parse_args()

    with_model = not args.no_model
    if with_model and not (DEMO_DIR / DEMO_NAME).is_file():
        raise SystemExit(f"make_fixtures: {DEMO_DIR / DEMO_NAME} is missing; run "
                         "scripts/fetch-demo-model.sh first, or pass --no-model")

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()

    print("tokenizers")
    toks = make_tokenizers()
    print("models")
    for name, spec in model_specs(toks).items():
        save_model(name, spec, toks[name])
    print("gguf")
    gguf_src, _ = make_gguf(toks["llama-gguf"])
    print("tokenizer golden")
    tokenizer_golden(toks, with_model)
    print("forward goldens")
    forward_goldens(gguf_src)
    if with_model:
        print("smollm2 golden")
        smollm2_golden()


if __name__ == "__main__":
    main()
