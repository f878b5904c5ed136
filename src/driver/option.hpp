#pragma once
// One row of an option table: the key, its type, default, documentation, how a value
// is read and checked, the environment variable that overrides it, and whether it is
// a secret (never repeated in an error). The loader, `sluice config docs` and
// docs/configuration.md all read the rows, so the docs cannot drift from the code.

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>

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

}  // namespace sluice::config
