// The algorithm registry: every pluggable algorithm (codec, consistency controller, aggregator,
// optimizer) is chosen by a spec string "name" or "name:key=value,...", validated against what
// the algorithm declared when it registered: its parameters with defaults, ranges or accepted
// words, and a one-line summary. The same text is what travels on the wire (the policy, a
// push's codec), what `--list` prints and what docs/algorithms.md shows.
//
// Adding an algorithm: one file that defines `void Register<Name>(XRegistry&)` (its info and
// its factory), one line naming it in the kind's `.def` list, and its test.
//
// Thread-safety: a registry is filled once, inside the function-local static that owns it,
// and is read-only afterwards; AlgorithmSpec is a value.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

// One parameter of an algorithm. A value is a number in [min, max] (an open lower end with
// min_open; whole numbers with integral), or one of `words` (e.g. "auto", or the choices of a
// parameter that takes no numbers: numeric = false), or any text (text: a file's path).
struct ParamDef {
  std::string name;
  std::string default_value;
  std::string help;
  double min = 0, max = 0;
  bool min_open = false;
  bool max_open = false;  // e.g. Adam's betas: [0, 1)
  bool integral = false;
  bool numeric = true;
  bool text = false;  // any text without ',' (e.g. a file path)
  std::vector<std::string> words;
  // A parameter that acts only while another parameter of the spec (`when_key`, given or by
  // default) is one of `when_values`, e.g. fedasync's exponent with staleness=polynomial. A
  // spec that gives it otherwise is refused: a setting that does nothing is a mistake.
  std::string when_key;
  std::vector<std::string> when_values;

  // Shorthands for the common shapes.
  static ParamDef Real(std::string name, std::string def, double min, double max, std::string help,
                       bool min_open = false);
  static ParamDef Int(std::string name, std::string def, double min, double max, std::string help);
  static ParamDef Choice(std::string name, std::string def, std::vector<std::string> words,
                         std::string help);
  static ParamDef Text(std::string name, std::string def, std::string help);
  // This parameter, acting only while `key` is one of `values`.
  ParamDef OnlyWith(std::string key, std::vector<std::string> values) const;
  // Whether it acts in a spec of these parameter values (every parameter, given or default).
  bool ActsWith(const std::map<std::string, std::string>& values) const;
  // "number in [0, 1]", "whole number in [1, 65535] or auto", "one of constant, hinge".
  std::string Range() const;
  Status Check(const std::string& value) const;
};

struct AlgorithmInfo {
  std::string name;
  std::string summary;  // one line: what it does, with its source
  std::vector<ParamDef> params;
  const ParamDef* Param(const std::string& key) const;
};

// A parsed and validated spec. Parameters not given take their registered defaults.
class AlgorithmSpec {
 public:
  AlgorithmSpec() = default;
  const std::string& name() const { return name_; }
  // The given parameters, sorted: canonical, so equal specs have equal text.
  const std::map<std::string, std::string>& given() const { return given_; }
  // "name" or "name:k=v,..." of the given parameters, sorted.
  std::string ToString() const;
  // The same with every parameter that acts, defaults included: what travels on the wire and
  // shows in logs and reports, so every node reads the same thing whatever its defaults.
  std::string Full() const;
  // The parameter's value (given, or its default). REQUIRES: a registered parameter.
  const std::string& Text(const std::string& key) const;
  double Number(const std::string& key) const;  // REQUIRES: a number, not a word
  int64_t Int(const std::string& key) const { return static_cast<int64_t>(Number(key)); }
  bool Is(const std::string& key, const std::string& word) const { return Text(key) == word; }
  bool Has(const std::string& key) const { return values_.contains(key); }

 private:
  friend class SpecRegistry;
  std::string name_;
  std::map<std::string, std::string> given_;
  std::map<std::string, std::string> values_;  // every parameter: given or default
  std::map<std::string, std::string> acting_;  // values_ less those whose condition fails
};

// "name" or "name:k=v,..." in the map's (sorted) order: the text of a spec.
std::string SpecText(const std::string& name, const std::map<std::string, std::string>& params);

// The infos of one kind of algorithm ("codec", "consistency", ...), without factories.
class SpecRegistry {
 public:
  explicit SpecRegistry(std::string kind) : kind_(std::move(kind)) {}
  SpecRegistry(const SpecRegistry&) = delete;
  SpecRegistry& operator=(const SpecRegistry&) = delete;

  const std::string& kind() const { return kind_; }
  // Parses "name[:key=value,...]". An unknown name lists the known ones; an unknown parameter
  // lists the algorithm's parameters; a bad value names the accepted range.
  StatusOr<AlgorithmSpec> Parse(const std::string& text) const;
  const AlgorithmInfo* Find(const std::string& name) const;
  std::vector<std::string> Names() const;
  // For `hetps algorithms`: one block per algorithm, its summary and parameters.
  std::string Help() const;
  // The same as a Markdown table (docs/algorithms.md).
  std::string Markdown() const;

 protected:
  void AddInfo(AlgorithmInfo info);  // REQUIRES: a new name

 private:
  // `spec` with the parameters that act (AlgorithmSpec::Full) worked out.
  static AlgorithmSpec Acting(const AlgorithmInfo& info, AlgorithmSpec spec);

  std::string kind_;
  std::map<std::string, AlgorithmInfo> infos_;
};

// One kind of algorithm in a catalogue (`hetps-server --list` and the like): its registry and
// the flag that chooses one, e.g. "--consistency=NAME:key=value,...".
struct CatalogueKind {
  const SpecRegistry* registry;
  std::string flag;
};
// Each kind's block (plain text, with its flag) or table (Markdown), in the given order.
std::string Catalogue(const std::vector<CatalogueKind>& kinds, bool markdown);

// A registry of `Entry` (the factory and whatever the kind needs to know about an algorithm
// before making one, e.g. which combinations it supports).
template <class Entry>
class Registry : public SpecRegistry {
 public:
  using SpecRegistry::SpecRegistry;
  // REQUIRES: a name not registered yet (a second one aborts: it is a programming error).
  void Add(AlgorithmInfo info, Entry entry) {
    entries_.emplace(info.name, std::move(entry));
    AddInfo(std::move(info));
  }
  // REQUIRES: `name` is registered (as every parsed spec's is).
  const Entry& EntryFor(const std::string& name) const { return entries_.at(name); }

 private:
  std::map<std::string, Entry> entries_;
};

}  // namespace hetps
