#pragma once
// One row of an option table: the key, its type, default, documentation, how a value
// is read and checked, the environment variable that overrides it, and whether it is
// a secret (never repeated in an error). The loader, `sluice config docs` and
// docs/configuration.md all read the rows, so the docs cannot drift from the code.

#include <functional>
#include <string>
#include <utility>

#include "sluice/driver/value.hpp"

namespace sluice::config {

// `Node`: the value as the row reads it (a driver's rows: Value).
template <class Target, class Node = Value>
struct Option {
  using Apply = std::function<void(Target&, const Node&, const std::string& key)>;
  std::string key;
  std::string type;
  std::string default_value;  // applied through `apply` before the file's value
  std::string doc;
  Apply apply;
  std::string env = {};  // the environment variable that overrides the file
  bool secret = false;
};

// A row of a driver's table (a source's or a sink's, whose settings derive from `Base`),
// written against the driver's own settings type.
template <class Base, class Settings>
Option<Base> option_of(std::string key, std::string type, std::string default_value,
                       std::string doc,
                       std::function<void(Settings&, const Value&, const std::string&)> apply,
                       std::string env = {}, bool secret = false) {
  return {std::move(key),
          std::move(type),
          std::move(default_value),
          std::move(doc),
          [apply = std::move(apply)](Base& base, const Value& v, const std::string& k) {
            apply(static_cast<Settings&>(base), v, k);
          },
          std::move(env),
          secret};
}

}  // namespace sluice::config
