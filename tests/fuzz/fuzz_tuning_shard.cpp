// Tuning-database shards (runtime/tuning/tuning_db.h): any file is read without throwing; bad lines
// are counted, never fatal.
#include "fuzz_support.h"
#include "tuning/tuning_db.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = kgen::fuzz::input_file("shard.jsonl", data, size);
  const kgen::TuningShard shard = kgen::read_tuning_shard(path);
  if (shard.malformed_lines < 0) std::abort();
  return 0;
}
