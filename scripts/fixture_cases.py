"""Inputs of the golden files written by make_fixtures.py: the tokenizer test
strings, the prompts of the forward goldens and of the SmolLM2 golden.

Plain data, no logic. Changing anything here changes the committed goldens, so
regenerate them all (scripts/make_fixtures.py) in the same change.
"""

# Strings every tokenizer fixture is run on. Each stresses a part of a
# byte-level BPE tokenizer: the pre-tokenizer regex (whitespace runs, digits,
# contractions, scripts), the byte-to-unicode map (multi-byte UTF-8, emoji, ZWJ
# sequences), normalization (composed vs decomposed accents), special tokens
# matched inside the text, and the merge loop itself (long words, repeats).
TOKENIZER_CASES = [
    "",
    " ",
    "   ",
    "a",
    "Hello world",
    " Hello world",
    "Hello  world   with    runs     of spaces",
    "trailing spaces   ",
    "\t tab\tseparated\t\tvalues\t",
    "line one\nline two\n\nline four\n",
    "windows\r\nline\r\nends\r\n",
    "\n\n\n   \n\t\n",
    "a\rb",
    "a  1 b   22",
    "12345 67890 3.14159 1,000,000 0.5e-10 2024-01-31",
    "1234567890123456789",
    "x1y22z333 4444abc",
    "I'm sure you're right, he's here and we'll go; they'd've LOVED it. DON'T SHOUT, it'S fine.",
    "'s 're 'll 've 'd 'm 't",
    "中文分词测试：我们在一台机器上运行大语言模型。",
    "日本語のテキストとカタカナ、ひらがな。",
    "안녕하세요 세계",
    "I \u2764\ufe0f \U0001f980 and \U0001f680\U0001f680\U0001f680!",
    "\U0001f469\u200d\U0001f4bb \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 "
    "\U0001f3f3\ufe0f\u200d\U0001f308 \U0001f44d\U0001f3fd",
    "\U0001f1e9\U0001f1ea\U0001f1ef\U0001f1f5\U0001f1fa\U0001f1f8",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 Zo\u00eb",
    "cafe\u0301 nai\u0308ve re\u0301sume\u0301 Zoe\u0308",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u060c "
    "\u0643\u064a\u0641 \u062d\u0627\u0644\u0643\u061f",
    "\u05e9\u05dc\u05d5\u05dd 123 \u05e2\u05d5\u05dc\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|<|im_end|>> and <|im_sta rt|>",
    "<s> </s> <unk> <|endoftext|> <|begin_of_text|> <|end_of_text|>",
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * 2.0f; }",
    '{"key": [1, 2, 3], "nested": {"a": null}}',
    "https://example.com/a/b?c=1&d=2 user@example.org",
    "Wait... what?!?! ---- ==== >>>> (((nested)))",
    "GPU\u306e\u30e1\u30e2\u30ea\u306f16GB\u3067\u3059\u3002RAM 64 GB.",
    "\u2211\u1d62 x\u1d62\u00b2 \u2264 \u221e \u00b1 \u221a2 \u00d7 \u03c0 \u00f7 \u00bd",
    "HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n",
    "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!!!!!!!!",
    "We hold these truths to be self-evident, that all men are created equal,",
    "\U0001d573\U0001d58a\U0001d591\U0001d591\U0001d594 \U00010348 \U00013000",
    "a \t b \n c \u00a0 d \u3000 e",
    "zero\u200bwidth\u200cjoiner\u200d",
    "bell\x07 and \x1b[31mred\x1b[0m",
    "line\u2028sep\u2029para\x85nel",
    "\u0663\u0664\u0665 \u0967\u0968\u0969 \uff11\uff12\uff13",
]

# Forward goldens of the tiny models: (text, n_tokens). The prompt ids are the
# first n_tokens ids the fixture's tokenizer gives for text with its default
# special-token handling (a BOS where the tokenizer adds one).
FORWARD_PROMPTS = [
    ("The quick brown fox jumps over the lazy dog.", 5),
    ("We hold these truths to be self-evident, that all men are created equal, "
     "that they are endowed by their Creator", 11),
    ("def softmax(x):\n    m = max(x)\n    e = [math.exp(v - m) for v in x]\n"
     "    s = sum(e)\n    return [v / s for v in e]\n", 23),
]

# SmolLM2 golden: four prompts of different kinds, used as they are.
SMOLLM2_PROMPTS = [
    "The capital of France is",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village at the foot of the mountains, there lived",
]

N_GREEDY = 16
LOGIT_POSITIONS = 4     # logits recorded at the last LOGIT_POSITIONS prompt positions
SMOLLM2_TOPK = 32       # logits recorded as top-k ids/values at the last prompt position
PPL_CTX = 256           # perplexity: tokens per chunk (non-overlapping chunks)
