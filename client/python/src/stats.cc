// Protobuf replies (STATS, PING, TENANTS) as plain dicts, by reflection, so
// Python needs no generated code: nested messages become dicts, repeated
// fields lists, enums their value names, 64-bit integers Python ints.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/reflection.h>

#include "common.h"

namespace kvtier::py {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

py::object Scalar(const Message& m, const Reflection* r, const FieldDescriptor* f, int i) {
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return py::int_(rep ? r->GetRepeatedInt32(m, f, i) : r->GetInt32(m, f));
    case FieldDescriptor::CPPTYPE_INT64:
      return py::int_(rep ? r->GetRepeatedInt64(m, f, i) : r->GetInt64(m, f));
    case FieldDescriptor::CPPTYPE_UINT32:
      return py::int_(rep ? r->GetRepeatedUInt32(m, f, i) : r->GetUInt32(m, f));
    case FieldDescriptor::CPPTYPE_UINT64:
      return py::int_(rep ? r->GetRepeatedUInt64(m, f, i) : r->GetUInt64(m, f));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return py::float_(rep ? r->GetRepeatedDouble(m, f, i) : r->GetDouble(m, f));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return py::float_(rep ? r->GetRepeatedFloat(m, f, i) : r->GetFloat(m, f));
    case FieldDescriptor::CPPTYPE_BOOL:
      return py::bool_(rep ? r->GetRepeatedBool(m, f, i) : r->GetBool(m, f));
    case FieldDescriptor::CPPTYPE_ENUM:
      return py::str((rep ? r->GetRepeatedEnum(m, f, i) : r->GetEnum(m, f))->name());
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string s = rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f);
      if (f->type() == FieldDescriptor::TYPE_BYTES) return py::bytes(s);
      return py::str(s);
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageToDict(rep ? r->GetRepeatedMessage(m, f, i) : r->GetMessage(m, f));
  }
  return py::none();
}

}  // namespace

py::dict MessageToDict(const Message& m) {
  py::dict d;
  const auto* desc = m.GetDescriptor();
  const Reflection* r = m.GetReflection();
  // Every declared field, set or not, so callers can index without .get().
  for (int k = 0; k < desc->field_count(); ++k) {
    const FieldDescriptor* f = desc->field(k);
    if (f->is_map()) {
      // Maps arrive as repeated entry messages {key, value}.
      py::dict out;
      for (int i = 0; i < r->FieldSize(m, f); ++i) {
        const Message& e = r->GetRepeatedMessage(m, f, i);
        const auto* ed = e.GetDescriptor();
        out[Scalar(e, e.GetReflection(), ed->field(0), 0)] =
            Scalar(e, e.GetReflection(), ed->field(1), 0);
      }
      d[py::str(f->name())] = out;
    } else if (f->is_repeated()) {
      py::list out;
      for (int i = 0; i < r->FieldSize(m, f); ++i) out.append(Scalar(m, r, f, i));
      d[py::str(f->name())] = out;
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !r->HasField(m, f)) {
      d[py::str(f->name())] = py::none();
    } else {
      d[py::str(f->name())] = Scalar(m, r, f, 0);
    }
  }
  return d;
}

}  // namespace kvtier::py
