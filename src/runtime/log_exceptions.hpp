#pragma once
// What a throw was, in words; and a completion for co_spawn that logs what a detached coroutine
// threw, instead of asio::detached, which drops it silently. Cancellation is not an error.
#include <spdlog/spdlog.h>

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>
#include <exception>
#include <string>

namespace sluice::runtime {

// Inside a catch block: what was thrown, in words (any type).
inline std::string describe_current_exception() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "not a std::exception";
  }
}

inline auto log_if_thrown(std::string task) {
  return [task = std::move(task)](std::exception_ptr error, auto&&...) {
    if (!error) return;
    try {
      std::rethrow_exception(error);
    } catch (const boost::system::system_error& e) {
      if (e.code() == boost::asio::error::operation_aborted) return;
      spdlog::error("event=task_failed task={} error=\"{}\"", task, e.what());
    } catch (const std::exception& e) {
      spdlog::error("event=task_failed task={} error=\"{}\"", task, e.what());
    } catch (...) {
      spdlog::error("event=task_failed task={} error=\"not a std::exception\"", task);
    }
  };
}

}  // namespace sluice::runtime
