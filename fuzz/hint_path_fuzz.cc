// NormalizeHintPath: every line a pod writes to .spoke-hints. Never crashes; what it accepts
// is bounded and already normal: written back as a line (with a CRLF ending, whose CR the
// function strips) it normalises to itself. The same bytes as a path typed for spokectl or
// the agent API (NormalizePathInVolume): never escapes the volume, and what it returns is a
// path the strict check accepts unchanged.
#include "cache-agent/prefetch/hint_predictor.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spoke;
  const std::string_view text = fuzz::AsText(data, size);
  if (auto typed = NormalizePathInVolume(text, "path")) {
    SPOKE_FUZZ_CHECK(NormalizeRelativePath(*typed, "path").value_or("<refused>") == *typed);
    SPOKE_FUZZ_CHECK(NormalizePathInVolume(*typed, "path").value_or("<refused>") == *typed);
  }
  auto path = agent::NormalizeHintPath(text);
  if (!path) return 0;
  SPOKE_FUZZ_CHECK(path->size() <= agent::kMaxHintPath);
  SPOKE_FUZZ_CHECK(path->find('\0') == std::string::npos);
  auto again = agent::NormalizeHintPath(*path + "\r");
  SPOKE_FUZZ_CHECK(again.has_value() && *again == *path);
  return 0;
}
