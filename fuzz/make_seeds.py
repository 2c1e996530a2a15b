#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from
the repository's test data and presets. Small on purpose: the GGUF seeds keep
the fixture's metadata (vocabulary included) but no tensor data, and one
hand-made GGUF has two tiny tensors. Run from anywhere:
    python3 fuzz/make_seeds.py
Deterministic; rerun after changing a format, and commit the result."""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
OUT = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- GGUF ----
def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_metadata_only(path):
    """The file's header and metadata, with no tensors (count 0)."""
    d = open(path, "rb").read()
    magic, version, n_tensors, n_kv = d[:4], *struct.unpack("<IQQ", d[4:24])
    pos = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(pos, t):
        if t == 8:
            (n,) = struct.unpack_from("<Q", d, pos)
            return pos + 8 + n
        if t == 9:
            et, n = struct.unpack_from("<IQ", d, pos)
            pos += 12
            for _ in range(n):
                pos = skip_value(pos, et)
            return pos
        return pos + sizes[t]

    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", d, pos)
        pos += 8 + klen
        (t,) = struct.unpack_from("<I", d, pos)
        pos = skip_value(pos + 4, t)
    body = d[24:pos]
    return magic + struct.pack("<IQQ", version, 0, n_kv) + body


def gguf_tiny():
    kv = [
        ("general.architecture", 8, gguf_string("llama")),
        ("general.alignment", 4, struct.pack("<I", 32)),
        ("llama.block_count", 4, struct.pack("<I", 1)),
        ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + b"".join(gguf_string(s) for s in ["<s>", "a", "b"])),
        ("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 3) + struct.pack("<3f", 0, -1, -2)),
    ]
    tensors = [("w", [4, 2], 0, 0), ("v", [4], 0, 32)]  # name, ne (GGUF order), type f32, offset
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for k, t, v in kv:
        out += gguf_string(k) + struct.pack("<I", t) + v
    for name, ne, typ, off in tensors:
        out += gguf_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        out += struct.pack("<IQ", typ, off)
    out += b"\0" * (-len(out) % 32)
    return out + struct.pack("<8f", *range(8)) + struct.pack("<4f", 1, 2, 3, 4) + b"\0" * 16


meta = gguf_metadata_only(os.path.join(DATA, "models", "llama-gguf", "tiny-llama.gguf"))
put("gguf", "tiny-llama-metadata.gguf", meta)
put("gguf", "two-tensors.gguf", gguf_tiny())
put("gguf_tokenizer", "tiny-llama-metadata.gguf", meta)
put("gguf_tokenizer", "three-tokens.gguf", gguf_tiny())


# ---- safetensors ----
def safetensors(header, data_bytes):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + b"\0" * data_bytes


put("safetensors", "two-tensors.safetensors", safetensors(
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
     "b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8, 16]},
     "__metadata__": {"format": "pt"}}, 16))
shard = open(os.path.join(DATA, "models", "llama", "model-00002-of-00002.safetensors"), "rb").read()
(hlen,) = struct.unpack_from("<Q", shard, 0)
header = json.loads(shard[8:8 + hlen])
header = {k: v for k, v in header.items() if k == "__metadata__" or v["data_offsets"][1] <= 4096}
end = max([v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"] + [0])
put("safetensors", "fixture-shard-head.safetensors", safetensors(header, end))

put("safetensors_index", "two-shards.json", json.dumps({
    "metadata": {"total_size": 24},
    "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                   "c": "model-00002-of-00002.safetensors"}}, indent=1))
put("safetensors_index", "fixture-index.json",
    open(os.path.join(DATA, "models", "llama", "model.safetensors.index.json")).read())

# ---- tokenizer.json ----
put("tokenizer_json", "fixture-llama.json",
    open(os.path.join(DATA, "models", "llama", "tokenizer.json"), "rb").read())
put("tokenizer_json", "tiny-bpe.json", json.dumps({
    "version": "1.0", "added_tokens": [{"id": 0, "content": "<s>", "special": True}],
    "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"<s>": 0, "a": 1, "b": 2, "ab": 3}, "merges": ["a b"]}}))

# ---- YAML ----
for name in ["flexgen-opt-6.7b-t4.yaml", "flexgen-opt-30b-t4.yaml"]:
    put("policy_yaml", name, open(os.path.join(ROOT, "policies", name)).read())
put("hardware_yaml", "t4-flexgen.yaml",
    open(os.path.join(ROOT, "policies", "hardware", "t4-flexgen.yaml")).read())
put("hardware_yaml", "cpu-kv-reads.yaml", (
    "name: this-machine\ndevice: cpu\nmemory: {cpu: 23.5G, disk: 100G}\n"
    "links: {disk_to_cpu: 1.528G, cpu_to_disk: 1.151G, cpu_to_disk_kv: 1.791G,\n"
    "  disk_to_cpu_kv: {4K: 0.164G, 16K: 0.4467G, 64K: 0.9971G, 256K: 1.025G}}\n"
    "device_compute: {gemm_prefill_tflops: 0.142, gemm_decode_tflops: 0.128,\n"
    "  attention_prefill_tflops: 0.05, attention_decode_tflops: 0.01, mem_bandwidth: 10G}\n"
    "cpu_compute: {gemm_tflops: 0.142, attention_tflops: 0.01, mem_bandwidth: 10G}\n"))

# ---- prompt files (first byte: 0 text, 1 JSONL) ----
put("prompt_file", "text.txt", b"\x00" + "hello world\n\n  the cat sat\r\ncaf\u00e9\n".encode())
put("prompt_file", "jsonl.jsonl", b"\x01" + (
    '{"prompt": "a", "id": "x", "max_new_tokens": 4, "temperature": 0.5, "stop": ["\\n", "."], '
    '"system": "be brief"}\n{"prompt": "b", "id": 7, "stop": "end"}\n').encode())
openai_requests = "\n".join(json.dumps(r) for r in [
    {"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions",
     "body": {"messages": [{"role": "system", "content": "be brief"},
                           {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
              "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "seed": -2, "stop": ["\n"],
              "n": 1, "stream": False, "logprobs": None}},
    {"custom_id": "p1", "method": "POST", "url": "/v1/completions",
     "body": {"prompt": ["once upon"], "max_tokens": 3, "echo": False, "best_of": 1}},
    {"custom_id": "p1", "method": "GET", "url": "/v1/embeddings", "body": {"input": "x"}},
]) + "\nnot json\n"
put("prompt_file", "openai.jsonl", b"\x01" + openai_requests.encode())
put("prompt_file", "openai-forced.jsonl", b"\x02" + openai_requests.encode())

# ---- chat templates: the real ones of tests/data/chat-templates ----
TEMPLATES = os.path.join(DATA, "chat-templates")
for name in sorted(os.listdir(TEMPLATES)):
    if name.endswith(".jinja"):
        with open(os.path.join(TEMPLATES, name), "rb") as f:
            put("chat_template", name, f.read())
put("chat_template", "language.jinja",
    "{% macro m(a, b=2) %}{{ a ~ b }}{{ caller() if caller is defined }}{% endmacro %}"
    "{% set ns = namespace(n=0) %}{% for x in messages if x.role != 'tool' %}"
    "{% set ns.n = ns.n + loop.index %}{{ x.content[1:] | trim | tojson(indent=1) }}"
    "{% if x is mapping and 'tool_calls' in x %}{{ x.tool_calls | map(attribute='function.name') | join(',') }}{% endif %}"
    "{% else %}none{% endfor %}{% call m(1) %}c{% endcall %}{{ ns.n ** 2 // 3 % 5 }}"
    "{{ tools | selectattr('type', 'equalto', 'function') | list | length }}"
    "{{ 'a,b'.split(',') | reverse | first }}{{ range(3) | sum }}{{ strftime_now('%Y') }}")

# ---- pack manifest (4 bytes: weights.bin size in KiB, then the JSON) ----
def manifest():
    tensors = [
        {"name": "blk.0.attn_norm.weight", "shape": [64], "dtype": "f32", "offset": 4096,
         "nbytes": 256, "checksum": "xxh64:0000000000000000"},
        {"name": "blk.0.attn_q.weight", "shape": [64, 64], "dtype": "f32", "offset": 8192,
         "nbytes": 16384, "checksum": "xxh64:0123456789abcdef"}]
    return json.dumps({
        "format": "strata-pack", "version": 2,
        "source": {"path": "m.gguf", "format": "gguf", "files": [
            {"path": "m.gguf", "size": 100, "mtime_ns": 1, "header_checksum": "xxh64:00000000000000ff"}]},
        "options": {"weights": "source"},
        "config": {"arch": "llama", "n_layer": 1, "n_embd": 64, "n_head": 1},
        "weights_file": "weights.bin", "weights_bytes": 28672, "unit_align": 4096, "tensor_align": 4096,
        "units": [{"name": "blk.0", "layer": 0, "offset": 4096, "length": 20480,
                   "checksum": "xxh64:1111111111111111", "tensors": tensors}]}, indent=1)


put("pack_manifest", "one-layer.json", struct.pack("<I", 28) + manifest().encode())

# ---- units ----
for i, s in enumerate(["16G", "1.5T", "512M", "100", "0.25K", "q4", "q8s", "f16", "bf16", "none",
                       "0 100 0 100 0 100", "20 30 0 100 0 100", "0 100 50 50 0 100"]):
    put("units", f"{i:02d}.txt", s)
print(f"seeds written to {os.path.relpath(OUT, os.getcwd())}")
