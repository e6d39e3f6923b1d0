#include "check/harness_check.h"

#include <algorithm>
#include <stdexcept>

namespace kgen {

void HarnessCheck::add(std::string name, Comparison c, const std::function<std::string(std::size_t)>& row_name) {
  if (c.failed == Comparison::Failure::row && row_name) c.why += " at " + row_name(c.worst_row);
  outputs.push_back({std::move(name), std::move(c)});
}

void HarnessCheck::finish() {
  pass = !outputs.empty() && bitwise_equal &&
         std::all_of(outputs.begin(), outputs.end(), [](const NamedComparison& o) { return o.result.pass; });
}

const Comparison& HarnessCheck::get(const std::string& name) const {
  for (const NamedComparison& o : outputs)
    if (o.name == name) return o.result;
  throw std::out_of_range("HarnessCheck: no output " + name);
}

bool HarnessCheck::has(const std::string& name) const {
  return std::any_of(outputs.begin(), outputs.end(), [&](const NamedComparison& o) { return o.name == name; });
}

std::string HarnessCheck::failure() const {
  for (const NamedComparison& o : outputs)
    if (!o.result.pass) return o.name + ": " + o.result.why;
  if (!bitwise_equal) return "two runs wrote different bits";
  if (outputs.empty()) return "no output was compared";
  return "";
}

double HarnessCheck::worst_rel_l2() const {
  double worst = 0;
  for (const NamedComparison& o : outputs) worst = std::max(worst, o.result.rel_l2);
  return worst;
}

std::string to_string(const HarnessCheck& c) {
  std::string s = "reference: " + c.reference + (c.config.empty() ? "" : ", config " + c.config);
  for (const NamedComparison& o : c.outputs) s += "\n  " + o.name + ": " + to_string(o.result);
  if (c.determinism_checked) s += std::string("\n  two runs: ") + (c.bitwise_equal ? "bitwise equal" : "DIFFERENT BITS");
  return s;
}

std::string bhi_name(int b, int h, int i) {
  return "(b " + std::to_string(b) + ", h " + std::to_string(h) + ", i " + std::to_string(i) + ")";
}

}  // namespace kgen
