#include "tessera/tokenizer/unicode_classes.h"

#include <algorithm>
#include <iterator>

namespace tessera::tokenizer {
namespace {

struct UnicodeRun {
  char32_t first;
  CharClass cls;
};

#include "tessera/tokenizer/unicode_ranges.inc"

}  // namespace

CharClass classify(char32_t code_point) {
  auto after = std::upper_bound(std::begin(kUnicodeRuns), std::end(kUnicodeRuns), code_point,
                                [](char32_t cp, const UnicodeRun& run) { return cp < run.first; });
  return after == std::begin(kUnicodeRuns) ? CharClass::kOther : std::prev(after)->cls;
}

}  // namespace tessera::tokenizer
