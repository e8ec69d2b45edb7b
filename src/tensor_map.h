// The TMA descriptors a launch re-encodes around fresh pointers, shared by the two launch paths
// (_core's PreparedLaunch and _xla's FFI handler) so that both decode, check and encode exactly
// the same descriptor.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace aotkernels {

constexpr unsigned kMaxTensorMapRank = 5;  // what cuTensorMapEncodeTiled takes (non-im2col)

// Values per descriptor in the flattened form both launch paths receive: param offset,
// pointer-field index, CUtensorMapDataType, rank, dims[5] (elements, innermost first; unused 1),
// strides[4] (bytes of dims 1..rank-1; unused 0), box[5] (elements; unused 1).
constexpr size_t kTensorMapFields = 4 + 2 * kMaxTensorMapRank + (kMaxTensorMapRank - 1);

// One operand seen as a rank-N array (dims[0] its unit-stride dimension), boxes of box[i]
// elements along dim i, 128-byte swizzle, zeros out of bounds (the contract of the families that
// use TMA in arch_matrix.toml).
struct TensorMapSpec {
  size_t offset;     // of the CUtensorMap in the parameter block
  size_t ptr_index;  // which of the launch's pointer fields is its global address
  int data_type;     // CUtensorMapDataType
  unsigned rank;
  uint64_t dims[kMaxTensorMapRank];
  uint64_t strides[kMaxTensorMapRank - 1];
  unsigned box[kMaxTensorMapRank];
};

// Reads one flattened descriptor (kTensorMapFields values at t) into s, checking what the driver
// would otherwise reject with a bare CUDA_ERROR_INVALID_VALUE: the rank, extents in [1, 2^32],
// byte strides that are positive multiples of 16 below 2^40, boxes in [1, 256] whose inner row
// fits the 128-byte swizzle span. Returns what is wrong, or an empty string. `params_size` and
// `pointers` bound the offset and the pointer index.
inline std::string decode_tensor_map(const int64_t* t, size_t params_size, size_t pointers,
                                     TensorMapSpec& s) {
  for (size_t j = 0; j < kTensorMapFields; ++j)
    if (t[j] < 0) return "fields must be >= 0";
  s.offset = static_cast<size_t>(t[0]);
  s.ptr_index = static_cast<size_t>(t[1]);
  s.data_type = static_cast<int>(t[2]);
  s.rank = static_cast<unsigned>(t[3]);
  if (s.offset + sizeof(CUtensorMap) > params_size || s.ptr_index >= pointers)
    return "outside the parameter block or the pointer fields";
  if (s.rank < 1 || s.rank > kMaxTensorMapRank) return "rank must be in [1, 5]";
  const int64_t* dims = t + 4;
  const int64_t* strides = dims + kMaxTensorMapRank;
  const int64_t* box = strides + kMaxTensorMapRank - 1;
  for (unsigned i = 0; i < kMaxTensorMapRank; ++i) {
    s.dims[i] = static_cast<uint64_t>(dims[i]);
    s.box[i] = static_cast<unsigned>(box[i]);
    if (i >= s.rank) continue;
    if (dims[i] < 1 || dims[i] > (int64_t{1} << 32)) return "extents must be in [1, 2^32]";
    if (box[i] < 1 || box[i] > 256) return "boxes must be in [1, 256]";
  }
  for (unsigned i = 0; i + 1 < kMaxTensorMapRank; ++i) {
    s.strides[i] = static_cast<uint64_t>(strides[i]);
    if (i + 1 >= s.rank) continue;
    if (strides[i] < 16 || strides[i] % 16 || strides[i] >= (int64_t{1} << 40))
      return "byte strides must be positive multiples of 16 below 2^40";
  }
  return {};
}

// The driver wants a 16-byte aligned base; the op layers only build maps over 16-byte aligned
// operands, so this is the launch paths' last guard, with a message naming the cause.
inline std::string tensor_map_address_error(const void* address) {
  if (reinterpret_cast<uintptr_t>(address) % 16 == 0) return {};
  return "tensor map base address is not 16-byte aligned";
}

// Encodes `s` around `address` into `params` (the parameter block, at s.offset). Host-only work,
// no GPU call: the descriptor then travels to the kernel inside the parameter struct.
inline CUresult encode_tensor_map(decltype(&cuTensorMapEncodeTiled) encode, const TensorMapSpec& s,
                                  void* address, char* params) {
  CUtensorMap map;  // the type carries the 64-byte alignment the driver wants
  cuuint64_t dims[kMaxTensorMapRank], strides[kMaxTensorMapRank - 1];
  cuuint32_t box[kMaxTensorMapRank], element_strides[kMaxTensorMapRank];
  for (unsigned i = 0; i < kMaxTensorMapRank; ++i) {
    dims[i] = s.dims[i];
    box[i] = s.box[i];
    element_strides[i] = 1;
    if (i + 1 < kMaxTensorMapRank) strides[i] = s.strides[i];
  }
  CUresult rc =
      encode(&map, static_cast<CUtensorMapDataType>(s.data_type), s.rank, address, dims, strides,
             box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (rc == CUDA_SUCCESS) std::memcpy(params + s.offset, &map, sizeof(map));
  return rc;
}

}  // namespace aotkernels
