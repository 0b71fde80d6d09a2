// kvtier-generate: runs the decoder on a prompt, reusing the prompt's cached
// prefix pages through kvtierd when one answers (and storing the pages it
// computes), and prints the new tokens, TTFT, tokens restored vs computed and
// decode speed. `--runs=2` serves the same prompt twice in one process.
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kvtier/cli.h"
#include "kvtier/decoder/session.h"

ABSL_FLAG(std::string, model, "",
          "checkpoint directory (config.json + *.safetensors), or llama3-8b-random (= --size=llama3-8b)");
ABSL_FLAG(std::string, size, "tiny",
          "without --model: random weights of this size (tiny, 124m; llama3-8b: on the GPU only, "
          "generated there from --weight_seed)");
ABSL_FLAG(std::string, device, "cpu", "where the forward pass runs: cpu, or cuda (weights and KV on the GPU)");
ABSL_FLAG(std::string, gpu_weights, "bf16", "--device=cuda: weight dtype on the GPU (fp32, fp16, bf16)");
ABSL_FLAG(int32_t, gpu, 0, "--device=cuda: CUDA device index");
ABSL_FLAG(uint64_t, weight_seed, 1, "seed of the random weights");
ABSL_FLAG(std::string, prompt, "", "prompt text (byte-level tokens)");
ABSL_FLAG(std::string, prompt_file, "", "file whose bytes are the prompt");
ABSL_FLAG(std::string, prompt_ids, "", "prompt as comma-separated token ids");
ABSL_FLAG(uint32_t, random_prompt_tokens, 0, "prompt of N pseudo-random token ids (--prompt_seed)");
ABSL_FLAG(uint64_t, prompt_seed, 7, "seed of --random_prompt_tokens");
ABSL_FLAG(uint32_t, max_new_tokens, 32, "tokens to generate");
ABSL_FLAG(double, temperature, 0.0, "0 = greedy");
ABSL_FLAG(uint32_t, top_k, 0, "top-k cut (0: none)");
ABSL_FLAG(double, top_p, 1.0, "nucleus cut (1: none)");
ABSL_FLAG(uint64_t, sampling_seed, 0, "seed of sampling");
ABSL_FLAG(uint32_t, tokens_per_page, 256, "tokens per KV page (= daemon page)");
ABSL_FLAG(std::string, kv_dtype, "fp16", "KV page dtype: fp32, fp16, bf16, int8, fp8");
ABSL_FLAG(uint32_t, kv_pages, 0, "KV arena pages (0: enough for the prompt and new tokens)");
ABSL_FLAG(
    std::string, kv_hugepages, "auto",
    "KV arena pages: auto (2 MiB hugetlb pages when the machine has them free: vm.nr_hugepages), "
    "on (hugetlb or fail), off (4 KiB shm pages)");
ABSL_FLAG(int32_t, sliding_window, -1,
          "attention window in tokens (0: full; -1: config.json's sliding_window, full when it has none)");
ABSL_FLAG(uint32_t, runs, 1, "serve the prompt this many times (reuse shows from run 2)");
ABSL_FLAG(bool, no_daemon, false, "do not contact kvtierd");
ABSL_FLAG(bool, layerwise, false,
          "restore the prefix layer by layer (prefill overlaps the copy; same output)");
ABSL_FLAG(std::string, endpoint, "", "kvtierd endpoint (default: the default ipc socket)");
ABSL_FLAG(std::string, tenant, "default", "tenant");
ABSL_FLAG(std::string, token, "", "tenant token");
ABSL_FLAG(bool, print_ids, false, "print new token ids instead of text");

namespace {

using kvtier::decoder::GenerateResult;

absl::StatusOr<std::vector<uint32_t>> Prompt() {
  if (!absl::GetFlag(FLAGS_prompt_ids).empty()) {
    std::vector<uint32_t> ids;
    for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_prompt_ids), ',')) {
      uint32_t id;
      if (!absl::SimpleAtoi(p, &id))
        return absl::InvalidArgumentError(absl::StrCat("--prompt_ids: \"", p, "\" is not a token id"));
      ids.push_back(id);
    }
    return ids;
  }
  if (uint32_t n = absl::GetFlag(FLAGS_random_prompt_tokens); n > 0) {
    std::mt19937 rng(uint32_t(absl::GetFlag(FLAGS_prompt_seed)));
    std::vector<uint32_t> ids(n);
    for (uint32_t& t : ids) t = rng() % 256;  // byte tokens: valid in every vocabulary here
    return ids;
  }
  std::string text = absl::GetFlag(FLAGS_prompt);
  if (!absl::GetFlag(FLAGS_prompt_file).empty()) {
    std::ifstream in(absl::GetFlag(FLAGS_prompt_file), std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(absl::GetFlag(FLAGS_prompt_file), ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  if (text.empty()) return absl::InvalidArgumentError("give a prompt: --prompt, --prompt_file, --prompt_ids or --random_prompt_tokens");
  return kvtier::decoder::ByteTokens(text);
}

void Report(uint32_t run, const GenerateResult& r) {
  const auto& s = r.stats;
  std::string text = absl::GetFlag(FLAGS_print_ids) ? absl::StrJoin(r.tokens, ",")
                                                    : kvtier::decoder::BytesToText(r.tokens);
  std::string tiers;
  for (kvtier::TierKind t : s.restored_from) absl::StrAppend(&tiers, tiers.empty() ? "" : ",", kvtier::TierKindName(t));
  absl::PrintF("run %u: %s\n", run, text);
  absl::PrintF("run %u: prompt %u tokens: restored %u (%s), computed %u; TTFT %.1f ms (restore %.1f ms%s)\n",
               run, s.prompt_tokens, s.restored_tokens, tiers.empty() ? "none" : tiers, s.computed_tokens,
               s.ttft_ms, s.restore_ms,
               s.layerwise ? absl::StrFormat(", layer-wise, prefill waited %.1f ms", s.layer_wait_ms) : "");
  absl::PrintF("run %u: %u new tokens, decode %.1f tokens/s; pages put %u, deduplicated %u, not stored %u (PUT %.1f ms)\n",
               run, s.new_tokens, s.DecodeTokensPerS(), s.pages_put, s.pages_deduplicated,
               s.pages_not_stored, s.put_ms);
  if (!s.reuse_note.empty()) absl::PrintF("run %u: reuse: %s\n", run, s.reuse_note);
  // A normal stop, like EOS, but one the user should hear about.
  if (!s.stop_note.empty()) std::fprintf(stderr, "kvtier-generate: run %u: %s\n", run, s.stop_note.c_str());
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "kvtier-generate: %s\n", st.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "runs the small decoder on a prompt, reusing the prompt's cached prefix pages through "
      "kvtierd when one answers (and storing the pages it computes); prints the new tokens, "
      "TTFT, tokens restored vs computed and decode speed. --runs=2 serves the prompt twice.\n"
      "  kvtier-generate [--model=DIR | --size=tiny|124m] --prompt=TEXT [flags]\n"
      "  kvtier-generate --device=cuda --model=llama3-8b-random --random_prompt_tokens=8192");
  auto prompt = Prompt();
  if (!prompt.ok()) return Fail(prompt.status());
  auto kv_dtype = kvtier::ParseDtype(absl::GetFlag(FLAGS_kv_dtype));
  if (!kv_dtype.ok()) return Fail(kv_dtype.status());
  kvtier::decoder::SessionOptions o;
  o.checkpoint_dir = absl::GetFlag(FLAGS_model);
  o.size = absl::GetFlag(FLAGS_size);
  if (o.checkpoint_dir == "llama3-8b-random") {
    o.checkpoint_dir.clear();
    o.size = "llama3-8b";
  }
  auto device = kvtier::decoder::ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) return Fail(device.status());
  o.device = *device;
  auto gpu_weights = kvtier::decoder::ParseGpuWeights(absl::GetFlag(FLAGS_gpu_weights));
  if (!gpu_weights.ok()) return Fail(gpu_weights.status());
  o.cuda.weights = *gpu_weights;
  o.cuda.device = absl::GetFlag(FLAGS_gpu);
  o.weight_seed = absl::GetFlag(FLAGS_weight_seed);
  o.tokens_per_page = absl::GetFlag(FLAGS_tokens_per_page);
  o.kv_dtype = *kv_dtype;
  const uint32_t tpp = std::max(1u, o.tokens_per_page);
  auto kv_huge = kvtier::ParseHugePages(absl::GetFlag(FLAGS_kv_hugepages));
  if (!kv_huge.ok()) return Fail(kv_huge.status());
  o.kv_huge_pages = *kv_huge;
  o.kv_pages = absl::GetFlag(FLAGS_kv_pages);
  if (o.kv_pages == 0)
    o.kv_pages = uint32_t((prompt->size() + absl::GetFlag(FLAGS_max_new_tokens) + tpp - 1) / tpp) + 1;
  if (absl::GetFlag(FLAGS_sliding_window) >= 0) o.sliding_window = uint32_t(absl::GetFlag(FLAGS_sliding_window));
  o.use_daemon = !absl::GetFlag(FLAGS_no_daemon);
  o.client.endpoint = absl::GetFlag(FLAGS_endpoint);
  o.client.tenant = absl::GetFlag(FLAGS_tenant);
  o.client.token = absl::GetFlag(FLAGS_token);
  o.client.client_name = "kvtier-generate";
  auto session = kvtier::decoder::DecoderSession::Create(o);
  if (!session.ok()) return Fail(session.status());
  kvtier::decoder::DecoderSession& s = **session;
  absl::PrintF("model: %u layers x %u hidden, %u heads (%u KV), vocab %u, %.1fM parameters; KV page %s\n",
               s.weights().config.num_hidden_layers, s.weights().config.hidden_size,
               s.weights().config.num_attention_heads, s.weights().config.num_key_value_heads,
               s.weights().config.vocab_size, s.weights().ParameterCount() / 1e6,
               s.cache().layout().DebugString());
  absl::PrintF("device: %s\n", s.model().device() ? s.model().device()->Describe() : "cpu");
  absl::PrintF("daemon: %s\n", s.store() ? "connected, prefix reuse on" : s.daemon_note());
  kvtier::decoder::GenerateOptions g;
  g.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  g.sampling = {float(absl::GetFlag(FLAGS_temperature)), absl::GetFlag(FLAGS_top_k),
                float(absl::GetFlag(FLAGS_top_p)), absl::GetFlag(FLAGS_sampling_seed)};
  g.layerwise_restore = absl::GetFlag(FLAGS_layerwise);
  for (uint32_t run = 1; run <= absl::GetFlag(FLAGS_runs); ++run) {
    auto r = s.generator().Generate(*prompt, g);
    if (!r.ok()) return Fail(r.status());
    Report(run, *r);
  }
  return 0;
}
