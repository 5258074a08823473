// Per-driver knowledge of the CTS run: see backends.cc.

#ifndef THAL_IREE_CTS_BACKENDS_H_
#define THAL_IREE_CTS_BACKENDS_H_

#include <string>
#include <vector>

#include "iree/hal/cts/util/registry.h"

namespace thal::iree_cts {

// What the CTS may expect of one IREE driver.
struct DriverProfile {
  // The IREE driver name ("local-sync").
  std::string driver_name;
  // Capability tags: a suite registered with required tags runs only if the driver has them all.
  std::vector<std::string> tags;
  // Cases the driver can never pass, with why.
  std::vector<iree::hal::cts::TestUnsupported> unsupported;
  // Cases the driver should pass but does not yet, with what is missing.
  std::vector<iree::hal::cts::TestExpectedFailure> expected_failures;
};

// The profile of `driver_name`; an unknown driver gets no tags and skips nothing.
DriverProfile FindDriverProfile(const std::string& driver_name);

}  // namespace thal::iree_cts

#endif  // THAL_IREE_CTS_BACKENDS_H_
