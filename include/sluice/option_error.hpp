#pragma once
// An option a part of the library refused (the container's, a source's): which part,
// which option, the value given and what was expected, each apart, so that a caller
// can name the option its own way (`sluice run` says the YAML key).

#include <stdexcept>
#include <string>
#include <utility>

namespace sluice {

class OptionError : public std::invalid_argument {
 public:
  // what(): "<component> option <option> = <value>: expected <expected>"
  OptionError(std::string component, std::string option, std::string value, std::string expected)
      : std::invalid_argument(component + " option " + option + " = " + value + ": expected " +
                              expected),
        component_(std::move(component)),
        option_(std::move(option)),
        value_(std::move(value)),
        expected_(std::move(expected)) {}

  const std::string& component() const { return component_; }  // "SQS source", "container"
  const std::string& option() const { return option_; }        // as the options struct names it
  const std::string& value() const { return value_; }          // as given, never a secret
  const std::string& expected() const { return expected_; }

 private:
  std::string component_, option_, value_, expected_;
};

}  // namespace sluice
