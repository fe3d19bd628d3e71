#include "common/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace hetps {
namespace {

bool ParseDouble(const std::string& text, double& v) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string s;
  for (const auto& item : items) s += (s.empty() ? "" : sep) + item;
  return s;
}

}  // namespace

ParamDef ParamDef::Real(std::string name, std::string def, double min, double max, std::string help,
                        bool min_open) {
  ParamDef p;
  p.name = std::move(name);
  p.default_value = std::move(def);
  p.help = std::move(help);
  p.min = min;
  p.max = max;
  p.min_open = min_open;
  return p;
}

ParamDef ParamDef::Int(std::string name, std::string def, double min, double max,
                       std::string help) {
  ParamDef p = Real(std::move(name), std::move(def), min, max, std::move(help));
  p.integral = true;
  return p;
}

ParamDef ParamDef::Choice(std::string name, std::string def, std::vector<std::string> words,
                          std::string help) {
  ParamDef p;
  p.name = std::move(name);
  p.default_value = std::move(def);
  p.help = std::move(help);
  p.numeric = false;
  p.words = std::move(words);
  return p;
}

ParamDef ParamDef::Text(std::string name, std::string def, std::string help) {
  ParamDef p = Choice(std::move(name), std::move(def), {}, std::move(help));
  p.text = true;
  return p;
}

ParamDef ParamDef::OnlyWith(std::string key, std::vector<std::string> values) const {
  ParamDef p = *this;
  p.when_key = std::move(key);
  p.when_values = std::move(values);
  return p;
}

bool ParamDef::ActsWith(const std::map<std::string, std::string>& values) const {
  if (when_key.empty()) return true;
  return std::find(when_values.begin(), when_values.end(), values.at(when_key)) !=
         when_values.end();
}

std::string ParamDef::Range() const {
  std::string s;
  if (text) {
    s = "text";
  } else if (!numeric) {
    s = "one of " + Join(words, ", ");
  } else {
    s = fmt::format("{} in {}{}, {}{}", integral ? "whole number" : "number", min_open ? "(" : "[",
                    min, max, max_open ? ")" : "]");
    if (!words.empty()) s += " or " + Join(words, ", ");
  }
  if (!when_key.empty()) s += fmt::format("; only with {}={}", when_key, Join(when_values, "|"));
  return s;
}

Status ParamDef::Check(const std::string& value) const {
  if (text) {
    if (!value.empty()) return Status();
    return Status::InvalidArgument(fmt::format("{}: give a value", name));
  }
  if (std::find(words.begin(), words.end(), value) != words.end()) return Status();
  double v = 0;
  if (numeric && !ParseDouble(value, v)) {
    return Status::InvalidArgument(
        fmt::format("{}={}: not a number; must be a {}", name, value, Range()));
  }
  const bool ok = numeric && (min_open ? v > min : v >= min) && (max_open ? v < max : v <= max) &&
                  (!integral || v == static_cast<double>(static_cast<int64_t>(v)));
  if (ok) return Status();
  return Status::InvalidArgument(
      fmt::format("{}={}: must be {}{}", name, value, numeric ? "a " : "", Range()));
}

const ParamDef* AlgorithmInfo::Param(const std::string& key) const {
  for (const ParamDef& p : params) {
    if (p.name == key) return &p;
  }
  return nullptr;
}

std::string SpecText(const std::string& name, const std::map<std::string, std::string>& params) {
  if (params.empty()) return name;
  std::string s = name + ":";
  bool first = true;
  for (const auto& [k, v] : params) {
    s += (first ? "" : ",") + k + "=" + v;
    first = false;
  }
  return s;
}

std::string AlgorithmSpec::ToString() const { return SpecText(name_, given_); }

std::string AlgorithmSpec::Full() const { return SpecText(name_, acting_); }

const std::string& AlgorithmSpec::Text(const std::string& key) const { return values_.at(key); }

double AlgorithmSpec::Number(const std::string& key) const {
  double v = 0;
  ParseDouble(Text(key), v);
  return v;
}

void SpecRegistry::AddInfo(AlgorithmInfo info) {
  const std::string name = info.name;
  if (!infos_.emplace(name, std::move(info)).second) {
    // A programming error in a Register function: two algorithms would share a name.
    std::fprintf(stderr, "hetps: %s '%s' registered twice\n", kind_.c_str(), name.c_str());
    std::abort();
  }
}

const AlgorithmInfo* SpecRegistry::Find(const std::string& name) const {
  auto it = infos_.find(name);
  return it == infos_.end() ? nullptr : &it->second;
}

std::vector<std::string> SpecRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, info] : infos_) names.push_back(name);
  return names;
}

AlgorithmSpec SpecRegistry::Acting(const AlgorithmInfo& info, AlgorithmSpec spec) {
  spec.acting_ = spec.values_;
  for (const ParamDef& p : info.params) {
    if (!p.ActsWith(spec.values_)) spec.acting_.erase(p.name);
  }
  return spec;
}

StatusOr<AlgorithmSpec> SpecRegistry::Parse(const std::string& text) const {
  AlgorithmSpec spec;
  const size_t colon = text.find(':');
  spec.name_ = text.substr(0, colon);
  const AlgorithmInfo* info = Find(spec.name_);
  if (info == nullptr) {
    return Status::InvalidArgument(
        fmt::format("unknown {} '{}' (known: {})", kind_, spec.name_, Join(Names(), ", ")));
  }
  for (const ParamDef& p : info->params) spec.values_[p.name] = p.default_value;
  if (colon == std::string::npos) return Acting(*info, std::move(spec));
  const std::string rest = text.substr(colon + 1);
  size_t begin = 0;
  while (begin <= rest.size()) {
    size_t end = rest.find(',', begin);
    if (end == std::string::npos) end = rest.size();
    const std::string item = rest.substr(begin, end - begin);
    begin = end + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument(
          fmt::format("{} '{}': expected key=value, got '{}'", kind_, spec.name_, item));
    }
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    const ParamDef* p = info->Param(key);
    if (p == nullptr) {
      std::vector<std::string> keys;
      for (const ParamDef& d : info->params) keys.push_back(d.name);
      return Status::InvalidArgument(fmt::format("{} '{}' has no parameter '{}' (known: {})", kind_,
                                                 spec.name_, key,
                                                 keys.empty() ? "none" : Join(keys, ", ")));
    }
    if (Status s = p->Check(value); !s.ok()) {
      return Status::InvalidArgument(fmt::format("{} '{}': {}", kind_, spec.name_, s.message()));
    }
    if (spec.given_.count(key)) {
      return Status::InvalidArgument(
          fmt::format("{} '{}': '{}' given twice", kind_, spec.name_, key));
    }
    spec.given_[key] = value;
    spec.values_[key] = value;
  }
  for (const auto& [key, value] : spec.given_) {  // each given parameter must act
    const ParamDef& p = *info->Param(key);
    if (p.ActsWith(spec.values_)) continue;
    return Status::InvalidArgument(
        fmt::format("{} '{}': '{}' acts only with {}={}, and this spec has {}={}: it would do "
                    "nothing",
                    kind_, spec.name_, key, p.when_key, Join(p.when_values, "|"), p.when_key,
                    spec.values_.at(p.when_key)));
  }
  return Acting(*info, std::move(spec));
}

std::string SpecRegistry::Help() const {
  std::string s;
  for (const auto& [name, info] : infos_) {
    s += fmt::format("  {:<12} {}\n", name, info.summary);
    for (const ParamDef& p : info.params) {
      s += fmt::format("      {:<24} {} ({})\n", p.name + "=" + p.default_value, p.help, p.Range());
    }
  }
  return s;
}

namespace {
// A table cell: a '|' of the text would end it.
std::string Cell(const std::string& text) {
  std::string s;
  for (char c : text) s += c == '|' ? std::string("\\|") : std::string(1, c);
  return s;
}
}  // namespace

std::string SpecRegistry::Markdown() const {
  std::string s =
      fmt::format("| {} | what it does | parameters (default; range) |\n|---|---|---|\n", kind_);
  for (const auto& [name, info] : infos_) {
    std::vector<std::string> params;
    for (const ParamDef& p : info.params) {
      params.push_back(fmt::format("`{}={}` {} ({})", p.name, p.default_value, p.help, p.Range()));
    }
    s += fmt::format("| `{}` | {} | {} |\n", name, Cell(info.summary),
                     params.empty() ? "none" : Cell(Join(params, "; ")));
  }
  return s;
}

std::string Catalogue(const std::vector<CatalogueKind>& kinds, bool markdown) {
  std::string s;
  for (const CatalogueKind& k : kinds) {
    s += markdown ? fmt::format("{}\n", k.registry->Markdown())
                  : fmt::format("{} ({})\n{}\n", k.registry->kind(), k.flag, k.registry->Help());
  }
  return s;
}

}  // namespace hetps
