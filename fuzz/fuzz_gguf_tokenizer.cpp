// A tokenizer from GGUF metadata (tokenizer.ggml.*), then a round trip of a
// short text through it.
#include "fuzz_input.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  return fuzz::guarded([&] {
    const GgufFile g(fuzz::write_scratch("tok.gguf", data, size));
    const auto tok = Tokenizer::from_gguf(g);
    const auto ids = tok->encode("Hello world, 12 \xC3\xA9t\xC3\xA9s!\n<|im_start|>", true);
    (void)tok->decode(ids, false);
  });
}
