// RocksDB-backed index of the NVMe tier; see nvme_index.h.
#include "tiers/nvme/nvme_index.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace kvtier::tiers::nvme {
namespace {

constexpr char kPagePrefix = 'p';
constexpr char kFingerprintKey[] = "meta/fingerprint";
constexpr uint8_t kRecordVersion = 1;        // no verification chunks
constexpr uint8_t kChunkedRecordVersion = 2;  // + u32 chunk bytes, u16 count, u64 sums
constexpr size_t kValueBytes = 1 + 16 + 8 + 4 + 8 + 8;
constexpr size_t kChunkHeaderBytes = 4 + 2;

template <typename T>
void Append(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, arm64)
  out.append(b, sizeof(T));
}

template <typename T>
T Take(const char*& p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  p += sizeof(T);
  return v;
}

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsCorruption()) return absl::DataLossError(absl::StrCat(what, ": ", s.ToString()));
  return absl::InternalError(absl::StrCat(what, ": ", s.ToString()));
}

}  // namespace

std::string NvmeIndex::EncodeKey(absl::string_view ns, const PageKey& key) {
  std::string k;
  k.reserve(4 + ns.size() + kPageKeyBytes);
  k.push_back(kPagePrefix);
  if (ns.size() < 255) {
    k.push_back(static_cast<char>(ns.size()));
  } else {
    k.push_back(0);
    Append(k, static_cast<uint16_t>(ns.size()));
  }
  k.append(ns.data(), ns.size());
  k.append(reinterpret_cast<const char*>(key.bytes.data()), kPageKeyBytes);
  return k;
}

std::string NvmeIndex::EncodeValue(const IndexRecord& r) {
  std::string v;
  const bool chunked = r.chunk_bytes != 0 && !r.chunk_sums.empty() && r.chunk_sums.size() <= UINT16_MAX;
  v.reserve(kValueBytes + (chunked ? kChunkHeaderBytes + 8 * r.chunk_sums.size() : 0));
  v.push_back(static_cast<char>(chunked ? kChunkedRecordVersion : kRecordVersion));
  v.append(reinterpret_cast<const char*>(r.parent.bytes.data()), kPageKeyBytes);
  Append(v, r.offset);
  Append(v, r.bytes);
  Append(v, r.checksum);
  Append(v, r.stamp);
  if (!chunked) return v;
  Append(v, r.chunk_bytes);
  Append(v, static_cast<uint16_t>(r.chunk_sums.size()));
  for (uint64_t s : r.chunk_sums) Append(v, s);
  return v;
}

bool NvmeIndex::Decode(absl::string_view key, absl::string_view value, IndexRecord* out) {
  if (key.size() < 2 || key[0] != kPagePrefix) return false;
  size_t ns_len = static_cast<uint8_t>(key[1]);
  size_t at = 2;
  if (ns_len == 0) {  // long name: two length bytes follow
    if (key.size() < 4) return false;
    const char* p = key.data() + 2;
    ns_len = Take<uint16_t>(p);
    at = 4;
    if (ns_len < 255) return false;  // not how it would have been written
  }
  if (key.size() != at + ns_len + kPageKeyBytes) return false;
  if (value.size() < kValueBytes) return false;
  const uint8_t version = static_cast<uint8_t>(value[0]);
  if (version == kRecordVersion ? value.size() != kValueBytes
                                : version != kChunkedRecordVersion ||
                                      value.size() < kValueBytes + kChunkHeaderBytes)
    return false;
  out->ns = std::string(key.substr(at, ns_len));
  out->key = PageKey::FromBytes(key.data() + at + ns_len);
  const char* p = value.data() + 1;
  out->parent = PageKey::FromBytes(p);
  p += kPageKeyBytes;
  out->offset = Take<uint64_t>(p);
  out->bytes = Take<uint32_t>(p);
  out->checksum = Take<uint64_t>(p);
  out->stamp = Take<uint64_t>(p);
  out->chunk_bytes = 0;
  out->chunk_sums.clear();
  if (version == kRecordVersion) return true;
  out->chunk_bytes = Take<uint32_t>(p);
  const uint16_t n = Take<uint16_t>(p);
  const uint64_t c = out->chunk_bytes;
  if (c == 0 || c % 4096 != 0 || n != (uint64_t{out->bytes} + c - 1) / c ||
      value.size() != kValueBytes + kChunkHeaderBytes + 8u * n)
    return false;
  out->chunk_sums.resize(n);
  for (uint64_t& s : out->chunk_sums) s = Take<uint64_t>(p);
  return true;
}

namespace {

// Page records under the prefix, decodable or not: what a reformat deletes.
absl::StatusOr<uint64_t> CountPageKeys(rocksdb::DB* db) {
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  uint64_t n = 0;
  for (it->Seek(std::string(1, kPagePrefix)); it->Valid() && it->key()[0] == kPagePrefix;
       it->Next())
    ++n;
  if (!it->status().ok()) return FromRocks(it->status(), "counting NVMe index records");
  return n;
}

constexpr size_t kBlockCacheBytes = 2 << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<NvmeIndex>> NvmeIndex::Open(const std::string& dir,
                                                           const std::string& fingerprint,
                                                           bool reformat, FormatChange* change) {
  *change = FormatChange{};
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_background_jobs = 2;
  options.keep_log_file_num = 2;
  options.max_log_file_size = 1 << 20;
  // Index records are ~100 bytes: an 8 MiB memtable holds ~80k of them. The
  // default 64 MiB made the daemon's RSS climb for most of an hour before
  // the first flush (the soak's hour run, docs/BENCHMARKS.md), which looks
  // like a leak and costs 56 MiB per daemon for nothing.
  options.write_buffer_size = 8 << 20;
  // An explicit, small block cache: RocksDB's default is 8 MiB per DB, which
  // the reads before each delete (DeleteIf) filled over the soak's first
  // twenty minutes, most of its RSS growth after warm-up (a heaptrack run,
  // docs/BENCHMARKS.md). Index reads are rare next to page reads; the table
  // files are in the page cache anyway.
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(kBlockCacheBytes);
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  // A truncated WAL tail after a crash is expected, not corruption.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &db);
  if (!s.ok()) return FromRocks(s, absl::StrCat("cannot open NVMe index at ", dir));
  std::unique_ptr<NvmeIndex> index(new NvmeIndex(db));
  std::string stored;
  s = db->Get(rocksdb::ReadOptions(), kFingerprintKey, &stored);
  if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "reading NVMe index fingerprint");
  if (s.ok() && stored == fingerprint) return index;
  if (s.ok()) {
    // Geometry changed: every record would point at the wrong bytes. They
    // are the operator's cached pages: deleted only when asked to.
    change->stored = stored;
    ASSIGN_OR_RETURN(change->records, CountPageKeys(db));
    if (!reformat)
      return absl::FailedPreconditionError(absl::StrCat(
          "NVMe index at ", dir, " was written for '", stored, "', not '", fingerprint, "'"));
    rocksdb::WriteBatch batch;
    batch.DeleteRange(db->DefaultColumnFamily(), std::string(1, kPagePrefix),
                      std::string(1, kPagePrefix + 1));
    s = db->Write(rocksdb::WriteOptions(), &batch);
    if (!s.ok()) return FromRocks(s, "wiping stale NVMe index");
  }
  rocksdb::WriteOptions sync;
  sync.sync = true;
  s = db->Put(sync, kFingerprintKey, fingerprint);
  if (!s.ok()) return FromRocks(s, "writing NVMe index fingerprint");
  return index;
}

NvmeIndex::~NvmeIndex() {
  if (db_ != nullptr) {
    db_->FlushWAL(/*sync=*/true).PermitUncheckedError();
    db_->Close().PermitUncheckedError();
    delete db_;
  }
}

absl::Status NvmeIndex::PutBatch(const std::vector<IndexRecord>& records) {
  rocksdb::WriteBatch batch;
  for (const IndexRecord& r : records) batch.Put(EncodeKey(r.ns, r.key), EncodeValue(r));
  return FromRocks(db_->Write(rocksdb::WriteOptions(), &batch), "NVMe index batch put");
}

absl::Status NvmeIndex::Delete(absl::string_view ns, const PageKey& key) {
  return FromRocks(db_->Delete(rocksdb::WriteOptions(), EncodeKey(ns, key)), "NVMe index delete");
}

absl::StatusOr<bool> NvmeIndex::Exists(absl::string_view ns, const PageKey& key) {
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), EncodeKey(ns, key), &v);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return FromRocks(s, "NVMe index read");
  return true;
}

absl::StatusOr<IndexRecord> NvmeIndex::Get(absl::string_view ns, const PageKey& key) {
  const std::string k = EncodeKey(ns, key);
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), k, &v);
  if (s.IsNotFound()) return absl::NotFoundError("no NVMe index record for the page");
  if (!s.ok()) return FromRocks(s, "NVMe index read");
  IndexRecord r;
  if (!Decode(k, v, &r)) return absl::DataLossError("NVMe index record does not decode");
  return r;
}

absl::Status NvmeIndex::DeleteIf(absl::string_view ns, const PageKey& key, uint64_t offset) {
  const std::string k = EncodeKey(ns, key);
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), k, &v);
  if (s.IsNotFound()) return absl::OkStatus();
  if (!s.ok()) return FromRocks(s, "NVMe index read before delete");
  IndexRecord r;
  if (Decode(k, v, &r) && r.offset != offset) return absl::OkStatus();  // a newer copy's record
  return FromRocks(db_->Delete(rocksdb::WriteOptions(), k), "NVMe index delete");
}

absl::StatusOr<uint64_t> NvmeIndex::ForEach(const std::function<bool(const IndexRecord&)>& fn) {
  std::vector<std::string> doomed;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(std::string(1, kPagePrefix)); it->Valid() && it->key()[0] == kPagePrefix; it->Next()) {
    IndexRecord r;
    absl::string_view k(it->key().data(), it->key().size());
    absl::string_view v(it->value().data(), it->value().size());
    if (!Decode(k, v, &r) || !fn(r)) doomed.emplace_back(k);
  }
  if (!it->status().ok()) return FromRocks(it->status(), "scanning NVMe index");
  rocksdb::WriteBatch batch;
  for (const std::string& k : doomed) batch.Delete(k);
  if (!doomed.empty()) {
    rocksdb::Status s = db_->Write(rocksdb::WriteOptions(), &batch);
    if (!s.ok()) return FromRocks(s, "deleting invalid NVMe index records");
  }
  return doomed.size();
}

absl::StatusOr<uint64_t> NvmeIndex::Count() {
  uint64_t n = 0;
  auto deleted = ForEach([&n](const IndexRecord&) { ++n; return true; });
  if (!deleted.ok()) return deleted.status();
  return n;
}

}  // namespace kvtier::tiers::nvme
