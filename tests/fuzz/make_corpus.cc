// Writes the seed corpus of request_decoder_fuzz: valid requests of every
// type (inline PUTs with their page frames) and a few invalid ones, in the
// framing of fuzz_frames.h. Run: make_corpus tests/fuzz/corpus
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "kvtier.pb.h"
#include "tests/fuzz/fuzz_frames.h"

namespace {

using kvtier::wire::Request;

const std::string kSession(16, '\x42');

std::string Keys(int n) {
  std::string out;
  for (int i = 0; i < n; ++i)
    for (int b = 0; b < 16; ++b) out.push_back(static_cast<char>(i * 31 + b));
  return out;
}

Request Base(uint64_t id) {
  Request r;
  r.set_version(1);
  r.set_request_id(id);
  r.set_session_id(kSession);
  return r;
}

void Write(const std::string& dir, const std::string& name,
           const std::vector<std::string>& frames) {
  std::ofstream(dir + "/" + name, std::ios::binary) << kvtier::fuzz::JoinFrames(frames);
}

void Write(const std::string& dir, const std::string& name, const Request& r,
           std::vector<std::string> payloads = {}) {
  payloads.insert(payloads.begin(), r.SerializeAsString());
  Write(dir, name, payloads);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  {
    Request r = Base(1);
    r.clear_session_id();
    auto* h = r.mutable_hello();
    h->set_tenant("alice");
    h->set_token("alice-secret-1");
    h->set_client_name("seed");
    Write(dir, "hello", r);
    auto* l = h->mutable_layout();
    l->set_layers(2), l->set_kv_heads(2), l->set_head_dim(64), l->set_tokens_per_page(64);
    l->set_dtype(kvtier::wire::FP16);
    Write(dir, "hello_layout", r);
    l->set_dtype(kvtier::wire::INT8);
    Write(dir, "hello_layout_int8", r);
    l->set_layers(0);
    Write(dir, "bad_hello_layout", r);
  }
  {
    Request r = Base(2);
    r.mutable_register_buffer()->set_shm_name("/kvtier-client-1-0");
    r.mutable_register_buffer()->set_size(1 << 20);
    Write(dir, "register", r);
    r.mutable_register_buffer()->set_shm_name("no-slash");
    Write(dir, "bad_register_name", r);
    // By descriptor (an unnamed memfd, e.g. a hugetlb arena): the name is a
    // label and may be empty.
    r.mutable_register_buffer()->set_shm_name("");
    r.mutable_register_buffer()->set_fd_ticket(std::string(16, '\x5a'));
    Write(dir, "register_fd_ticket", r);
    r.mutable_register_buffer()->set_fd_ticket(std::string(15, '\x5a'));
    Write(dir, "bad_register_fd_ticket", r);
  }
  {
    Request r = Base(3);
    r.mutable_unregister_buffer()->set_buffer_id(1);
    Write(dir, "unregister", r);
  }
  {
    Request r = Base(4);
    r.mutable_lookup()->set_keys(Keys(3));
    Write(dir, "lookup", r);
    r.mutable_lookup()->set_keys(Keys(3) + "x");
    Write(dir, "bad_lookup_17n", r);
    r.mutable_lookup()->set_keys(Keys(4097));
    Write(dir, "bad_lookup_too_many", r);
  }
  {  // Batched LOOKUP: chain_lengths cut keys into chains.
    Request r = Base(4);
    r.mutable_lookup()->set_keys(Keys(6));
    for (uint32_t n : {1, 3, 2}) r.mutable_lookup()->add_chain_lengths(n);
    r.mutable_lookup()->set_lease_ms(500);
    Write(dir, "lookup_batch", r);
    r.mutable_lookup()->set_chain_lengths(1, 0);  // an empty chain
    Write(dir, "bad_lookup_batch_empty_chain", r);
    r.mutable_lookup()->set_chain_lengths(1, 4);  // lengths sum to 7, keys hold 6
    Write(dir, "bad_lookup_batch_sum", r);
  }
  {
    Request r = Base(5);
    r.mutable_get()->set_keys(Keys(2));
    Write(dir, "get_inline", r);
    r.mutable_get()->set_buffer_id(1);
    r.mutable_get()->add_offsets(0);
    r.mutable_get()->add_offsets(65536);
    Write(dir, "get_buffer", r);
    r.mutable_get()->add_offsets(1);
    Write(dir, "bad_get_offsets", r);
  }
  {
    Request r = Base(6);
    r.mutable_put()->set_keys(Keys(2));
    r.mutable_put()->set_parent(std::string(16, '\0'));
    Write(dir, "put_inline", r, {std::string(64, 'a'), std::string(64, 'b')});
    Write(dir, "bad_put_inline_frames", r, {std::string(64, 'a')});
    r.mutable_put()->set_buffer_id(1);
    r.mutable_put()->add_offsets(0);
    r.mutable_put()->add_offsets(65536);
    Write(dir, "put_buffer", r);
    r.mutable_put()->set_parent("short");
    Write(dir, "bad_put_parent", r);
  }
  {
    Request r = Base(7);
    r.mutable_delete_()->set_keys(Keys(1));
    Write(dir, "delete", r);
  }
  {
    Request r = Base(8);
    r.mutable_stats();
    Write(dir, "stats", r);
    r.set_version(2);
    Write(dir, "bad_version", r);
    r.set_version(1);
    r.clear_session_id();
    Write(dir, "bad_no_session", r);
  }
  {
    Request r = Base(9);
    r.mutable_bye();
    Write(dir, "bye", r);
    Write(dir, "bad_no_body", Base(10));
  }
  {
    // Operator requests (PING, EVICT, FLUSH, TENANTS).
    Request r = Base(11);
    r.mutable_ping();
    Write(dir, "ping", r);
    r.mutable_evict()->set_namespace_("bob");
    r.mutable_evict()->set_tier(kvtier::wire::TIER_HOST);
    r.mutable_evict()->set_pages(4);
    Write(dir, "evict", r);
    r.mutable_evict()->set_pages(0);
    Write(dir, "bad_evict_nothing", r);
    r.mutable_flush();
    Write(dir, "flush", r);
    r.mutable_tenants();
    Write(dir, "tenants", r);
  }
  {
    // Prefetch: hints, GET policies, layer-wise GET.
    Request r = Base(12);
    r.mutable_prefetch()->set_keys(Keys(3));
    r.mutable_prefetch()->set_deadline_ms(50);
    Write(dir, "prefetch", r);
    r.mutable_prefetch()->set_target(kvtier::wire::TIER_HBM);
    Write(dir, "bad_prefetch_target", r);
    Request g = Base(13);
    g.mutable_get()->set_keys(Keys(2));
    g.mutable_get()->set_buffer_id(1);
    g.mutable_get()->add_offsets(4096);
    g.mutable_get()->add_offsets(4096 + (1 << 16));
    g.mutable_get()->set_policy(kvtier::wire::GET_TIMEOUT);
    g.mutable_get()->set_timeout_ms(5);
    Write(dir, "get_timeout", g);
    g.mutable_get()->set_policy(kvtier::wire::GET_WAIT_COMPLETE);
    g.mutable_get()->set_layerwise(true);
    g.mutable_get()->set_layer_progress_offset(0);
    Write(dir, "get_layerwise", g);
    g.mutable_get()->set_layer_progress_offset(3);
    Write(dir, "bad_get_progress_offset", g);
  }
  {
    // GPU buffers: a CUDA IPC handle, and an emulated-device arena.
    Request r = Base(14);
    auto* rb = r.mutable_register_buffer();
    rb->set_kind(kvtier::wire::BUFFER_CUDA_IPC);
    rb->set_device_handle(std::string(64, '\x5a'));
    rb->set_size(1 << 20);
    Write(dir, "register_cuda_ipc", r);
    rb->set_device_handle("short");
    Write(dir, "bad_register_cuda_handle", r);
    rb->set_kind(kvtier::wire::BUFFER_EMULATED_DEVICE);
    rb->set_device_handle("/kvtier-emu-1");
    Write(dir, "register_emulated", r);
  }
  Write(dir, "bad_empty_frame", std::vector<std::string>{""});
  Write(dir, "bad_garbage", std::vector<std::string>{std::string(11, '\xff')});
  return 0;
}
