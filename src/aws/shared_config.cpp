// Reading of the AWS CLI's shared files (INI dialect: [section], key = value,
// '#'/';' comments, indented continuation lines for nested settings).
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "aws/text.hpp"
#include "sluice/aws/config.hpp"

namespace sluice::aws {
namespace {

std::string home_path(const char* env_name, const char* relative) {
  if (const char* v = std::getenv(env_name); v && *v) {
    std::string path = v;
    if (path.starts_with("~/")) {
      const char* home = std::getenv("HOME");
      path = std::string(home ? home : "") + path.substr(1);
    }
    return path;
  }
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + relative;
}

// Reads `section` from an INI file into `out` without overwriting existing keys.
bool read_section(const std::string& path, const std::string& section,
                  std::map<std::string, std::string>& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    const std::string_view raw = line;
    const std::string_view trimmed = text::trim(raw);
    if (trimmed.empty() || trimmed.front() == '#' || trimmed.front() == ';') continue;
    if (trimmed.front() == '[') {
      const auto close = trimmed.find(']');
      const std::string_view name =
          text::trim(trimmed.substr(1, close == std::string_view::npos ? close : close - 1));
      inside = name == section;
      continue;
    }
    if (!inside) continue;
    // Nested sub-settings (lines indented under "key =") are not used by Sluice.
    if (raw.front() == ' ' || raw.front() == '\t') continue;
    const auto eq = trimmed.find('=');
    if (eq == std::string_view::npos) continue;
    std::string key = text::to_lower(text::trim(trimmed.substr(0, eq)));
    std::string value(text::trim(trimmed.substr(eq + 1)));
    out.emplace(std::move(key), std::move(value));
  }
  return true;
}

}  // namespace

std::optional<std::string> Profile::get(const std::string& key) const {
  auto it = values.find(key);
  if (it == values.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

Profile load_profile(std::optional<std::string> name) {
  Profile profile;
  if (name) {
    profile.name = *name;
  } else if (const char* env = std::getenv("AWS_PROFILE"); env && *env) {
    profile.name = env;
  } else {
    profile.name = "default";
  }
  const std::string credentials_path =
      home_path("AWS_SHARED_CREDENTIALS_FILE", "/.aws/credentials");
  const std::string config_path = home_path("AWS_CONFIG_FILE", "/.aws/config");
  // The credentials file wins over the config file for the same key, as in the CLI.
  const bool have_credentials = read_section(credentials_path, profile.name, profile.values);
  const std::string config_section =
      profile.name == "default" ? "default" : "profile " + profile.name;
  bool have_config = read_section(config_path, config_section, profile.values);
  if (profile.name == "default")
    have_config = read_section(config_path, "profile default", profile.values) || have_config;
  profile.sources = credentials_path + (have_credentials ? "" : " (absent)") + ", " + config_path +
                    (have_config ? "" : " (absent)");
  return profile;
}

}  // namespace sluice::aws
