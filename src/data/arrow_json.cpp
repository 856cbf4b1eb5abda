// Arrow values -> JSON (see arrow_json.h; the conversions are documented in data/parquet_rows.h).
#include "arrow_json.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#include <arrow/util/utf8.h>

#include "finetune/util/errors.h"
#include "finetune/util/json_parse.h"
#include "finetune/util/sha256.h"

namespace finetune {
namespace {

using nlohmann::ordered_json;

bool is_string_type(const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::STRING_VIEW:
      return true;
    case arrow::Type::DICTIONARY:
      return is_string_type(*static_cast<const arrow::DictionaryType&>(type).value_type());
    default:
      return false;
  }
}

// The UTC offset, in seconds, of a timestamp column's time zone: "UTC", "Etc/UTC" or "+HH:MM" /
// "-HH:MM"; nullopt for any other zone (named zones need a time zone database).
std::optional<int> utc_offset_seconds(const std::string& zone) {
  if (zone == "UTC" || zone == "Etc/UTC") return 0;
  const bool digits = zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':' &&
                      std::isdigit(static_cast<unsigned char>(zone[1])) &&
                      std::isdigit(static_cast<unsigned char>(zone[2])) &&
                      std::isdigit(static_cast<unsigned char>(zone[4])) &&
                      std::isdigit(static_cast<unsigned char>(zone[5]));
  if (!digits) return std::nullopt;
  const int hours = (zone[1] - '0') * 10 + (zone[2] - '0');
  const int minutes = (zone[4] - '0') * 10 + (zone[5] - '0');
  if (hours > 23 || minutes > 59) return std::nullopt;
  return (zone[0] == '-' ? -1 : 1) * (hours * 3600 + minutes * 60);
}

[[noreturn]] void throw_unsupported(const std::string& file, const std::string& column, const arrow::DataType& type,
                                    const std::string& why = "") {
  throw Error(file + ": column '" + column + "' has type " + type.ToString() + (why.empty() ? "" : " (" + why + ")") +
              ", which has no JSON form here (supported: null, bool, integers, float, double, strings, binary "
              "(as base64), lists, structs, maps, dictionaries, timestamps in UTC or a fixed offset, dates)");
}

// `depth`: the JSON containers around a value of this type (the row object is the first).
void check_type(const arrow::DataType& type, const std::string& column, int depth, const std::string& file) {
  const bool container = type.id() == arrow::Type::LIST || type.id() == arrow::Type::LARGE_LIST ||
                         type.id() == arrow::Type::FIXED_SIZE_LIST || type.id() == arrow::Type::STRUCT ||
                         type.id() == arrow::Type::MAP;
  if (container && depth + 1 > kMaxJsonDepth) {
    throw Error(file + ": column '" + column.substr(0, 200) + "...' nests deeper than " +
                std::to_string(kMaxJsonDepth) + " levels");
  }
  switch (type.id()) {
    case arrow::Type::NA:
    case arrow::Type::BOOL:
    case arrow::Type::INT8:
    case arrow::Type::INT16:
    case arrow::Type::INT32:
    case arrow::Type::INT64:
    case arrow::Type::UINT8:
    case arrow::Type::UINT16:
    case arrow::Type::UINT32:
    case arrow::Type::UINT64:
    case arrow::Type::FLOAT:
    case arrow::Type::DOUBLE:
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::STRING_VIEW:
    case arrow::Type::BINARY:
    case arrow::Type::LARGE_BINARY:
    case arrow::Type::FIXED_SIZE_BINARY:
    case arrow::Type::BINARY_VIEW:
    case arrow::Type::DATE32:
    case arrow::Type::DATE64:
      return;
    case arrow::Type::TIMESTAMP: {
      const std::string& zone = static_cast<const arrow::TimestampType&>(type).timezone();
      if (!zone.empty() && !utc_offset_seconds(zone)) {
        throw_unsupported(file, column, type, "only the time zones UTC and +HH:MM/-HH:MM are supported");
      }
      return;
    }
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
    case arrow::Type::FIXED_SIZE_LIST:
      check_type(*type.field(0)->type(), column + "[]", depth + 1, file);
      return;
    case arrow::Type::STRUCT:
      for (const std::shared_ptr<arrow::Field>& field : type.fields()) {
        if (!arrow::util::ValidateUTF8(field->name())) {
          throw Error(file + ": column '" + column + "' has a field whose name is not valid UTF-8");
        }
        check_type(*field->type(), column + "." + field->name(), depth + 1, file);
      }
      return;
    case arrow::Type::MAP: {
      const auto& map = static_cast<const arrow::MapType&>(type);
      // Non-string keys make an array of [key, value] pairs: two levels.
      if (!is_string_type(*map.key_type()) && depth + 2 > kMaxJsonDepth) {
        throw Error(file + ": column '" + column.substr(0, 200) + "...' nests deeper than " +
                    std::to_string(kMaxJsonDepth) + " levels");
      }
      const int inner = is_string_type(*map.key_type()) ? depth + 1 : depth + 2;
      check_type(*map.key_type(), column + ".key", inner, file);
      check_type(*map.item_type(), column + ".value", inner, file);
      return;
    }
    case arrow::Type::DICTIONARY:
      check_type(*static_cast<const arrow::DictionaryType&>(type).value_type(), column, depth, file);
      return;
    default:
      throw_unsupported(file, column, type);
  }
}

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// "YYYY-MM-DD" of a day count since 1970-01-01 (proleptic Gregorian; Howard Hinnant's
// civil_from_days, exact for every int64 day count an Arrow date or timestamp can hold).
std::string date_text(int64_t days) {
  const int64_t z = days + 719468;
  const int64_t era = floor_div(z, 146097);
  const int64_t day_of_era = z - era * 146097;
  const int64_t year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
  const int64_t day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
  const int64_t month_index = (5 * day_of_year + 2) / 153;
  const int64_t day = day_of_year - (153 * month_index + 2) / 5 + 1;
  const int64_t month = month_index < 10 ? month_index + 3 : month_index - 9;
  const int64_t year = year_of_era + era * 400 + (month <= 2 ? 1 : 0);
  char text[64];
  std::snprintf(text, sizeof(text), "%04lld-%02lld-%02lld", static_cast<long long>(year),
                static_cast<long long>(month), static_cast<long long>(day));
  return text;
}

// Python's str() of the datetime (pandas' for nanoseconds), see parquet_rows.h.
std::string timestamp_text(int64_t value, const arrow::TimestampType& type) {
  int64_t per_second = 1;
  switch (type.unit()) {
    case arrow::TimeUnit::SECOND: per_second = 1; break;
    case arrow::TimeUnit::MILLI: per_second = 1000; break;
    case arrow::TimeUnit::MICRO: per_second = 1000000; break;
    case arrow::TimeUnit::NANO: per_second = 1000000000; break;
  }
  const int64_t seconds = floor_div(value, per_second);
  const int64_t nanos = (value - seconds * per_second) * (1000000000 / per_second);
  const std::optional<int> offset = type.timezone().empty() ? 0 : utc_offset_seconds(type.timezone());
  int64_t days = floor_div(seconds, 86400);
  int64_t second_of_day = seconds - days * 86400 + offset.value_or(0);  // local time; within +-2 days
  days += floor_div(second_of_day, 86400);
  second_of_day -= floor_div(second_of_day, 86400) * 86400;
  char clock[64];
  std::snprintf(clock, sizeof(clock), " %02d:%02d:%02d", static_cast<int>(second_of_day / 3600),
                static_cast<int>(second_of_day / 60 % 60), static_cast<int>(second_of_day % 60));
  std::string text = date_text(days) + clock;
  if (nanos != 0) {
    char fraction[32];
    if (nanos % 1000 == 0) {
      std::snprintf(fraction, sizeof(fraction), ".%06lld", static_cast<long long>(nanos / 1000));
    } else {
      std::snprintf(fraction, sizeof(fraction), ".%09lld", static_cast<long long>(nanos));
    }
    text += fraction;
  }
  if (!type.timezone().empty()) {
    const int minutes = *offset / 60;
    char zone[32];
    std::snprintf(zone, sizeof(zone), "%c%02d:%02d", minutes < 0 ? '-' : '+', std::abs(minutes) / 60,
                  std::abs(minutes) % 60);
    text += zone;
  }
  return text;
}

ordered_json number_json(double value) {
  return std::isfinite(value) ? ordered_json(value) : ordered_json(nullptr);
}

ordered_json value_json(const arrow::Array& array, int64_t i);

template <typename ListArray>
ordered_json list_json(const ListArray& list, int64_t i) {
  ordered_json items = ordered_json::array();
  const arrow::Array& values = *list.values();
  const int64_t begin = list.value_offset(i);
  for (int64_t k = begin; k < begin + list.value_length(i); ++k) items.push_back(value_json(values, k));
  return items;
}

ordered_json map_json(const arrow::MapArray& map, int64_t i) {
  const arrow::Array& keys = *map.keys();
  const arrow::Array& items = *map.items();
  const int64_t begin = map.value_offset(i);
  const int64_t end = begin + map.value_length(i);
  if (!is_string_type(*keys.type())) {
    ordered_json pairs = ordered_json::array();
    for (int64_t k = begin; k < end; ++k) {
      pairs.push_back(ordered_json::array({value_json(keys, k), value_json(items, k)}));
    }
    return pairs;
  }
  ordered_json object = ordered_json::object();
  for (int64_t k = begin; k < end; ++k) {
    const ordered_json key = value_json(keys, k);
    if (!key.is_string()) throw Error("a map key is null");
    object[key.get_ref<const std::string&>()] = value_json(items, k);
  }
  return object;
}

ordered_json struct_json(const arrow::StructArray& array, int64_t i) {
  ordered_json object = ordered_json::object();
  const arrow::DataType& type = *array.type();
  for (int f = 0; f < array.num_fields(); ++f) object[type.field(f)->name()] = value_json(*array.field(f), i);
  return object;
}

template <typename ArrayType>
ordered_json text_json(const arrow::Array& array, int64_t i) {
  const std::string_view view = static_cast<const ArrayType&>(array).GetView(i);
  return ordered_json(std::string(view));
}

template <typename ArrayType>
ordered_json bytes_json(const arrow::Array& array, int64_t i) {
  return ordered_json(base64_encode(std::string(static_cast<const ArrayType&>(array).GetView(i))));
}

template <typename ArrayType>
auto number(const arrow::Array& array, int64_t i) {
  return static_cast<const ArrayType&>(array).Value(i);
}

ordered_json value_json(const arrow::Array& array, int64_t i) {
  if (array.IsNull(i)) return nullptr;
  switch (array.type_id()) {
    case arrow::Type::NA: return nullptr;
    case arrow::Type::BOOL: return number<arrow::BooleanArray>(array, i);
    case arrow::Type::INT8: return static_cast<int64_t>(number<arrow::Int8Array>(array, i));
    case arrow::Type::INT16: return static_cast<int64_t>(number<arrow::Int16Array>(array, i));
    case arrow::Type::INT32: return static_cast<int64_t>(number<arrow::Int32Array>(array, i));
    case arrow::Type::INT64: return static_cast<int64_t>(number<arrow::Int64Array>(array, i));
    case arrow::Type::UINT8: return static_cast<uint64_t>(number<arrow::UInt8Array>(array, i));
    case arrow::Type::UINT16: return static_cast<uint64_t>(number<arrow::UInt16Array>(array, i));
    case arrow::Type::UINT32: return static_cast<uint64_t>(number<arrow::UInt32Array>(array, i));
    case arrow::Type::UINT64: return static_cast<uint64_t>(number<arrow::UInt64Array>(array, i));
    case arrow::Type::FLOAT: return number_json(number<arrow::FloatArray>(array, i));
    case arrow::Type::DOUBLE: return number_json(number<arrow::DoubleArray>(array, i));
    case arrow::Type::STRING: return text_json<arrow::StringArray>(array, i);
    case arrow::Type::LARGE_STRING: return text_json<arrow::LargeStringArray>(array, i);
    case arrow::Type::STRING_VIEW: return text_json<arrow::StringViewArray>(array, i);
    case arrow::Type::BINARY: return bytes_json<arrow::BinaryArray>(array, i);
    case arrow::Type::LARGE_BINARY: return bytes_json<arrow::LargeBinaryArray>(array, i);
    case arrow::Type::FIXED_SIZE_BINARY: return bytes_json<arrow::FixedSizeBinaryArray>(array, i);
    case arrow::Type::BINARY_VIEW: return bytes_json<arrow::BinaryViewArray>(array, i);
    case arrow::Type::DATE32: return date_text(number<arrow::Date32Array>(array, i));
    case arrow::Type::DATE64: return date_text(floor_div(number<arrow::Date64Array>(array, i), 86400000));
    case arrow::Type::TIMESTAMP:
      return timestamp_text(number<arrow::TimestampArray>(array, i),
                            static_cast<const arrow::TimestampType&>(*array.type()));
    case arrow::Type::LIST: return list_json(static_cast<const arrow::ListArray&>(array), i);
    case arrow::Type::LARGE_LIST: return list_json(static_cast<const arrow::LargeListArray&>(array), i);
    case arrow::Type::FIXED_SIZE_LIST: return list_json(static_cast<const arrow::FixedSizeListArray&>(array), i);
    case arrow::Type::STRUCT: return struct_json(static_cast<const arrow::StructArray&>(array), i);
    case arrow::Type::MAP: return map_json(static_cast<const arrow::MapArray&>(array), i);
    case arrow::Type::DICTIONARY: {
      const auto& dictionary = static_cast<const arrow::DictionaryArray&>(array);
      return value_json(*dictionary.dictionary(), dictionary.GetValueIndex(i));
    }
    default:  // check_json_convertible refused it
      throw Error("unexpected type " + array.type()->ToString());
  }
}

}  // namespace

void check_json_convertible(const arrow::Schema& schema, const std::string& file) {
  arrow::util::InitializeUTF8();
  for (const std::shared_ptr<arrow::Field>& field : schema.fields()) {
    if (!arrow::util::ValidateUTF8(field->name())) throw Error(file + ": a column name is not valid UTF-8");
    check_type(*field->type(), field->name(), 1, file);
  }
}

JsonRows::JsonRows(const arrow::RecordBatch& batch, const std::string& file)
    : file_(file), columns_(batch.columns()), rows_(batch.num_rows()) {
  for (const std::shared_ptr<arrow::Field>& field : batch.schema()->fields()) names_.push_back(field->name());
}

nlohmann::ordered_json JsonRows::row(int64_t i) const {
  ordered_json object = ordered_json::object();
  for (size_t c = 0; c < columns_.size(); ++c) {
    try {
      object[names_[c]] = value_json(*columns_[c], i);
    } catch (const Error& e) {
      throw Error(file_ + ": column '" + names_[c] + "': " + e.what());
    }
  }
  return object;
}

}  // namespace finetune
