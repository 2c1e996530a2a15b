// tokenizer.json (model, pre-tokenizer, normalizer, decoder, added tokens),
// then a round trip of a short text through the tokenizer it describes.
#include "fuzz_input.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  return fuzz::guarded([&] {
    const auto tok = Tokenizer::from_json_file(fuzz::write_scratch("tokenizer.json", data, size));
    const auto ids = tok->encode("Hello world, 12 \xC3\xA9t\xC3\xA9s!\n  <s>", true);
    (void)tok->decode(ids, false);
    (void)tok->decode(ids, true);
  });
}
