// The CTS binary's entry (see entry.h): one backend, built at run time for the driver asked for,
// instead of IREE's backends files that each register a fixed driver at static-init time.

#include "entry.h"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends.h"
#include "iree/base/api.h"
#include "iree/base/tooling/flags.h"
#include "iree/hal/api.h"
#include "iree/hal/cts/util/registry.h"
#include "iree/hal/cts/util/test_base.h"
#include "iree/hal/drivers/init.h"
#include "iree/testing/gtest.h"

namespace thal::iree_cts {
namespace {

using iree::hal::cts::BackendConfig;
using iree::hal::cts::BackendInfo;
using iree::hal::cts::CtsRegistry;
using iree::hal::cts::RecordingMode;

// The driver every case's device comes from; set once, before the suites are instantiated.
std::string& DriverName() {
  static std::string name;
  return name;
}

// One compiled executable, 64-byte aligned and NUL-terminated (the NUL not counted), as IREE's
// iree-c-embed-data lays its embedded copies out: the ELF loader reads it in place.
struct ExecutableBytes {
  std::unique_ptr<uint8_t, decltype(&std::free)> data{nullptr, &std::free};
  size_t size = 0;
};

// The compiled executables of this run, by file name ("executable_test.bin"). Filled once, before
// the suites are instantiated, and never changed after: lookups hand out spans into it.
std::map<std::string, ExecutableBytes>& Executables() {
  static std::map<std::string, ExecutableBytes> executables;
  return executables;
}

iree_const_byte_span_t LookUpExecutable(iree_string_view_t file_name) {
  auto& executables = Executables();
  auto found = executables.find(std::string(file_name.data, file_name.size));
  if (found == executables.end()) return iree_const_byte_span_empty();
  return iree_make_const_byte_span(found->second.data.get(), found->second.size);
}

// The backend's device factory: the driver's default device, fresh from the default registry.
iree_status_t CreateDevice(const iree_hal_device_create_params_t* create_params, iree_hal_driver_t** out_driver,
                           iree_hal_device_t** out_device) {
  iree_hal_driver_t* driver = nullptr;
  iree_status_t status =
      iree_hal_driver_registry_try_create(iree_hal_driver_registry_default(),
                                          iree_make_cstring_view(DriverName().c_str()), iree_allocator_system(), &driver);
  iree_hal_device_t* device = nullptr;
  if (iree_status_is_ok(status)) {
    status = iree_hal_driver_create_default_device(driver, create_params, iree_allocator_system(), &device);
  }
  if (!iree_status_is_ok(status)) {
    iree_hal_device_release(device);
    iree_hal_driver_release(driver);
    return status;
  }
  *out_driver = driver;
  *out_device = device;
  return iree_ok_status();
}

// Whether `name` is a driver of the default registry; if not, `available` lists those that are.
bool DriverIsRegistered(const std::string& name, std::string* available) {
  iree_host_size_t count = 0;
  iree_hal_driver_info_t* infos = nullptr;
  iree_status_t status =
      iree_hal_driver_registry_enumerate(iree_hal_driver_registry_default(), iree_allocator_system(), &count, &infos);
  if (!iree_status_is_ok(status)) {
    iree_status_fprint(stderr, status);
    iree_status_free(status);
    return false;
  }
  bool found = false;
  for (iree_host_size_t i = 0; i < count; ++i) {
    std::string driver(infos[i].driver_name.data, infos[i].driver_name.size);
    found = found || driver == name;
    if (!available->empty()) available->append(", ");
    available->append(driver);
  }
  iree_allocator_free(iree_allocator_system(), infos);
  return found;
}

// Reads every `*.bin` of `dir` into Executables().
bool LoadExecutables(const std::filesystem::path& dir, std::string* error) {
  std::error_code code;
  for (const auto& entry : std::filesystem::directory_iterator(dir, code)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".bin") continue;
    std::ifstream file(entry.path(), std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    if (!file.good() && !file.eof()) {
      *error = "cannot read " + entry.path().string();
      return false;
    }
    constexpr size_t kAlignment = 64;
    ExecutableBytes executable;
    executable.size = bytes.size();
    executable.data.reset(static_cast<uint8_t*>(
        std::aligned_alloc(kAlignment, (bytes.size() + 1 + kAlignment - 1) / kAlignment * kAlignment)));
    if (!executable.data) {
      *error = "out of memory reading " + entry.path().string();
      return false;
    }
    std::memcpy(executable.data.get(), bytes.data(), bytes.size());
    executable.data.get()[bytes.size()] = 0;
    Executables()[entry.path().filename().string()] = std::move(executable);
  }
  if (code) {
    *error = "cannot list " + dir.string() + ": " + code.message();
    return false;
  }
  if (Executables().empty()) {
    *error = "no *.bin in " + dir.string();
    return false;
  }
  return true;
}

// `text` with every character a gtest name cannot hold replaced by '_'.
std::string GtestName(const std::string& text) {
  std::string name = text;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

std::vector<std::string> SplitTags(const char* list) {
  std::vector<std::string> tags;
  std::string tag;
  for (const char* c = list;; ++c) {
    if (*c == ',' || *c == '\0') {
      if (!tag.empty()) tags.push_back(tag);
      tag.clear();
      if (*c == '\0') break;
    } else if (!std::isspace(static_cast<unsigned char>(*c))) {
      tag.push_back(*c);
    }
  }
  return tags;
}

int Run(const thal_iree_cts_options_t* options, int argc, char** argv, thal_iree_cts_suite_report_fn report,
        void* user_data) {
  // IREE's flags first (e.g. --task_topology_max_group_count), as IREE's CTS main does; gtest's stay.
  iree_flags_parse_checked(IREE_FLAGS_PARSE_MODE_UNDEFINED_OK | IREE_FLAGS_PARSE_MODE_CONTINUE_AFTER_HELP, &argc,
                           &argv);

  // IREE's built-in drivers (local-sync, local-task) join whatever the caller registered.
  iree_status_t status = iree_hal_register_all_available_drivers(iree_hal_driver_registry_default());
  if (iree_status_is_already_exists(status)) {
    iree_status_free(status);
    status = iree_ok_status();
  }
  if (!iree_status_is_ok(status)) {
    iree_status_fprint(stderr, status);
    iree_status_free(status);
    return 2;
  }

  DriverName() = options->driver_name ? options->driver_name : "local-sync";
  std::string available;
  if (!DriverIsRegistered(DriverName(), &available)) {
    std::fprintf(stderr, "iree-cts: no driver '%s' is registered (registered: %s)\n", DriverName().c_str(),
                 available.c_str());
    return 2;
  }

  DriverProfile profile = FindDriverProfile(DriverName());
  if (options->tags) profile.tags = SplitTags(options->tags);

  // Names the registry keeps as `const char*` for the whole run.
  static std::string backend_name;
  static std::string executable_format;
  backend_name = GtestName(DriverName());
  executable_format = options->executable_format ? options->executable_format : "embedded-elf-" IREE_ARCH;

  BackendInfo info;
  info.name = backend_name;
  info.factory = CreateDevice;
  info.recording_mode = RecordingMode::kDirect;
  info.unsupported_tests = profile.unsupported;
  info.expected_failures = profile.expected_failures;
  CtsRegistry::RegisterBackend(BackendConfig{backend_name.c_str(), info, profile.tags, {}});

  std::string format_note = "none (executable suites not instantiated)";
  if (options->testdata_dir) {
    std::string error;
    if (!LoadExecutables(options->testdata_dir, &error)) {
      std::fprintf(stderr, "iree-cts: %s\n", error.c_str());
      return 2;
    }
    // IREE names its embedded-ELF testdata "llvm_cpu"; other formats go by their own name.
    std::string format_name = executable_format.rfind("embedded-elf-", 0) == 0 ? "llvm_cpu" : GtestName(executable_format);
    CtsRegistry::RegisterExecutableFormat(backend_name.c_str(),
                                          {format_name, executable_format.c_str(), LookUpExecutable});
    format_note = executable_format + " (" + std::to_string(Executables().size()) + " executables from " +
                  options->testdata_dir + ")";
  }

  std::string tag_note;
  for (const auto& tag : profile.tags) tag_note += (tag_note.empty() ? "" : ",") + tag;
  std::printf("iree-cts: driver %s, backend %s, tags [%s], executables: %s\n", DriverName().c_str(),
              backend_name.c_str(), tag_note.c_str(), format_note.c_str());
  std::fflush(stdout);

  // Suites are instantiated before gtest initializes (it enumerates them then), as IREE's main does.
  CtsRegistry::InstantiateAll();
  ::testing::InitGoogleTest(&argc, argv);
  // Releases the device each backend caches across cases, at the end of the run.
  ::testing::AddGlobalTestEnvironment(new iree::hal::cts::CtsBackendCacheEnvironment);
  int result = RUN_ALL_TESTS();

  const ::testing::UnitTest* unit_test = ::testing::UnitTest::GetInstance();
  for (int i = 0; report && i < unit_test->total_test_suite_count(); ++i) {
    const ::testing::TestSuite* suite = unit_test->GetTestSuite(i);
    if (!suite->should_run()) continue;
    int passed = 0, failed = 0, skipped = 0;
    for (int j = 0; j < suite->total_test_count(); ++j) {
      const ::testing::TestInfo* test = suite->GetTestInfo(j);
      if (!test->should_run()) continue;
      if (test->result()->Failed()) {
        ++failed;
      } else if (test->result()->Skipped()) {
        ++skipped;
      } else {
        ++passed;
      }
    }
    report(user_data, suite->name(), passed, failed, skipped);
  }
  return result == 0 ? 0 : 1;
}

}  // namespace
}  // namespace thal::iree_cts

extern "C" int thal_iree_cts_main(const thal_iree_cts_options_t* options, int argc, char** argv,
                                  thal_iree_cts_suite_report_fn report, void* user_data) {
  return thal::iree_cts::Run(options, argc, argv, report, user_data);
}
