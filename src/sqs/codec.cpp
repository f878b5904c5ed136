#include "sqs/codec.hpp"

#include <simdjson.h>

#include <charconv>
#include <nlohmann/json.hpp>
#include <set>

#include "common/crypto.hpp"
#include "sluice/aws/error.hpp"
#include "sqs/group_ids.hpp"
#include "sqs/md5.hpp"

namespace sluice::sqs::codec {
using aws::AwsError;
using aws::ErrorKind;
using nlohmann::json;

namespace {

[[noreturn]] void invalid(const std::string& code, const std::string& message) {
  throw AwsError(ErrorKind::client, message + " (checked before sending)", code);
}

[[noreturn]] void malformed(const std::string& what) {
  throw AwsError(ErrorKind::integrity, "malformed SQS response: " + what, "MalformedResponse");
}

json encode_attributes(const MessageAttributes& attributes) {
  json out = json::object();
  for (const auto& [name, value] : attributes) {
    json v = {{"DataType", value.data_type}};
    if (value.is_binary())
      v["BinaryValue"] = crypto::base64_encode(value.binary_value);
    else
      v["StringValue"] = value.string_value;
    out[name] = std::move(v);
  }
  return out;
}

json encode_entry(const SendMessageEntry& entry) {
  json j = {{"MessageBody", entry.body}};
  if (entry.delay_seconds) j["DelaySeconds"] = *entry.delay_seconds;
  if (!entry.message_attributes.empty())
    j["MessageAttributes"] = encode_attributes(entry.message_attributes);
  if (!entry.message_group_id.empty()) j["MessageGroupId"] = entry.message_group_id;
  if (!entry.message_deduplication_id.empty())
    j["MessageDeduplicationId"] = entry.message_deduplication_id;
  if (!entry.aws_trace_header.empty())
    j["MessageSystemAttributes"] = {
        {"AWSTraceHeader", {{"DataType", "String"}, {"StringValue", entry.aws_trace_header}}}};
  return j;
}

bool valid_entry_id(std::string_view id) {
  if (id.empty() || id.size() > 80) return false;
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_'))
      return false;
  return true;
}

std::string string_field(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

json parse_object(std::string_view body) {
  json doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) malformed("not a JSON object");
  return doc;
}

std::string_view get_string(simdjson::dom::element element, const char* what) {
  std::string_view out;
  if (element.get_string().get(out)) malformed(std::string(what) + " is not a string");
  return out;
}

}  // namespace

std::size_t message_size(const SendMessageEntry& entry) {
  std::size_t size = entry.body.size();
  for (const auto& [name, value] : entry.message_attributes)
    size += name.size() + value.data_type.size() +
            (value.is_binary() ? value.binary_value.size() : value.string_value.size());
  return size;
}

void validate(const ReceiveMessageRequest& request) {
  if (request.queue_url.empty()) invalid("MissingParameter", "QueueUrl is required");
  if (request.max_messages < 1 || request.max_messages > static_cast<int>(kMaxBatchEntries))
    invalid("InvalidParameterValue",
            "MaxNumberOfMessages must be 1..10, got " + std::to_string(request.max_messages));
  if (request.wait_time_seconds &&
      (*request.wait_time_seconds < 0 || *request.wait_time_seconds > kMaxWaitTimeSeconds))
    invalid("InvalidParameterValue",
            "WaitTimeSeconds must be 0..20, got " + std::to_string(*request.wait_time_seconds));
  if (request.visibility_timeout && (*request.visibility_timeout < 0 ||
                                     *request.visibility_timeout > kMaxVisibilityTimeoutSeconds))
    invalid("InvalidParameterValue", "VisibilityTimeout must be 0..43200, got " +
                                         std::to_string(*request.visibility_timeout));
}

void validate_send(const SendMessageEntry& entry, bool in_batch) {
  if (entry.body.empty()) invalid("MissingParameter", "MessageBody must not be empty");
  if (message_size(entry) > kMaxMessageBytes)
    invalid("InvalidParameterValue",
            "message of " + std::to_string(message_size(entry)) + " bytes exceeds the 1 MiB limit");
  if (!entry.message_group_id.empty() && !valid_group_id(entry.message_group_id))
    invalid("InvalidParameterValue",
            "MessageGroupId must be 1 to 128 letters, digits or punctuation, got '" +
                entry.message_group_id.substr(0, 160) + "'");
  if (!entry.message_deduplication_id.empty() && !valid_group_id(entry.message_deduplication_id))
    invalid("InvalidParameterValue",
            "MessageDeduplicationId must be 1 to 128 letters, digits or punctuation, got '" +
                entry.message_deduplication_id.substr(0, 160) + "'");
  if (entry.delay_seconds && (*entry.delay_seconds < 0 || *entry.delay_seconds > kMaxDelaySeconds))
    invalid("InvalidParameterValue",
            "DelaySeconds must be 0..900, got " + std::to_string(*entry.delay_seconds));
  if (entry.message_attributes.size() > 10)
    invalid("InvalidParameterValue", "at most 10 message attributes are allowed");
  for (const auto& [name, value] : entry.message_attributes) {
    if (name.empty() || name.size() > 256)
      invalid("InvalidParameterValue", "message attribute name must be 1..256 characters");
    if (!(value.data_type.starts_with("String") || value.data_type.starts_with("Number") ||
          value.data_type.starts_with("Binary")))
      invalid("InvalidParameterValue", "message attribute '" + name + "' has data type '" +
                                           value.data_type +
                                           "'; expected String, Number or Binary");
  }
  if (in_batch && !valid_entry_id(entry.id))
    invalid("InvalidBatchEntryId",
            "batch entry id '" + entry.id + "' must be 1..80 characters of [A-Za-z0-9_-]");
}

template <class Entry>
void validate_batch(const std::vector<Entry>& entries) {
  if (entries.empty()) invalid("EmptyBatchRequest", "a batch needs at least one entry");
  if (entries.size() > kMaxBatchEntries)
    invalid("TooManyEntriesInBatchRequest",
            "a batch holds at most 10 entries, got " + std::to_string(entries.size()));
  std::set<std::string_view> ids;
  for (const auto& e : entries) {
    if (!valid_entry_id(e.id))
      invalid("InvalidBatchEntryId",
              "batch entry id '" + e.id + "' must be 1..80 characters of [A-Za-z0-9_-]");
    if (!ids.insert(e.id).second)
      invalid("BatchEntryIdsNotDistinct", "batch entry id '" + e.id + "' is repeated");
  }
}
template void validate_batch(const std::vector<DeleteMessageEntry>&);
template void validate_batch(const std::vector<ChangeVisibilityEntry>&);
template void validate_batch(const std::vector<SendMessageEntry>&);

void validate_send_batch(const std::vector<SendMessageEntry>& entries) {
  validate_batch(entries);
  std::size_t total = 0;
  for (const auto& e : entries) {
    validate_send(e, true);
    total += message_size(e);
  }
  if (total > kMaxMessageBytes)
    invalid("BatchRequestTooLong",
            "batch of " + std::to_string(total) + " bytes exceeds the 1 MiB limit");
}

std::string encode_receive(const ReceiveMessageRequest& request) {
  json j = {{"QueueUrl", request.queue_url}, {"MaxNumberOfMessages", request.max_messages}};
  if (request.wait_time_seconds) j["WaitTimeSeconds"] = *request.wait_time_seconds;
  if (request.visibility_timeout) j["VisibilityTimeout"] = *request.visibility_timeout;
  if (!request.system_attribute_names.empty()) {
    j["MessageSystemAttributeNames"] = request.system_attribute_names;
    j["AttributeNames"] = request.system_attribute_names;  // older servers read this name
  }
  if (!request.message_attribute_names.empty())
    j["MessageAttributeNames"] = request.message_attribute_names;
  if (!request.receive_request_attempt_id.empty())
    j["ReceiveRequestAttemptId"] = request.receive_request_attempt_id;
  return j.dump();
}

std::string encode_send(const std::string& queue_url, const SendMessageEntry& entry) {
  json j = encode_entry(entry);
  j["QueueUrl"] = queue_url;
  return j.dump();
}

std::string encode_send_batch(const std::string& queue_url,
                              const std::vector<SendMessageEntry>& entries) {
  json list = json::array();
  for (const auto& e : entries) {
    json j = encode_entry(e);
    j["Id"] = e.id;
    list.push_back(std::move(j));
  }
  return json{{"QueueUrl", queue_url}, {"Entries", std::move(list)}}.dump();
}

namespace {

// `text` as a JSON string, written as nlohmann's dump() writes it (control characters
// escaped, UTF-8 as it is), without building a json value per entry: deletes and
// visibility changes are sent for every message.
void append_json_string(std::string& out, std::string_view text) {
  static constexpr char digits[] = "0123456789abcdef";
  // JSON text is UTF-8 (nlohmann refuses to write anything else, and so does SQS).
  if (!simdjson::validate_utf8(text.data(), text.size()))
    invalid("InvalidParameterValue",
            "a receipt handle, batch entry id or queue URL is not valid UTF-8");
  out += '"';
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (byte < 0x20) {
          out += "\\u00";
          out += digits[byte >> 4];
          out += digits[byte & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// {"Entries":[{"Id":..,"ReceiptHandle":..[,"VisibilityTimeout":..]},...],"QueueUrl":..}:
// the keys in the order nlohmann's sorted objects gave them.
template <typename Entry, typename Extra>
std::string encode_receipt_batch(const std::string& queue_url, const std::vector<Entry>& entries,
                                 Extra extra) {
  std::string out;
  out.reserve(64 + queue_url.size() + entries.size() * 256);
  out += "{\"Entries\":[";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    out += i ? ",{\"Id\":" : "{\"Id\":";
    append_json_string(out, entries[i].id);
    out += ",\"ReceiptHandle\":";
    append_json_string(out, entries[i].receipt_handle);
    extra(out, entries[i]);
    out += '}';
  }
  out += "],\"QueueUrl\":";
  append_json_string(out, queue_url);
  out += '}';
  return out;
}

}  // namespace

std::string encode_delete_batch(const std::string& queue_url,
                                const std::vector<DeleteMessageEntry>& entries) {
  return encode_receipt_batch(queue_url, entries, [](std::string&, const DeleteMessageEntry&) {});
}

std::string encode_change_visibility_batch(const std::string& queue_url,
                                           const std::vector<ChangeVisibilityEntry>& entries) {
  return encode_receipt_batch(queue_url, entries,
                              [](std::string& out, const ChangeVisibilityEntry& e) {
                                out += ",\"VisibilityTimeout\":";
                                out += std::to_string(e.visibility_timeout);
                              });
}

std::size_t decode_receive(std::string_view body, bool verify_md5,
                           const std::function<void(const MessageView&)>& each) {
  // The views point into the parser: one that `each` decoding another answer on this
  // thread would overwrite gets a parser of its own.
  thread_local simdjson::dom::parser shared_parser;
  thread_local bool shared_in_use = false;
  std::optional<simdjson::dom::parser> own_parser;
  simdjson::dom::parser& parser = shared_in_use ? own_parser.emplace() : shared_parser;
  struct Claim {
    bool& in_use;
    bool claimed;
    ~Claim() {
      if (claimed) in_use = false;
    }
  } claim{shared_in_use, !shared_in_use};
  shared_in_use = true;

  simdjson::dom::element doc;
  if (parser.parse(body.data(), body.size(), true).get(doc))
    malformed("ReceiveMessage body is not JSON");
  simdjson::dom::object root;
  if (doc.get_object().get(root)) malformed("ReceiveMessage body is not an object");
  simdjson::dom::array list;
  if (root["Messages"].get_array().get(list)) return 0;  // no messages: key absent

  struct Found {
    std::string_view id, receipt, body, md5_of_body, md5_of_attributes;
    std::size_t first_attribute = 0, attribute_count = 0;
    MessageAttributes message_attributes;  // rare: no allocation while empty
  };
  // SQS answers at most 10: a longer list (a hostile body) grows as it is read.
  std::vector<Found> found;
  found.reserve(std::min(list.size(), kMaxBatchEntries));
  std::vector<MessageView::Attribute> attributes;
  attributes.reserve(found.capacity() * 6);
  for (simdjson::dom::element item : list) {
    Found& msg = found.emplace_back();
    simdjson::dom::object m;
    if (item.get_object().get(m)) malformed("message is not an object");
    for (auto field : m) {
      const std::string_view key = field.key;
      if (key == "MessageId")
        msg.id = get_string(field.value, "MessageId");
      else if (key == "ReceiptHandle")
        msg.receipt = get_string(field.value, "ReceiptHandle");
      else if (key == "Body")
        msg.body = get_string(field.value, "Body");
      else if (key == "MD5OfBody")
        msg.md5_of_body = get_string(field.value, "MD5OfBody");
      else if (key == "MD5OfMessageAttributes")
        msg.md5_of_attributes = get_string(field.value, "MD5OfMessageAttributes");
      else if (key == "Attributes") {
        simdjson::dom::object attrs;
        if (field.value.get_object().get(attrs)) malformed("Attributes is not an object");
        // Given twice, both are kept (a lookup finds the first): this message's
        // attributes are still side by side.
        if (msg.attribute_count == 0) msg.first_attribute = attributes.size();
        for (auto a : attrs) attributes.emplace_back(a.key, get_string(a.value, "attribute"));
        msg.attribute_count = attributes.size() - msg.first_attribute;
      } else if (key == "MessageAttributes") {
        simdjson::dom::object attrs;
        if (field.value.get_object().get(attrs)) malformed("MessageAttributes is not an object");
        for (auto a : attrs) {
          MessageAttributeValue value;
          simdjson::dom::object v;
          if (a.value.get_object().get(v)) malformed("message attribute is not an object");
          std::string_view s;
          if (!v["DataType"].get_string().get(s)) value.data_type = s;
          if (!v["StringValue"].get_string().get(s)) value.string_value = s;
          if (!v["BinaryValue"].get_string().get(s) &&
              !crypto::base64_decode(s, value.binary_value))
            malformed("message attribute '" + std::string(a.key) + "' has invalid base64");
          msg.message_attributes.emplace(std::string(a.key), std::move(value));
        }
      }
    }
    if (msg.receipt.empty()) malformed("message without ReceiptHandle");
    if (verify_md5) {
      if (!crypto::hex_equals(crypto::md5(msg.body), msg.md5_of_body))
        throw AwsError(
            ErrorKind::integrity,
            "MD5 of the body of message " + std::string(msg.id) + " does not match MD5OfBody",
            "MD5Mismatch");
      if (!msg.message_attributes.empty() && !msg.md5_of_attributes.empty() &&
          md5_of_message_attributes(msg.message_attributes) != msg.md5_of_attributes)
        throw AwsError(ErrorKind::integrity,
                       "MD5 of the attributes of message " + std::string(msg.id) +
                           " does not match MD5OfMessageAttributes",
                       "MD5Mismatch");
    }
  }
  for (const Found& msg : found)
    each(MessageView{msg.id, msg.receipt, msg.body, msg.md5_of_body, msg.md5_of_attributes,
                     std::span(attributes).subspan(msg.first_attribute, msg.attribute_count),
                     msg.message_attributes});
  return found.size();
}

std::vector<Message> decode_receive(std::string_view body, bool verify_md5) {
  std::vector<Message> messages;
  decode_receive(body, verify_md5,
                 [&](const MessageView& view) { messages.push_back(view.to_message()); });
  return messages;
}

namespace {
// Empty when the digests match what was sent, else the reason.
std::string md5_problem(const json& result, const SendMessageEntry& sent) {
  if (string_field(result, "MD5OfMessageBody") != crypto::md5_hex(sent.body))
    return "MD5OfMessageBody does not match the body sent";
  if (!sent.message_attributes.empty() && string_field(result, "MD5OfMessageAttributes") !=
                                              md5_of_message_attributes(sent.message_attributes))
    return "MD5OfMessageAttributes does not match the attributes sent";
  return {};
}
}  // namespace

SendMessageResult decode_send(std::string_view body, const SendMessageEntry& sent,
                              bool verify_md5) {
  const json doc = parse_object(body);
  if (verify_md5) {
    if (auto problem = md5_problem(doc, sent); !problem.empty())
      throw AwsError(ErrorKind::integrity, "SendMessage: " + problem, "MD5Mismatch");
  }
  SendMessageResult result{string_field(doc, "MessageId"), string_field(doc, "SequenceNumber")};
  if (result.message_id.empty()) malformed("SendMessage response without MessageId");
  return result;
}

namespace {
// The reading decode_batch had before it used simdjson, kept for the answers simdjson
// refuses and nlohmann reads (a byte-order mark, an integer beyond 64 bits, text after
// a NUL): what was accepted still is.
BatchResult decode_batch_tree(std::string_view body) {
  const json doc = parse_object(body);
  BatchResult result;
  if (auto it = doc.find("Successful"); it != doc.end() && it->is_array())
    for (const auto& e : *it)
      result.successful.push_back(
          {string_field(e, "Id"), string_field(e, "MessageId"), string_field(e, "SequenceNumber")});
  if (auto it = doc.find("Failed"); it != doc.end() && it->is_array())
    for (const auto& e : *it) {
      BatchEntryFailure f{string_field(e, "Id"), string_field(e, "Code"),
                          string_field(e, "Message"), false};
      if (auto sf = e.find("SenderFault"); sf != e.end() && sf->is_boolean()) f.sender_fault = *sf;
      result.failed.push_back(std::move(f));
    }
  return result;
}
}  // namespace

BatchResult decode_batch(std::string_view body) {
  // Every delete and visibility change of the pipeline ends here: simdjson, no tree.
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(body.data(), body.size(), true).get(doc)) return decode_batch_tree(body);
  simdjson::dom::object root;
  if (doc.get_object().get(root)) malformed("not a JSON object");
  // Of a key given twice the last one counts, as in the tree; a field that is not a
  // string reads as empty, SenderFault counts only as a boolean.
  std::optional<simdjson::dom::array> successful, failed;
  for (auto field : root) {
    simdjson::dom::array list;
    const bool is_array = !field.value.get_array().get(list);
    if (field.key == "Successful")
      successful = is_array ? std::optional(list) : std::nullopt;
    else if (field.key == "Failed")
      failed = is_array ? std::optional(list) : std::nullopt;
  }
  auto text = [](simdjson::dom::element value) {
    std::string_view s;
    return value.get_string().get(s) ? std::string() : std::string(s);
  };
  BatchResult result;
  if (successful)
    for (simdjson::dom::element e : *successful) {
      BatchEntrySuccess entry;
      simdjson::dom::object fields;
      if (!e.get_object().get(fields))
        for (auto field : fields) {
          if (field.key == "Id")
            entry.id = text(field.value);
          else if (field.key == "MessageId")
            entry.message_id = text(field.value);
          else if (field.key == "SequenceNumber")
            entry.sequence_number = text(field.value);
        }
      result.successful.push_back(std::move(entry));
    }
  if (failed)
    for (simdjson::dom::element e : *failed) {
      BatchEntryFailure entry{{}, {}, {}, false};
      simdjson::dom::object fields;
      if (!e.get_object().get(fields))
        for (auto field : fields) {
          if (field.key == "Id")
            entry.id = text(field.value);
          else if (field.key == "Code")
            entry.code = text(field.value);
          else if (field.key == "Message")
            entry.message = text(field.value);
          else if (field.key == "SenderFault")
            entry.sender_fault = field.value.is_bool() && field.value.get_bool().value();
        }
      result.failed.push_back(std::move(entry));
    }
  return result;
}

BatchResult decode_send_batch(std::string_view body, const std::vector<SendMessageEntry>& sent,
                              bool verify_md5) {
  BatchResult result = decode_batch(body);
  if (!verify_md5) return result;
  const json doc = parse_object(body);
  std::vector<BatchEntrySuccess> kept;
  auto it = doc.find("Successful");
  for (const auto& success : result.successful) {
    const SendMessageEntry* entry = nullptr;
    for (const auto& s : sent)
      if (s.id == success.id) entry = &s;
    std::string problem = entry ? std::string() : "unknown entry id in response";
    if (entry && it != doc.end())
      for (const auto& e : *it)
        if (string_field(e, "Id") == success.id) problem = md5_problem(e, *entry);
    if (problem.empty())
      kept.push_back(success);
    else
      result.failed.push_back({success.id, "MD5Mismatch", problem, false});
  }
  result.successful = std::move(kept);
  return result;
}

ServiceError decode_error(std::string_view body, std::string_view query_error_header) {
  ServiceError error;
  const json doc = json::parse(body, nullptr, false);
  if (!doc.is_discarded() && doc.is_object()) {
    std::string type = string_field(doc, "__type");
    if (auto hash = type.rfind('#'); hash != std::string::npos) type = type.substr(hash + 1);
    error.code = type;
    error.message = string_field(doc, "message");
    if (error.message.empty()) error.message = string_field(doc, "Message");
  }
  if (error.code.empty() && !query_error_header.empty())
    error.code = std::string(query_error_header.substr(0, query_error_header.find(';')));
  return error;
}

std::optional<std::size_t> entry_index(std::string_view id, std::size_t size) {
  std::size_t value = 0;
  const auto [end, error] = std::from_chars(id.data(), id.data() + id.size(), value);
  if (id.empty() || error != std::errc{} || end != id.data() + id.size() || value >= size)
    return std::nullopt;
  return value;
}

}  // namespace sluice::sqs::codec
