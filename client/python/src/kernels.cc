// kvtier._native.paged_attention: the decoder's CPU paged cached-attention
// kernels (kernels/, the ones kvtier-generate runs) over an arena of pages the
// Python model owns, so the Python model attends straight from the restored
// fp16/bf16 pages as the C++ decoder does instead of converting every layer
// to fp32 first (issue 25: that conversion and torch's per-head matrix-vector
// products were half of a restored TTFT). An engine in Python calls a paged
// attention op the same way (vLLM's paged_attention, FlashInfer).
//
// Every buffer comes from Python, so every size is checked here before a
// kernel sees a pointer: a wrong shape is a ValueError naming it, never a
// read past a buffer. Block-table entries are checked by the kernels.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common.h"
#include "kvtier/kernels/attention.h"

namespace kvtier::py {
namespace {

// A C-contiguous buffer of `count` elements of `format` (struct codes), its
// data pointer. ValueError names `what` otherwise.
void* Contiguous(const py::buffer_info& b, const char* what, const char* format,
                 size_t item_bytes, uint64_t count, bool writable) {
  if (b.format != format || size_t(b.itemsize) != item_bytes)
    throw py::value_error(std::string("paged_attention: ") + what + " must hold " +
                          (format[0] == 'f' ? "float32" : "int32") + " elements, got format '" +
                          b.format + "'");
  int64_t expect = b.itemsize;
  for (py::ssize_t d = b.ndim - 1; d >= 0; --d) {
    if (b.shape[d] > 1 && b.strides[d] != expect)
      throw py::value_error(std::string("paged_attention: ") + what + " must be contiguous");
    expect *= b.shape[d];
  }
  if (uint64_t(b.size) != count)
    throw py::value_error(std::string("paged_attention: ") + what + " has " +
                          std::to_string(b.size) + " elements, expected " + std::to_string(count));
  if (writable && b.readonly)
    throw py::value_error(std::string("paged_attention: ") + what + " must be writable");
  return b.ptr;
}

// Scratch per calling thread, grown to the largest call: a fresh workspace per
// layer would page-fault on every call.
kernels::Workspace Scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return {buf.data(), buf.size()};
}

void PagedAttention(const py::buffer& arena, const Layout& layout, uint64_t num_pages,
                    uint32_t layer, const py::buffer& block_table, uint32_t start,
                    const py::buffer& q, const py::buffer& out, uint32_t num_q_heads,
                    float sm_scale, uint32_t sliding_window) {
  kernels::PagedKv kv = kernels::MakePagedKv(layout, nullptr, num_pages);
  kv.layer = layer;
  py::buffer_info a = arena.request();
  if (num_pages == 0 || a.readonly ||
      uint64_t(a.size) * uint64_t(a.itemsize) / num_pages < kv.PageBytes())
    throw py::value_error("paged_attention: the arena must be writable and hold num_pages (" +
                          std::to_string(num_pages) + ") pages of " +
                          std::to_string(kv.PageBytes()) + " bytes, got " +
                          std::to_string(uint64_t(a.size) * uint64_t(a.itemsize)) + " bytes");
  kv.arena = a.ptr;
  if (layer >= layout.layers)
    throw py::value_error("paged_attention: layer " + std::to_string(layer) + " of a " +
                          std::to_string(layout.layers) + "-layer layout");
  if (num_q_heads == 0 || num_q_heads % layout.kv_heads != 0)
    throw py::value_error("paged_attention: num_q_heads " + std::to_string(num_q_heads) +
                          " is not a positive multiple of kv_heads " +
                          std::to_string(layout.kv_heads));
  py::buffer_info qb = q.request(), ob = out.request(true), tb = block_table.request();
  const uint64_t row = uint64_t(num_q_heads) * layout.head_dim;
  if (qb.size <= 0 || uint64_t(qb.size) % row != 0)
    throw py::value_error("paged_attention: q has " + std::to_string(qb.size) +
                          " elements, not a positive multiple of num_q_heads * head_dim (" +
                          std::to_string(row) + ")");
  const uint64_t n = uint64_t(qb.size) / row;
  if (n > UINT32_MAX - start)
    throw py::value_error("paged_attention: start + queries overflows 32 bits");
  auto* qp = static_cast<const float*>(Contiguous(qb, "q", "f", 4, n * row, false));
  auto* op = static_cast<float*>(Contiguous(ob, "out", "f", 4, n * row, true));
  const uint64_t need = (start + n + layout.tokens_per_page - 1) / layout.tokens_per_page;
  if (uint64_t(tb.size) < need)
    throw py::value_error("paged_attention: the block table has " + std::to_string(tb.size) +
                          " pages, positions up to " + std::to_string(start + n) + " need " +
                          std::to_string(need));
  auto* tp = static_cast<const int32_t*>(
      Contiguous(tb, "block_table", "i", 4, uint64_t(tb.size), false));
  absl::Status s;
  {
    py::gil_scoped_release nogil;
    if (n == 1) {  // a decode step: the split-K (flash-decoding) kernel
      const int32_t len = int32_t(start + 1);
      kernels::DecodeParams p{kv, 1, num_q_heads, sm_scale, sliding_window, qp, op, tp,
                              uint32_t(tb.size), &len, uint32_t(len)};
      s = kernels::PagedDecodeCpu(p, Scratch(kernels::DecodeWorkspaceBytesCpu(p)));
    } else {
      kernels::PrefillParams p{kv, num_q_heads, sm_scale, sliding_window, qp, op, tp,
                               uint32_t(tb.size), start, uint32_t(n)};
      s = kernels::PagedPrefillCpu(p, Scratch(kernels::PrefillWorkspaceBytesCpu(p)));
    }
  }
  Check(s);
}

}  // namespace

void BindKernels(py::module_& m) {
  m.def("paged_attention", &PagedAttention, py::arg("arena"), py::arg("layout"),
        py::arg("num_pages"), py::arg("layer"), py::arg("block_table"), py::arg("start"),
        py::arg("q"), py::arg("out"), py::arg("num_q_heads"), py::arg("sm_scale"),
        py::arg("sliding_window") = 0,
        "Causal attention of the queries q ([n][num_q_heads][head_dim] float32) at "
        "positions [start, start + n) of one sequence over `layer` of the pages in "
        "`arena` (num_pages pages of `layout`, page-first as kvtier stores them; the "
        "queries' own K/V already written), through block_table (int32 page indices); "
        "writes out (float32, q's shape). The C++ decoder's CPU kernels: one query runs "
        "the split-K decode kernel, several the prefill kernel. sliding_window 0 is full "
        "attention. ValueError on a wrong size or dtype; kvtier.InvalidArgument on a "
        "block-table entry outside the arena. Releases the GIL.");
  m.def("kernel_isa", &kernels::CpuKernelIsa,
        "The CPU kernels' code path: 'avx2' (AVX2+FMA+F16C) or 'portable'.");
}

}  // namespace kvtier::py
