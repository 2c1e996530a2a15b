// GGUF reader: header, metadata and tensor infos (io/gguf.h), every value
// decoded the way the model and tokenizer loaders ask for it.
#include "fuzz_input.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  return fuzz::guarded([&] {
    const GgufFile g(fuzz::write_scratch("in.gguf", data, size));
    for (const auto& [key, v] : g.metadata()) {
      if (v.type == GgufType::kArray) {
        switch (v.elem_type) {
          case GgufType::kString:
            (void)g.get_string_array(key);
            break;
          case GgufType::kF32:
          case GgufType::kF64:
            (void)g.get_float_array(key);
            break;
          default:
            (void)g.get_int_array(key);
        }
      } else if (v.type == GgufType::kString) {
        (void)g.get_string(key);
      } else if (v.type == GgufType::kF32 || v.type == GgufType::kF64) {
        (void)g.get_float(key);
      } else {
        (void)g.get_int(key);
      }
    }
    for (const GgufTensorInfo& t : g.tensors()) (void)g.find_tensor(t.name);
  });
}
