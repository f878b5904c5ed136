// Generated order events (`sluice publish --generate N --events orders`): the stream
// examples/orders-pipeline.yaml normalizes. Business duplicates are written the ways
// real producers differ: the other payload version's shape, the instant in another
// offset or as epoch milliseconds, the amount with other trailing zeros or as a JSON
// number, codes in other case with spaces, the order id in capitals or braces.
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <tuple>

#include "cli/publish.hpp"

namespace sluice::app {
namespace {

struct Order {
  std::string order_id;  // lowercase 8-4-4-4-12
  std::string customer_id;
  long long placed_ms = 0;  // epoch milliseconds, UTC
  long long cents = 0;
  std::string currency;  // upper case
  std::string status;    // upper case
};

const char* const kCurrencies[] = {"EUR", "USD", "GBP", "NPR"};
const char* const kStatuses[] = {"PLACED", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"};

std::string uuid(std::mt19937& rng) {
  static const char* hex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) id += '-';
    id += hex[rng() % 16];
  }
  return id;
}

// "2024-02-29T12:00:00.123" + the offset: the instant written in another zone.
std::string iso_in_offset(long long ms, int offset_minutes) {
  const long long local_ms = ms + offset_minutes * 60'000LL;
  const std::time_t secs = static_cast<std::time_t>(local_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  n += static_cast<std::size_t>(
      std::snprintf(buf + n, sizeof buf - n, ".%03d", static_cast<int>(local_ms % 1000)));
  if (offset_minutes == 0) {
    std::snprintf(buf + n, sizeof buf - n, "Z");
  } else {
    const int a = std::abs(offset_minutes);
    std::snprintf(buf + n, sizeof buf - n, "%c%02d:%02d", offset_minutes < 0 ? '-' : '+', a / 60,
                  a % 60);
  }
  return buf;
}

std::string amount_text(long long cents, int trailing_zeros) {
  std::string text = std::to_string(cents / 100) + "." + (cents % 100 < 10 ? "0" : "") +
                     std::to_string(cents % 100);
  return text + std::string(static_cast<std::size_t>(trailing_zeros), '0');
}

std::string swap_case_with_spaces(const std::string& code, std::mt19937& rng) {
  std::string out = rng() % 2 ? " " : "";
  for (char c : code)
    out += static_cast<char>(rng() % 2 ? std::tolower(static_cast<unsigned char>(c)) : c);
  return out + (rng() % 2 ? "  " : "");
}

// One order as a version-1 (flat) or version-2 (nested) payload; `variant` picks the
// spellings (0: the plainest).
nlohmann::json render(const Order& o, int version, int variant, const std::string& event_id,
                      std::mt19937& rng) {
  static const int kOffsets[] = {0, 345, -300, 330, 840};  // Z, +05:45, -05:00, +05:30, +14:00
  nlohmann::json placed = variant == 0 ? nlohmann::json(iso_in_offset(o.placed_ms, 0))
                          : rng() % 3 == 0
                              ? nlohmann::json(o.placed_ms)
                              : nlohmann::json(iso_in_offset(o.placed_ms, kOffsets[rng() % 5]));
  std::string order_id = o.order_id;
  if (variant != 0 && rng() % 2) {
    for (auto& c : order_id) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (rng() % 2) order_id = "{" + order_id + "}";
  }
  nlohmann::json amount =
      variant == 0     ? nlohmann::json(amount_text(o.cents, 0))
      : rng() % 3 == 0 ? nlohmann::json::parse(amount_text(o.cents, static_cast<int>(rng() % 3)))
                       : nlohmann::json(amount_text(o.cents, static_cast<int>(rng() % 3)));
  const std::string currency = variant == 0 ? o.currency : swap_case_with_spaces(o.currency, rng);
  const std::string status = variant == 0 ? o.status : swap_case_with_spaces(o.status, rng);
  nlohmann::json event;
  if (version == 1) {
    event = {{"eventId", event_id}, {"orderId", order_id}, {"customerId", o.customer_id},
             {"placedAt", placed},  {"amount", amount},    {"currency", currency},
             {"status", status}};
  } else {
    event = {{"schemaVersion", 2},
             {"eventId", event_id},
             {"order", {{"id", order_id}, {"placedAt", placed}, {"status", status}}},
             {"customer", {{"id", o.customer_id}}},
             {"total", {{"amount", amount}, {"currency", currency}}}};
  }
  return event;
}

}  // namespace

GeneratedEvents generate_order_events(int count, double duplicate_share, double malformed_share,
                                      unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  GeneratedEvents out;
  std::vector<Order> originals;
  std::set<std::tuple<std::string, std::string, long long, long long, std::string, std::string>>
      distinct;
  // 2024-02-28T00:00:00Z: the days around a leap day.
  constexpr long long kStart = 1'709'078'400'000;
  for (int i = 0; i < count; ++i) {
    const double r = unit(rng);
    const std::string event_id = "ev-" + std::to_string(i);
    if (r < malformed_share) {
      // Broken on purpose: not JSON, no order id, an amount that is no number, an
      // unknown payload version, a status outside the enum.
      static const char* const kBroken[] = {
          R"({"schemaVersion": 2, "order": )",
          R"({"schemaVersion":2,"order":{"placedAt":"2024-02-29T12:00:00Z","status":"PAID"},"customer":{"id":"C-1"},"total":{"amount":"1.00","currency":"EUR"}})",
          R"({"orderId":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d","customerId":"C-1","placedAt":"2024-02-29T12:00:00Z","amount":"twelve","currency":"EUR","status":"PAID"})",
          R"({"schemaVersion":3,"order":{"id":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}})",
          R"({"orderId":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d","customerId":"C-1","placedAt":"2024-02-29T12:00:00Z","amount":"1.00","currency":"EUR","status":"LOST"})"};
      out.bodies.push_back(kBroken[i % 5]);
      ++out.malformed;
      continue;
    }
    Order order;
    int variant = 0;
    if (!originals.empty() && r < malformed_share + duplicate_share) {
      order = originals[rng() % originals.size()];
      variant = 1;
    } else {
      order.order_id = uuid(rng);
      order.customer_id = "C-" + std::to_string(rng() % 2000);
      order.placed_ms = kStart + static_cast<long long>(rng() % (3 * 86'400'000u));
      order.cents = static_cast<long long>(rng() % 500'000);
      order.currency = kCurrencies[rng() % 4];
      order.status = kStatuses[rng() % 5];
      originals.push_back(order);
    }
    distinct.emplace(order.order_id, order.customer_id, order.placed_ms, order.cents,
                     order.currency, order.status);
    out.bodies.push_back(
        render(order, 1 + static_cast<int>(rng() % 2), variant, event_id, rng).dump());
  }
  out.distinct_records = distinct.size();
  return out;
}

}  // namespace sluice::app
