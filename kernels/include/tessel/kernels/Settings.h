//===- Settings.h - a kernel configuration as key=value text ----*- C++ -*-===//
//
// Each library kernel describes its configuration once, as a table of named
// settings that read and write the configuration's fields. Everything that
// speaks of a configuration as text reads the same table: the command
// line's --param, the harness's defaults, the tuner's records, and the key
// of the public calls' kernel cache. Adding a field means adding one row.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_SETTINGS_H
#define TESSEL_KERNELS_SETTINGS_H

#include "tessel/dsl/Program.h"

#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tessel::kernels {

/// key=value settings: configuration (tile sizes, types) and run shapes.
using Settings = std::map<std::string, std::string>;

/// `text` as a whole decimal integer in [lo, hi] (an optional minus sign,
/// then digits only, no overflow). Throws tessel::Error naming `what`.
int64_t parseInteger(const std::string &text, int64_t lo, int64_t hi, const std::string &what);
/// "0" or "1"; throws naming the setting otherwise.
bool parseFlag(const std::string &name, const std::string &text);

/// One named setting of a configuration `Config`.
template <class Config> struct Setting {
  std::string name;
  /// Whether the setting only chooses how the kernel computes (tiles,
  /// stages, schedules), so that a tuned record may set it; false for what
  /// it computes (types, masks, transposes, reductions).
  bool tunable = true;
  /// Sets the field from text; throws tessel::Error naming the setting.
  std::function<void(Config &, const std::string &)> read;
  std::function<std::string(const Config &)> write;
};

template <class Config> class SettingsTable {
public:
  explicit SettingsTable(std::vector<Setting<Config>> rows) : rows(std::move(rows)) {}

  /// `base` with each of the table's settings that `given` names; other
  /// keys (a run's shapes) are not the table's and are left alone.
  Config read(const Settings &given, Config base = Config()) const {
    for (const Setting<Config> &row : rows)
      if (auto it = given.find(row.name); it != given.end()) row.read(base, it->second);
    return base;
  }
  /// `config` with every setting of `record` (a tuned configuration);
  /// false, and `config` unchanged, when the record names a setting the
  /// table does not have, one that is not tunable (a record chooses how a
  /// kernel computes, never what), or a value it cannot read.
  bool apply(const Settings &record, Config &config) const {
    for (const auto &[key, value] : record) {
      const Setting<Config> *row = find(key);
      if (!row || !row->tunable) return false;
    }
    try {
      config = read(record, config);
    } catch (const Error &) {
      return false;
    }
    return true;
  }
  /// Every setting of `config`, as text.
  Settings write(const Config &config) const {
    Settings out;
    for (const Setting<Config> &row : rows) out[row.name] = row.write(config);
    return out;
  }
  /// "name=value ..." in the table's order. A cache key where every field
  /// that changes the kernel is in the table (AttentionConfig's streamed
  /// shards and query offset are not: the calls that key by this text
  /// refuse them).
  std::string describe(const Config &config) const {
    std::string out;
    for (const Setting<Config> &row : rows)
      out += (out.empty() ? "" : " ") + row.name + "=" + row.write(config);
    return out;
  }
  bool has(const std::string &name) const { return find(name) != nullptr; }
  const Setting<Config> *find(const std::string &name) const {
    for (const Setting<Config> &row : rows)
      if (row.name == name) return &row;
    return nullptr;
  }

private:
  std::vector<Setting<Config>> rows;
};

/// The names of an enumeration's values, in the order an error lists them.
template <class E> using Choices = std::vector<std::pair<std::string, E>>;

template <class E> E parseChoice(const std::string &name, const std::string &text,
                                 const Choices<E> &choices) {
  std::string names;
  for (const auto &[word, value] : choices) {
    if (text == word) return value;
    names += (names.empty() ? "" : ", ") + word;
  }
  throw Error("parameter " + name + "=" + text + ": use one of " + names);
}

template <class E> std::string choiceName(E value, const Choices<E> &choices) {
  for (const auto &[word, v] : choices)
    if (v == value) return word;
  return "?";
}

const Choices<DType> &dtypeChoices();
const Choices<WarpPolicy> &policyChoices();
const Choices<WarpSpecialize> &warpSpecializeChoices();
const Choices<GemmInstruction> &instructionChoices();

/// A field of an integer type, read within [lo, hi].
template <class Config, class T>
Setting<Config> integerSetting(std::string name, T Config::*field, int64_t lo = INT32_MIN,
                               int64_t hi = INT32_MAX) {
  return {name, true,
          [=](Config &c, const std::string &text) {
            c.*field = T(parseInteger(text, lo, hi, "parameter " + name));
          },
          [=](const Config &c) { return std::to_string(c.*field); }};
}

template <class Config> Setting<Config> flagSetting(std::string name, bool Config::*field) {
  return {name, true,
          [=](Config &c, const std::string &text) { c.*field = parseFlag(name, text); },
          [=](const Config &c) { return std::string(c.*field ? "1" : "0"); }};
}

/// A field that takes one of `choices` (an enumeration, or a bool with two
/// words of its own).
template <class Config, class E>
Setting<Config> choiceSetting(std::string name, E Config::*field, Choices<E> choices) {
  return {name, true,
          [=](Config &c, const std::string &text) { c.*field = parseChoice(name, text, choices); },
          [=](const Config &c) { return choiceName(c.*field, choices); }};
}

/// `setting` as one that says what the kernel computes: read and written
/// like any other, never set by a tuned record.
template <class Config> Setting<Config> fixed(Setting<Config> setting) {
  setting.tunable = false;
  return setting;
}

} // namespace tessel::kernels

#endif
