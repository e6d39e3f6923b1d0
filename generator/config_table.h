// One table per config form: the fields of its text ("fa2:bm64:bn128:w8"), the struct member
// each one fills and what it means. The form's parser, printer and explain() all read the table,
// so the text, the struct and the explanation cannot drift apart.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "generator/config_text.h"
#include "generator/kernel_source.h"

namespace kgen {

// One field after the head word: a number ("bm64": name "bm", member `number`) or a flag (":t":
// name "t", member `flag`, written only when set).
template <class C>
struct ConfigTextField {
  std::string_view name;
  int C::*number = nullptr;
  bool C::*flag = nullptr;
  // A number field written only when its value differs from this one (nullopt: always written).
  // Written with this value the text does not parse.
  std::optional<int> unwritten = std::nullopt;
  int needs = -1;     // index of a field that must be written before this one (-1: none)
  bool last = false;  // no field follows this one
  std::string (*meaning)(const C&) = nullptr;  // one line, with the field's value in words
};

// A config form: its head word ("fa2"), what the head means, and its fields in text order.
template <class C>
struct ConfigTextForm {
  std::string_view head;
  std::string_view meaning;
  std::span<const ConfigTextField<C>> fields;
};

namespace config_table {

template <class C>
bool written(const ConfigTextField<C>& f, const C& c) {
  if (f.flag) return c.*f.flag;
  return !f.unwritten || c.*f.number != *f.unwritten;
}

template <class C>
std::string field_text(const ConfigTextField<C>& f, const C& c) {
  return f.flag ? std::string(f.name) : std::string(f.name) + std::to_string(c.*f.number);
}

}  // namespace config_table

template <class C>
std::string print_config(const ConfigTextForm<C>& form, const C& c) {
  std::string s(form.head);
  for (const auto& f : form.fields)
    if (config_table::written(f, c)) s += ":" + config_table::field_text(f, c);
  return s;
}

// `parts`: the text split on ':' (head word first). nullopt unless every required field is there
// in order, each optional one at most once, in order, after the field it needs, with a value it
// is written with, and nothing else.
template <class C>
std::optional<C> parse_config(const ConfigTextForm<C>& form, const std::vector<std::string>& parts) {
  if (parts.empty() || parts[0] != form.head) return std::nullopt;
  C c{};
  for (const auto& f : form.fields) {
    if (f.flag) c.*f.flag = false;
    else if (f.unwritten) c.*f.number = *f.unwritten;
  }
  std::vector<bool> present(form.fields.size(), false);
  std::size_t next = 1;
  for (std::size_t i = 0; i < form.fields.size(); ++i) {
    const ConfigTextField<C>& f = form.fields[i];
    const bool optional = f.flag || f.unwritten;
    const bool allowed = f.needs < 0 || present[static_cast<std::size_t>(f.needs)];
    if (next < parts.size() && allowed) {
      if (f.flag ? parts[next] == f.name : parse_prefixed_int(parts[next], f.name, c.*f.number)) {
        if (f.unwritten && c.*f.number == *f.unwritten) return std::nullopt;
        if (f.flag) c.*f.flag = true;
        present[i] = true;
        ++next;
        if (f.last) break;
        continue;
      }
    }
    if (!optional) return std::nullopt;
  }
  if (next != parts.size()) return std::nullopt;
  return c;
}

// The head and each written field of `c`, in text order, with their meanings.
template <class C>
std::vector<ConfigField> explain_config(const ConfigTextForm<C>& form, const C& c) {
  std::vector<ConfigField> out{{std::string(form.head), std::string(form.meaning)}};
  for (const auto& f : form.fields)
    if (config_table::written(f, c)) out.push_back({config_table::field_text(f, c), f.meaning(c)});
  return out;
}

}  // namespace kgen
