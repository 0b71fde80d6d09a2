// kvtier._native: the compiled half of the `kvtier` package. The plain Python
// modules in client/python/kvtier/ wrap it; import `kvtier`, not this.
#include "common.h"
#include "kvtier/paths.h"

PYBIND11_MODULE(_native, m) {
  m.doc() = "kvtier client extension (pybind11 over libkvtier-client); use the kvtier package";
  kvtier::py::BindErrors(m);
  kvtier::py::BindKeys(m);
  kvtier::py::BindBuffers(m);
  kvtier::py::BindClient(m);
  kvtier::py::BindDevice(m);
  kvtier::py::BindKernels(m);
  // The one version of the project (CMake's project(VERSION)), so the
  // package, the programs and the .deb never disagree.
  m.attr("__version__") = KVTIER_VERSION;
  m.def("default_endpoint", &kvtier::DefaultEndpoint,
        "The endpoint a Client uses without one ($KVTIER_ENDPOINT, else the default socket).");
}
