// A hardware profile (--hardware FILE, strata profile -o): YAML, every field
// checked, and written back.
#include "fuzz_input.h"
#include "policy/hardware.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  return fuzz::guarded([&] {
    const HardwareProfile hw =
        parse_hardware_profile(std::string(fuzz::as_text(data, size)), "fuzz.yaml");
    (void)hardware_profile_to_yaml(hw);
  });
}
