// The weight pack's manifest.json: every offset and size checked against a
// weights.bin of the size the first 4 input bytes give.
#include <cstring>

#include "fuzz_input.h"
#include "io/json.h"
#include "offload/pack.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  if (size < 4) return 0;
  uint32_t file_kib = 0;
  std::memcpy(&file_kib, data, 4);
  const std::string_view text = fuzz::as_text(data + 4, size - 4);
  return fuzz::guarded([&] {
    Json j;
    try {
      j = Json::parse(text);
    } catch (const Json::exception&) {
      return;  // Pack::open reports this as an Error; the parser is nlohmann's
    }
    (void)parse_pack_manifest(j, "pack/manifest.json", "pack/weights.bin",
                              uint64_t{file_kib % (1u << 20)} * 1024);
  });
}
