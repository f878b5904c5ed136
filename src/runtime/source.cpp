#include "sluice/spi/source.hpp"

namespace sluice::spi {

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

boost::asio::awaitable<std::size_t> Source::extend(std::vector<Delivery>) {
  co_return 0;
}

}  // namespace sluice::spi
