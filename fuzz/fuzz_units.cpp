// Unit and format strings of the command line: sizes (--cpu-mem, --gpu-mem,
// --disk-mem, policy budgets), compression names (--compress-kv,
// --compress-weight, policy), dtype names.
#include "core/dtype.h"
#include "core/units.h"
#include "fuzz_input.h"
#include "policy/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  const std::string_view text = fuzz::as_text(data, size);
  fuzz::guarded([&] { (void)format_bytes(static_cast<double>(parse_bytes(text, "--cpu-mem"))); });
  fuzz::guarded([&] { (void)parse_compression(text, "--compress-kv"); });
  (void)dtype_from_name(text);
  return 0;
}
