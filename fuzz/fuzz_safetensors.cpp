// safetensors: the length-prefixed JSON header and every tensor's byte range.
#include "fuzz_input.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  return fuzz::guarded([&] {
    const SafetensorsFile f(fuzz::write_scratch("in.safetensors", data, size));
    for (const SafetensorsTensor& t : f.tensors()) (void)f.bytes(t);
  });
}
