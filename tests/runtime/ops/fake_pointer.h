// Fake device pointers for the API tests: validation never dereferences them.
#pragma once

#include <cstdint>

namespace kgen::test_pointers {

inline void* fake(std::uintptr_t a) { return reinterpret_cast<void*>(a); }

}  // namespace kgen::test_pointers
