#pragma once
// One row of an option table: the key, its type, default, documentation, how a value
// is read and checked, the environment variable that overrides it, and whether it is
// a secret (never repeated in an error). The loader, `sluice config docs` and
// docs/configuration.md all read the rows, so the docs cannot drift from the code.

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <utility>

namespace sluice::config {

template <class Target>
struct Option {
  using Apply = std::function<void(Target&, const YAML::Node&, const std::string& key)>;
  std::string key;
  std::string type;
  std::string default_value;  // read through `apply` before the file is
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
                       std::function<void(Settings&, const YAML::Node&, const std::string&)> apply,
                       std::string env = {}, bool secret = false) {
  return {std::move(key),
          std::move(type),
          std::move(default_value),
          std::move(doc),
          [apply = std::move(apply)](Base& base, const YAML::Node& n, const std::string& k) {
            apply(static_cast<Settings&>(base), n, k);
          },
          std::move(env),
          secret};
}

}  // namespace sluice::config
