#include "generator/entry_shim.h"

#include "generator/target.h"

namespace kgen {

TemplateArg targ(std::string name, int value) { return {std::move(name), std::to_string(value)}; }
TemplateArg targ(std::string name, bool value) { return {std::move(name), value ? "true" : "false"}; }
TemplateArg targ(std::string name, std::string value) { return {std::move(name), std::move(value)}; }

TemplateArg targ_type(std::string name, DType dtype) {
  return {std::move(name), std::string(dtype_cxx(dtype))};
}

std::string render_entry_shims(std::string_view header, std::string_view variant, std::span<const EntryShim> shims,
                               std::string_view prelude) {
  std::string src = "#include \"" + std::string(header) + "\"\n\n// kgen variant " + std::string(variant) + "\n";
  src += prelude;
  for (const EntryShim& s : shims) {
    src += "extern \"C\" __global__ void ";
    src += "__launch_bounds__(" + std::to_string(s.threads);
    if (s.min_blocks > 0) src += ", " + std::to_string(s.min_blocks);
    src += ") " + s.entry + "(const " + (s.grid_constant ? "__grid_constant__ " : "") + "kgen::" + s.params +
           " p" + (s.variant_args ? ", KGEN_VARIANT_ARGS va" : "") + ") {\n  kgen::" +
           s.function + "<";
    for (std::size_t i = 0; i < s.args.size(); ++i)
      src += (i ? ", /*" : "/*") + s.args[i].name + "=*/" + s.args[i].value;
    src += s.variant_args ? ">(p, &va);\n}\n" : ">(p);\n}\n";
  }
  return src;
}

}  // namespace kgen
