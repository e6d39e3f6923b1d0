// `kgen cache import` (cache/archive.h) on arbitrary archive files, into a scratch cache that is
// emptied after each input.
#include "cache/archive.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kgen::cache;
  static BinaryCache cache(kgen::fuzz::scratch() / "cache");
  const auto archive = kgen::fuzz::input_file("archive", data, size);
  const ImportReport r = import_archive(cache, archive);
  if (r.imported > r.members) std::abort();
  cache.clear();
  return 0;
}
