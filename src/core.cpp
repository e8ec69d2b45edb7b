// _core: the one generic launch path of aotkernels, shared by every kernel family.
//
// No link-time dependency on libcuda or libcudart: Python hands over the driver's entry points
// (from cuda-python's cuGetProcAddress) through set_driver(). Every kernel takes a single
// parameter struct whose bytes Python packs from the manifest's layout, so launching needs no
// per-family or per-op binding code.
#include <cuda.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor_map.h"

namespace nb = nanobind;
using aotkernels::TensorMapSpec;

namespace {

struct Driver {
  decltype(&cuLaunchKernel) launch = nullptr;
  decltype(&cuCtxGetCurrent) ctx_get = nullptr;
  decltype(&cuCtxSetCurrent) ctx_set = nullptr;
  decltype(&cuGetErrorName) error_name = nullptr;
  decltype(&cuMemAlloc) mem_alloc = nullptr;
  decltype(&cuMemFree) mem_free = nullptr;
  decltype(&cuTensorMapEncodeTiled) tensor_map_encode = nullptr;
};
Driver g_driver;
PyObject* g_error_type = nullptr;  // aotkernels.AotKernelsError, set from Python

[[noreturn]] void raise_cuda(const std::string& what, CUresult rc) {
  const char* name = "unknown error";
  if (g_driver.error_name) g_driver.error_name(rc, &name);
  std::string msg = what + " failed: " + name + " (" + std::to_string(static_cast<int>(rc)) + ")";
  if (g_error_type) {
    PyErr_SetString(g_error_type, msg.c_str());
    throw nb::python_error();
  }
  throw std::runtime_error(msg);
}

void set_error_type(nb::handle type) {
  Py_XINCREF(type.ptr());
  Py_XDECREF(g_error_type);
  g_error_type = type.ptr();
}

void require_driver() {
  if (!g_driver.launch) throw std::runtime_error("aotkernels._core: driver not set");
}

// Makes `ctx` current for the scope and restores the caller's context after: an op runs on its
// input's device without changing the framework's current device.
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext ctx) {
    CUresult rc = g_driver.ctx_get(&saved_);
    if (rc != CUDA_SUCCESS) raise_cuda("cuCtxGetCurrent", rc);
    if (saved_ != ctx) {
      rc = g_driver.ctx_set(ctx);
      if (rc != CUDA_SUCCESS) raise_cuda("cuCtxSetCurrent", rc);
      switched_ = true;
    }
  }
  ~ScopedContext() {
    if (switched_) g_driver.ctx_set(saved_);
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  CUcontext saved_ = nullptr;
  bool switched_ = false;
};

void set_driver(uintptr_t launch, uintptr_t ctx_get, uintptr_t ctx_set, uintptr_t error_name,
                uintptr_t mem_alloc, uintptr_t mem_free, uintptr_t tensor_map_encode) {
  if (!launch || !ctx_get || !ctx_set || !error_name || !mem_alloc || !mem_free ||
      !tensor_map_encode)
    throw std::invalid_argument("set_driver: every entry point must be non-null");
  g_driver.launch = reinterpret_cast<decltype(g_driver.launch)>(launch);
  g_driver.ctx_get = reinterpret_cast<decltype(g_driver.ctx_get)>(ctx_get);
  g_driver.ctx_set = reinterpret_cast<decltype(g_driver.ctx_set)>(ctx_set);
  g_driver.error_name = reinterpret_cast<decltype(g_driver.error_name)>(error_name);
  g_driver.mem_alloc = reinterpret_cast<decltype(g_driver.mem_alloc)>(mem_alloc);
  g_driver.mem_free = reinterpret_cast<decltype(g_driver.mem_free)>(mem_free);
  g_driver.tensor_map_encode =
      reinterpret_cast<decltype(g_driver.tensor_map_encode)>(tensor_map_encode);
}

// The one launch path. `kernel` is the CUfunction of an entry point in `ctx` (the device's primary
// context). Everything is fixed but the array pointers: built once per (op, layouts) by the Python
// op layer after full validation, then called with fresh pointers on every hit, so per-call host
// work is patching a few bytes and one cuLaunchKernel.
class PreparedLaunch {
 public:
  PreparedLaunch(std::string name, uintptr_t kernel, uintptr_t ctx, std::vector<unsigned> grid,
                 std::vector<unsigned> block, unsigned smem, nb::bytes params,
                 std::vector<size_t> ptr_offsets, std::vector<int64_t> tensor_maps)
      : name_(std::move(name)),
        kernel_(reinterpret_cast<CUfunction>(kernel)),
        ctx_(reinterpret_cast<CUcontext>(ctx)),
        smem_(smem),
        params_(params.c_str(), params.c_str() + params.size()),
        offsets_(std::move(ptr_offsets)) {
    if (grid.size() != 3 || block.size() != 3)
      throw std::invalid_argument("PreparedLaunch: grid and block take 3 dimensions");
    std::copy(grid.begin(), grid.end(), grid_);
    std::copy(block.begin(), block.end(), block_);
    for (size_t off : offsets_)
      if (off + sizeof(uintptr_t) > params_.size())
        throw std::invalid_argument("PreparedLaunch: pointer offset outside the parameters");
    if (tensor_maps.size() % aotkernels::kTensorMapFields != 0)
      throw std::invalid_argument("PreparedLaunch: tensor_maps must hold " +
                                  std::to_string(aotkernels::kTensorMapFields) +
                                  " values per map, got " + std::to_string(tensor_maps.size()));
    for (size_t i = 0; i < tensor_maps.size(); i += aotkernels::kTensorMapFields) {
      TensorMapSpec s;
      std::string err =
          aotkernels::decode_tensor_map(tensor_maps.data() + i, params_.size(), offsets_.size(), s);
      if (!err.empty())
        throw std::invalid_argument("PreparedLaunch: tensor map " +
                                    std::to_string(i / aotkernels::kTensorMapFields) + ": " + err);
      maps_.push_back(s);
    }
  }

  void operator()(uintptr_t stream, nb::args ptrs) {
    require_driver();
    // No pointers: launch with the ones packed into the template (a one-off launch).
    if (ptrs.size() != 0 && ptrs.size() != offsets_.size())
      throw std::invalid_argument("PreparedLaunch: expected " + std::to_string(offsets_.size()) +
                                  " pointers, got " + std::to_string(ptrs.size()));
    for (size_t i = 0; i < ptrs.size(); ++i) {
      uintptr_t p = nb::cast<uintptr_t>(ptrs[i]);
      std::memcpy(params_.data() + offsets_[i], &p, sizeof(p));
    }
    for (const TensorMapSpec& s : maps_) encode(s);
    // Every entry point takes exactly one parameter, the struct, so it goes in as kernelParams[0]:
    // the driver then puts it where the cubin says. (A raw CU_LAUNCH_PARAM_BUFFER would have to
    // reproduce the cubin's parameter offset, which is not 0 for over-aligned structs: ptxas
    // places the 128-byte aligned GEMM struct, holding CUtensorMaps, at offset 0x70.)
    void* args[] = {params_.data()};
    ScopedContext scope(ctx_);
    CUresult rc =
        g_driver.launch(kernel_, grid_[0], grid_[1], grid_[2], block_[0], block_[1], block_[2],
                        smem_, reinterpret_cast<CUstream>(stream), args, nullptr);
    if (rc != CUDA_SUCCESS) raise_cuda(name_ + ": cuLaunchKernel", rc);
  }

 private:
  std::string name_;  // the entry point, for error messages
  CUfunction kernel_;
  CUcontext ctx_;
  unsigned grid_[3];
  unsigned block_[3];
  unsigned smem_;
  std::vector<char> params_;  // the template; pointers are patched in place (GIL held)
  std::vector<size_t> offsets_;
  std::vector<TensorMapSpec> maps_;

  void encode(const TensorMapSpec& s) {
    void* address = nullptr;
    std::memcpy(&address, params_.data() + offsets_[s.ptr_index], sizeof(address));
    std::string err = aotkernels::tensor_map_address_error(address);
    if (!err.empty()) throw std::invalid_argument(name_ + ": " + err);
    CUresult rc =
        aotkernels::encode_tensor_map(g_driver.tensor_map_encode, s, address, params_.data());
    if (rc != CUDA_SUCCESS) raise_cuda(name_ + ": cuTensorMapEncodeTiled", rc);
  }
};

// The fields of a DLPack capsule ("dltensor", unversioned): the consumer only reads it; the
// capsule keeps ownership and its producer's destructor runs when it is collected.
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};

nb::tuple dlpack_info(nb::capsule cap) {
  const char* name = cap.name();
  if (!name || std::string(name) != "dltensor")
    throw std::invalid_argument("expected an unconsumed 'dltensor' DLPack capsule");
  const auto* t = static_cast<const DLTensor*>(cap.data());  // DLManagedTensor starts with it
  nb::list shape, strides;
  for (int i = 0; i < t->ndim; ++i) shape.append(t->shape[i]);
  if (t->strides) {
    for (int i = 0; i < t->ndim; ++i) strides.append(t->strides[i]);
  } else {  // NULL strides mean compact row-major
    int64_t s = 1;
    nb::list rev;
    for (int i = t->ndim - 1; i >= 0; --i) {
      rev.append(s);
      s *= t->shape[i];
    }
    for (int i = t->ndim - 1; i >= 0; --i) strides.append(rev[i]);
  }
  uintptr_t ptr = reinterpret_cast<uintptr_t>(t->data) + t->byte_offset;
  return nb::make_tuple(ptr, t->device.device_type, t->device.device_id, t->dtype.code,
                        t->dtype.bits, t->dtype.lanes, nb::tuple(shape), nb::tuple(strides));
}

// A fresh device buffer exported through DLPack (for frameworks whose arrays we cannot allocate
// through their own API, JAX): freed with cuMemFree under its context when the consumer drops it.
struct DeviceAllocation {
  CUdeviceptr ptr = 0;
  CUcontext ctx = nullptr;
  ~DeviceAllocation() {
    if (ptr) {
      ScopedContext scope(ctx);
      g_driver.mem_free(ptr);
    }
  }
};

nb::ndarray<> empty(uintptr_t ctx, int device_id, std::vector<size_t> shape, uint8_t code,
                    uint8_t bits) {
  require_driver();
  size_t n = (bits + 7) / 8;
  for (size_t d : shape) n *= d;
  auto* alloc = new DeviceAllocation();
  alloc->ctx = reinterpret_cast<CUcontext>(ctx);
  {
    ScopedContext scope(alloc->ctx);
    CUresult rc = g_driver.mem_alloc(&alloc->ptr, n ? n : 1);
    if (rc != CUDA_SUCCESS) {
      delete alloc;
      raise_cuda("cuMemAlloc", rc);
    }
  }
  nb::capsule owner(alloc, [](void* p) noexcept { delete static_cast<DeviceAllocation*>(p); });
  nb::dlpack::dtype dt{code, bits, 1};
  return nb::ndarray<>(reinterpret_cast<void*>(alloc->ptr), shape.size(), shape.data(), owner,
                       nullptr, dt, nb::device::cuda::value, device_id);
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "aotkernels' generic kernel launcher (driver entry points set at run time)";
  m.def("set_driver", &set_driver, nb::arg("launch"), nb::arg("ctx_get"), nb::arg("ctx_set"),
        nb::arg("error_name"), nb::arg("mem_alloc"), nb::arg("mem_free"),
        nb::arg("tensor_map_encode"),
        "Hand over the driver's entry points (addresses from cuGetProcAddress): nothing\n"
        "links libcuda.");
  m.def("set_error_type", &set_error_type,
        nb::sig("def set_error_type(type: type[BaseException], /) -> None"),
        "The exception class launch failures are raised as (aotkernels.AotKernelsError).");
  m.def("dlpack_info", &dlpack_info,
        nb::sig("def dlpack_info(capsule: typing_extensions.CapsuleType, /) -> "
                "tuple[int, int, int, int, int, int, tuple[int, ...], tuple[int, ...]]"),
        "(data pointer, device type, device id, dtype code, bits, lanes, shape, strides) of an\n"
        "unconsumed DLPack capsule; strides in elements, compact row-major when it has none.");
  m.def("empty", &empty,
        nb::sig("def empty(ctx: int, device_id: int, shape: collections.abc.Sequence[int], "
                "code: int, bits: int, /) -> typing_extensions.CapsuleType"),
        "A fresh device buffer of `shape` in context `ctx`, as an unconsumed DLPack capsule,\n"
        "freed (cuMemFree) when the consumer drops it.");
  nb::class_<PreparedLaunch>(m, "PreparedLaunch",
                             "One op's launch with everything fixed but the array pointers.")
      .def(nb::init<std::string, uintptr_t, uintptr_t, std::vector<unsigned>, std::vector<unsigned>,
                    unsigned, nb::bytes, std::vector<size_t>, std::vector<int64_t>>(),
           nb::arg("name"), nb::arg("kernel"), nb::arg("ctx"), nb::arg("grid"), nb::arg("block"),
           nb::arg("smem"), nb::arg("params"), nb::arg("ptr_offsets"),
           nb::arg("tensor_maps").sig("()") = std::vector<int64_t>(),
           "`params`: the packed parameter struct; each call patches pointers at `ptr_offsets`.\n"
           "`tensor_maps`: 18 values per TMA descriptor to re-encode around its pointer on every\n"
           "launch: param offset, pointer index, CUtensorMapDataType, rank, dims[5] (innermost\n"
           "first), byte strides[4] (of dims 1..rank-1), box[5].")
      .def("__call__", &PreparedLaunch::operator(),
           nb::sig("def __call__(self, stream: int, /, *ptrs: int) -> None"),
           "Patch `ptrs` (one per pointer offset, or none: the packed ones) into the parameter\n"
           "block and launch on `stream`.");
}
