// kvtier-make-checkpoint: writes a random-weight Llama-style checkpoint of a
// named size (config.json + model.safetensors, HF tensor names) for tests and
// benchmarks: `kvtier-make-checkpoint --size=124m --out=/tmp/ckpt-124m`.
#include <cstdio>

#include "absl/flags/flag.h"
#include "kvtier/cli.h"
#include "kvtier/decoder/weights.h"

ABSL_FLAG(std::string, size, "tiny", "named size: tiny or 124m");
ABSL_FLAG(std::string, out, "", "output directory (created)");
ABSL_FLAG(std::string, dtype, "bf16", "stored dtype: f32, f16 or bf16");
ABSL_FLAG(uint64_t, seed, 1, "random seed");
ABSL_FLAG(double, init_std, 0.02, "standard deviation of the weights");

int main(int argc, char** argv) {
  kvtier::ParseCommandLine(
      argc, argv,
      "writes a random-weight Llama-style checkpoint of a named size (config.json + "
      "model.safetensors, HF tensor names) for tests and benchmarks.\n"
      "  kvtier-make-checkpoint --size=tiny|124m --out=DIR [--dtype=bf16]");
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "kvtier-make-checkpoint: %s\n", st.ToString().c_str());
    return 1;
  };
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return fail(absl::InvalidArgumentError("--out is required"));
  auto config = kvtier::decoder::NamedConfig(absl::GetFlag(FLAGS_size));
  if (!config.ok()) return fail(config.status());
  std::string d = absl::GetFlag(FLAGS_dtype);
  for (char& c : d) c = char(std::toupper(static_cast<unsigned char>(c)));
  auto dtype = kvtier::decoder::ParseTensorDtype(d);
  if (!dtype.ok()) return fail(dtype.status());
  auto w = kvtier::decoder::RandomWeights(*config, absl::GetFlag(FLAGS_seed),
                                          float(absl::GetFlag(FLAGS_init_std)));
  if (auto st = kvtier::decoder::WriteCheckpoint(out, *w, *dtype); !st.ok()) return fail(st);
  std::printf("wrote %s: %s, %.1fM parameters as %s\n", out.c_str(), absl::GetFlag(FLAGS_size).c_str(),
              double(w->ParameterCount()) / 1e6, d.c_str());
  return 0;
}
