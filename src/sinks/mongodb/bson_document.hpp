#pragma once
// A record's document as BSON, its typed fields in MongoDB's types: exact decimals as
// Decimal128 (34 significant digits), timestamps as dates (UTC milliseconds). The record
// keeps its canonical text; the hash was computed from it, so typing changes no identity.
#include <bson/bson.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sluice/driver/record.hpp"

namespace sluice::sinks {

struct TypedField {
  std::vector<std::string> path;                            // "customer.id": {"customer", "id"}
  pipeline::FieldType type = pipeline::FieldType::decimal;  // decimal or timestamp
  bool epoch_ms = false;  // a timestamp the record holds as epoch milliseconds
};

// Appends the document's members to `out`. False, with `why` naming the field, when a
// value has no BSON form: a decimal beyond Decimal128, an integer beyond 64 bits, a key
// with a NUL, a document over BSON's size limit. A typed path whose value is not of its
// type's form (another payload version's field there) is appended as it is.
bool append_document(bson_t* out, const nlohmann::ordered_json& document,
                     const std::vector<TypedField>& typed, std::string& why);

}  // namespace sluice::sinks
