// NvmeIndex: the NVMe tier's persistent index in RocksDB,
// (namespace name, page key) -> slot, size, checksum, parent, recency.
// The tier writes a record only after the page's bytes are durable and
// deletes it before the slot is reused, so a record never points at bytes
// that are not its page.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvtier/page_key.h"

namespace rocksdb {
class DB;
}

namespace kvtier::tiers::nvme {

struct IndexRecord {
  std::string ns;
  PageKey key;
  PageKey parent;
  uint64_t offset = 0;  // byte offset of the slot in the data file
  uint32_t bytes = 0;   // page bytes
  uint64_t checksum = 0;
  uint64_t stamp = 0;
  // Verification chunks (tiers/common/verify_chunks.h), when the page has them:
  // stored in version-2 records; version-1 records have none.
  uint32_t chunk_bytes = 0;
  std::vector<uint64_t> chunk_sums;
};

class NvmeIndex {
 public:
  // What Open found when the stored geometry differs from the requested one.
  struct FormatChange {
    std::string stored;    // the fingerprint the index was written for; empty: no change
    uint64_t records = 0;  // page records it holds (all lost by a reformat)
  };
  // Opens (creating) the database in `dir`. `fingerprint` describes the data
  // file's geometry. When it differs from the stored one every record would
  // point at the wrong bytes: with `reformat` they are all deleted and the
  // new fingerprint stored; without, nothing is changed and Open fails with
  // FailedPrecondition. Either way *change says what was found.
  static absl::StatusOr<std::unique_ptr<NvmeIndex>> Open(const std::string& dir,
                                                         const std::string& fingerprint,
                                                         bool reformat, FormatChange* change);
  ~NvmeIndex();

  // All records in one atomic write. The WAL write reaches the OS before it
  // returns, so a process crash keeps it; the data the records point at must
  // already be durable.
  absl::Status PutBatch(const std::vector<IndexRecord>& records);
  absl::Status Delete(absl::string_view ns, const PageKey& key);
  absl::StatusOr<bool> Exists(absl::string_view ns, const PageKey& key);
  // The key's record; NotFound when there is none, DataLoss when it does
  // not decode.
  absl::StatusOr<IndexRecord> Get(absl::string_view ns, const PageKey& key);
  // Deletes the key's record only when it points at `offset`. The caller
  // serializes it against PutBatch of the same key.
  absl::Status DeleteIf(absl::string_view ns, const PageKey& key, uint64_t offset);
  // Calls fn for each decodable record. Records that do not decode, and those
  // for which fn returns false, are deleted. Returns how many were deleted.
  absl::StatusOr<uint64_t> ForEach(const std::function<bool(const IndexRecord&)>& fn);
  absl::StatusOr<uint64_t> Count();

  // Namespace names up to 254 bytes take one length byte; longer ones (up
  // to 65535) a 0 byte then two (little-endian): 0 was never a valid length,
  // so records written before long names existed decode as they did.
  static std::string EncodeKey(absl::string_view ns, const PageKey& key);
  static std::string EncodeValue(const IndexRecord& r);
  // Parses a stored pair; false when it is not a valid version-1 or -2
  // record (version 2 adds the verification chunks).
  static bool Decode(absl::string_view key, absl::string_view value, IndexRecord* out);

 private:
  explicit NvmeIndex(rocksdb::DB* db) : db_(db) {}
  rocksdb::DB* db_;
};

}  // namespace kvtier::tiers::nvme
