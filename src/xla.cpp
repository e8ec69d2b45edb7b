// _xla: aotkernels' kernels as one XLA FFI custom call, for jax.jit.
//
// One typed handler serves every op: the launch description (the kernel's name, the parameter
// block packed by the Python op layer with zeros at pointer fields, where each pointer comes
// from, grid, block, shared memory, TMA descriptors) arrives as attributes of the custom call, the
// buffers as its operands and results. The handler patches the buffers' addresses in and launches
// on XLA's stream: no host synchronisation, no copies.
//
// Kernels are named ("family/symbol"), not passed as CUfunction pointers, so that a compiled
// program holds nothing specific to one process: JAX's persistent compilation cache can serve it
// to the next process, whose lowering publishes that process's CUfunctions under the same names.
// Built only where jaxlib's FFI headers were found, so _core never depends on them. Like _core,
// nothing links libcuda: Python hands over the driver's entry points (set_driver).
#include <cuda.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tensor_map.h"
#include "xla/ffi/api/ffi.h"

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace {

struct Driver {
  decltype(&cuLaunchKernel) launch = nullptr;
  decltype(&cuGetErrorName) error_name = nullptr;
  decltype(&cuTensorMapEncodeTiled) tensor_map_encode = nullptr;
};
Driver g_driver;

void set_driver(uintptr_t launch, uintptr_t error_name, uintptr_t tensor_map_encode) {
  if (!launch || !error_name || !tensor_map_encode)
    throw std::invalid_argument("set_driver: every entry point must be non-null");
  g_driver.launch = reinterpret_cast<decltype(g_driver.launch)>(launch);
  g_driver.error_name = reinterpret_cast<decltype(g_driver.error_name)>(error_name);
  g_driver.tensor_map_encode =
      reinterpret_cast<decltype(g_driver.tensor_map_encode)>(tensor_map_encode);
}

// Published kernels: name -> CUfunction per CUDA ordinal (0 where the family is not loaded).
// Written by the lowering (GIL held), read by handlers on XLA's threads.
std::shared_mutex g_kernels_mutex;
std::map<std::string, std::vector<uint64_t>, std::less<>> g_kernels;

void set_kernels(const std::string& name, std::vector<uint64_t> per_device) {
  std::unique_lock lock(g_kernels_mutex);
  g_kernels[name] = std::move(per_device);
}

// The CUfunction of `name` on `device`, or null when it was not published for that device.
CUfunction find_kernel(std::string_view name, int32_t device) {
  std::shared_lock lock(g_kernels_mutex);
  auto it = g_kernels.find(name);
  if (it == g_kernels.end() || device < 0 || static_cast<size_t>(device) >= it->second.size())
    return nullptr;
  return reinterpret_cast<CUfunction>(it->second[device]);
}

ffi::Error cuda_error(const char* what, CUresult rc) {
  const char* name = "unknown error";
  if (g_driver.error_name) g_driver.error_name(rc, &name);
  return ffi::Error::Internal(std::string("aotkernels: ") + what + " failed: " + name + " (" +
                              std::to_string(static_cast<int>(rc)) + ")");
}

ffi::Error invalid(const std::string& what) {
  return ffi::Error::InvalidArgument("aotkernels launch description: " + what);
}

// The parameter block of one launch: the template with every pointer field set to the address of
// its operand or result, and the TMA descriptors' specs checked against the block. Shared by the
// GPU handler and the host-only describe handler, so that the tests without a GPU exercise exactly
// the decoding and patching the GPU runs.
ffi::Error patch(const ffi::RemainingArgs& args, ffi::RemainingRets& rets,
                 ffi::Span<const uint8_t> params, ffi::Span<const int64_t> ptr_offsets,
                 ffi::Span<const int64_t> slots, ffi::Span<const int64_t> tensor_maps,
                 std::vector<char>& block, std::vector<aotkernels::TensorMapSpec>& maps) {
  if (ptr_offsets.size() != slots.size())
    return invalid(std::to_string(ptr_offsets.size()) + " pointer offsets but " +
                   std::to_string(slots.size()) + " slots");
  block.assign(params.begin(), params.end());
  const int64_t n_args = static_cast<int64_t>(args.size());
  const int64_t n_slots = n_args + static_cast<int64_t>(rets.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t off = ptr_offsets[i], slot = slots[i];
    if (off < 0 || static_cast<size_t>(off) + sizeof(void*) > block.size())
      return invalid("pointer offset " + std::to_string(off) + " outside the " +
                     std::to_string(block.size()) + "-byte parameter block");
    if (slot < -1 || slot >= n_slots)
      return invalid("slot " + std::to_string(slot) + " outside [-1, " + std::to_string(n_slots) +
                     ")");
    void* address = nullptr;
    if (slot >= 0 && slot < n_args) {
      ffi::ErrorOr<ffi::AnyBuffer> buf = args.get<ffi::AnyBuffer>(slot);
      if (!buf) return buf.error();
      address = buf->untyped_data();
    } else if (slot >= n_args) {
      ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> buf = rets.get<ffi::AnyBuffer>(slot - n_args);
      if (!buf) return buf.error();
      address = (*buf)->untyped_data();
    }
    std::memcpy(block.data() + off, &address, sizeof(address));
  }
  constexpr size_t kFields = aotkernels::kTensorMapFields;
  if (tensor_maps.size() % kFields != 0)
    return invalid("tensor_maps must hold " + std::to_string(kFields) + " values per map, got " +
                   std::to_string(tensor_maps.size()));
  maps.clear();
  for (size_t i = 0; i < tensor_maps.size(); i += kFields) {
    aotkernels::TensorMapSpec s;
    std::string err =
        aotkernels::decode_tensor_map(tensor_maps.begin() + i, block.size(), slots.size(), s);
    if (!err.empty()) return invalid("tensor map " + std::to_string(i / kFields) + " " + err);
    maps.push_back(s);
  }
  return ffi::Error::Success();
}

ffi::Error dims3(ffi::Span<const int64_t> v, const char* what, unsigned out[3]) {
  if (v.size() != 3) return invalid(std::string(what) + " must have 3 dimensions");
  for (size_t i = 0; i < 3; ++i) {
    if (v[i] < 1 || v[i] > UINT32_MAX) return invalid(std::string(what) + " out of range");
    out[i] = static_cast<unsigned>(v[i]);
  }
  return ffi::Error::Success();
}

ffi::Error launch(CUstream stream, int32_t device, ffi::RemainingArgs args, ffi::RemainingRets rets,
                  std::string_view kernel, ffi::Span<const uint8_t> params,
                  ffi::Span<const int64_t> ptr_offsets, ffi::Span<const int64_t> slots,
                  ffi::Span<const int64_t> grid, ffi::Span<const int64_t> block, int64_t smem,
                  ffi::Span<const int64_t> tensor_maps) {
  if (!g_driver.launch)
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "aotkernels: the driver's entry points were not handed to _xla (this program "
                      "was compiled in another process, or aotkernels._jax never ran)");
  CUfunction function = find_kernel(kernel, device);
  if (!function)
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "aotkernels: kernel " + std::string(kernel) + " is not loaded on device " +
                          std::to_string(device) +
                          " in this process (its family does not load there, or the program was "
                          "compiled elsewhere and never lowered here)");
  unsigned g[3], b[3];
  if (ffi::Error e = dims3(grid, "grid", g); e.failure()) return e;
  if (ffi::Error e = dims3(block, "block", b); e.failure()) return e;
  if (smem < 0 || smem > UINT32_MAX) return invalid("smem out of range");
  // One block per thread: XLA may run the handler concurrently on several devices' streams.
  thread_local std::vector<char> param_block;
  thread_local std::vector<aotkernels::TensorMapSpec> maps;
  if (ffi::Error e = patch(args, rets, params, ptr_offsets, slots, tensor_maps, param_block, maps);
      e.failure())
    return e;
  for (const aotkernels::TensorMapSpec& s : maps) {
    void* address = nullptr;
    std::memcpy(&address, param_block.data() + ptr_offsets[s.ptr_index], sizeof(address));
    std::string err = aotkernels::tensor_map_address_error(address);
    if (!err.empty()) return invalid(err);
    CUresult rc =
        aotkernels::encode_tensor_map(g_driver.tensor_map_encode, s, address, param_block.data());
    if (rc != CUDA_SUCCESS) return cuda_error("cuTensorMapEncodeTiled", rc);
  }
  // The struct goes in as kernelParams[0], as _core launches it: the driver then places it at
  // the offset the cubin says (not 0 for the 128-byte aligned structs that hold CUtensorMaps).
  void* kernel_params[] = {param_block.data()};
  // A CUfunction launches in its own context (the device's primary one, which XLA uses too).
  CUresult rc = g_driver.launch(function, g[0], g[1], g[2], b[0], b[1], b[2],
                                static_cast<unsigned>(smem), stream, kernel_params, nullptr);
  if (rc != CUDA_SUCCESS) return cuda_error("cuLaunchKernel", rc);
  return ffi::Error::Success();
}

// The host-side half of `launch` for tests without a GPU: the same attributes, decoding and
// patching, then the patched parameter block written to the last result (u8, one per byte)
// instead of a launch.
ffi::Error describe(ffi::RemainingArgs args, ffi::RemainingRets rets, std::string_view kernel,
                    ffi::Span<const uint8_t> params, ffi::Span<const int64_t> ptr_offsets,
                    ffi::Span<const int64_t> slots, ffi::Span<const int64_t> grid,
                    ffi::Span<const int64_t> block, int64_t smem,
                    ffi::Span<const int64_t> tensor_maps) {
  unsigned g[3], b[3];
  if (ffi::Error e = dims3(grid, "grid", g); e.failure()) return e;
  if (ffi::Error e = dims3(block, "block", b); e.failure()) return e;
  if (smem < 0 || smem > UINT32_MAX) return invalid("smem out of range");
  if (kernel.empty()) return invalid("kernel must name the entry point");
  if (rets.size() == 0) return invalid("describe needs a result for the parameter block");
  std::vector<char> param_block;
  std::vector<aotkernels::TensorMapSpec> maps;
  if (ffi::Error e = patch(args, rets, params, ptr_offsets, slots, tensor_maps, param_block, maps);
      e.failure())
    return e;
  ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> out = rets.get<ffi::AnyBuffer>(rets.size() - 1);
  if (!out) return out.error();
  if ((*out)->element_type() != ffi::DataType::U8 || (*out)->size_bytes() != param_block.size())
    return invalid("describe's last result must be u8[" + std::to_string(param_block.size()) + "]");
  std::memcpy((*out)->untyped_data(), param_block.data(), param_block.size());
  return ffi::Error::Success();
}

// The launch description's attributes, in one place for both handlers.
template <typename B>
auto with_description(B binding) {
  return std::move(binding)
      .RemainingArgs()
      .RemainingRets()
      .template Attr<std::string_view>("kernel")
      .template Attr<ffi::Span<const uint8_t>>("params")
      .template Attr<ffi::Span<const int64_t>>("ptr_offsets")
      .template Attr<ffi::Span<const int64_t>>("slots")
      .template Attr<ffi::Span<const int64_t>>("grid")
      .template Attr<ffi::Span<const int64_t>>("block")
      .template Attr<int64_t>("smem")
      .template Attr<ffi::Span<const int64_t>>("tensor_maps");
}

// Command-buffer compatible: XLA may record the launch into the CUDA graph of a jitted program
// (it records again when buffer addresses change); the handler's only device work is the launch.
XLA_FFI_DEFINE_HANDLER(kLaunch, launch,
                       with_description(ffi::Ffi::Bind()
                                            .Ctx<ffi::PlatformStream<CUstream>>()
                                            .Ctx<ffi::DeviceOrdinal>()),
                       {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER(kDescribe, describe, with_description(ffi::Ffi::Bind()));

nb::capsule handler_capsule(XLA_FFI_Handler* fn) {
  // No name and no destructor: the form jax.ffi.register_ffi_target expects.
  return nb::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

NB_MODULE(_xla, m) {
  m.doc() = "aotkernels' XLA FFI launch handler (one typed handler for every op)";
  m.def("set_driver", &set_driver, nb::arg("launch"), nb::arg("error_name"),
        nb::arg("tensor_map_encode"),
        "Hand over the driver's entry points (addresses from cuGetProcAddress): nothing\n"
        "links libcuda.");
  m.def("set_kernels", &set_kernels, nb::arg("name"), nb::arg("per_device"),
        "Publish the CUfunction of kernel `name` per CUDA ordinal (0: not loaded there); the\n"
        "launch handler finds kernels by the name in the custom call's `kernel` attribute.");
  m.def(
      "launch_handler", [] { return handler_capsule(kLaunch); },
      "The typed FFI handler that launches a kernel on XLA's stream, as a PyCapsule.");
  m.def(
      "describe_handler", [] { return handler_capsule(kDescribe); },
      "The host-only handler: the same decoding and pointer patching, but it writes the\n"
      "parameter block to its last result instead of launching (tests without a GPU).");
  // Which headers this module was compiled against, for `aotkernels doctor`.
  m.attr("JAXLIB_VERSION") = AK_JAXLIB_VERSION;
  m.attr("FFI_API_VERSION") = nb::make_tuple(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
}
