#!/usr/bin/env python3
"""Golden dequantizations of the GGUF-only formats, from gguf-py.

For each of Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: random blocks (random
bytes, with every f16 scale and minimum field set to a random finite value
of a plausible size) and gguf.quants.dequantize's float32 values for them.
Q8_K, which gguf-py does not dequantize, gets its definition (d * q, in
float32) computed here. Written to tests/data/golden/gguf_quants.json:
per format the block bytes and the values (f32, little-endian), base64.

    python3 scripts/make_gguf_quant_goldens.py     (needs gguf==0.17.1, numpy)
"""
import base64
import json
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "golden", "gguf_quants.json")
N_BLOCKS = 12

# (name, type, block bytes, byte offsets of its f16 scale/min fields)
FORMATS = [
    ("q5_0", T.Q5_0, 22, [0]),
    ("q5_1", T.Q5_1, 24, [0, 2]),
    ("q2_k", T.Q2_K, 84, [80, 82]),
    ("q3_k", T.Q3_K, 110, [108]),
    ("q4_k", T.Q4_K, 144, [0, 2]),
    ("q5_k", T.Q5_K, 176, [0, 2]),
    ("q6_k", T.Q6_K, 210, [208]),
]


def b64(a):
    return base64.b64encode(a.tobytes()).decode()


def main():
    rng = np.random.default_rng(2026)
    out = {"gguf": "0.17.1", "formats": {}}
    for name, qtype, nbytes, f16_fields in FORMATS:
        blocks = rng.integers(0, 256, size=(N_BLOCKS, nbytes), dtype=np.uint8)
        for off in f16_fields:
            vals = (rng.standard_normal(N_BLOCKS) * 0.02).astype(np.float16)
            blocks[:, off:off + 2] = vals.view(np.uint8).reshape(N_BLOCKS, 2)
        values = quants.dequantize(blocks.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert values.size == N_BLOCKS * (32 if name in ("q5_0", "q5_1") else 256)
        assert np.isfinite(values).all()
        out["formats"][name] = {"blocks": b64(blocks), "values": b64(values)}
    # Q8_K: f32 d, 256 int8, 16 int16 sums (unused).
    blocks = rng.integers(0, 256, size=(N_BLOCKS, 292), dtype=np.uint8)
    d = (rng.standard_normal(N_BLOCKS) * 0.01).astype(np.float32)
    blocks[:, 0:4] = d.view(np.uint8).reshape(N_BLOCKS, 4)
    q = blocks[:, 4:260].view(np.int8).astype(np.float32)
    values = (d[:, None] * q).astype(np.float32).reshape(-1)
    out["formats"]["q8_k"] = {"blocks": b64(blocks), "values": b64(values)}
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{len(out['formats'])} formats x {N_BLOCKS} blocks -> {OUT}")


if __name__ == "__main__":
    main()
