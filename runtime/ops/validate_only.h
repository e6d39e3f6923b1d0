// Validate-only calls (kgen_validate_only in c_api.h): a thread's operator calls that convert
// and check their arguments exactly as a launch does, then end before anything needs a device
// (config decision, compile, allocation, launch). PyTorch's fake kernels ask the library so.
#pragma once

namespace kgen {

// Thrown by end_of_validation in a validate-only call; the C API's guard turns it into KGEN_OK.
struct ValidationComplete {};

// Whether this thread's calls validate only.
bool validate_only();

// Sets whether this thread's calls validate only; returns the previous setting.
bool set_validate_only(bool on);

// Where an operator's argument checks end and its device work begins: in a validate-only call
// this ends the call (throws ValidationComplete), else it returns.
void end_of_validation();

// Whether the checks that read index tensors from device memory run (docs/attention.md §9, §10):
// KGEN_CHECK_INDICES=1, and not in a validate-only call, which has no device data to read.
bool check_indices_requested();

}  // namespace kgen
