#include "runtime/source.hpp"

namespace sluice::runtime {

const char* to_string(SourceErrorKind kind) {
  switch (kind) {
    case SourceErrorKind::transient:
      return "transient";
    case SourceErrorKind::permanent:
      return "permanent";
    case SourceErrorKind::cancelled:
      return "cancelled";
  }
  return "unknown";
}

boost::asio::awaitable<std::size_t> Source::extend(std::vector<StatePtr>) {
  co_return 0;
}

}  // namespace sluice::runtime
