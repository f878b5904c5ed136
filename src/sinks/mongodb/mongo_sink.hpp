#pragma once
// MongoDB (and the servers that speak its wire protocol): its options and its sink.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sinks/mongodb/bson_document.hpp"
#include "sluice/driver/sink.hpp"

namespace sluice::sinks {

struct MongoOptions {
  std::string uri;
  std::string database = "sluice";
  std::string collection = "records";
  std::string rejects_collection = "rejects";
  std::string write_concern = "majority";  // "majority", "1", "0" or a number
  // _id derived from the hash (every MongoDB-compatible server enforces _id's
  // uniqueness); false: a separate unique index on hash_field.
  bool id_from_hash = true;
  std::string hash_field = "documentHash";
  std::vector<std::string> routes;  // collections for Record::route 1, 2, ...
  // Written as Decimal128 and dates rather than as the record's text (bson_document.hpp).
  std::vector<TypedField> typed_fields;
};

std::unique_ptr<Sink> make_mongo_sink(MongoOptions options);

}  // namespace sluice::sinks
