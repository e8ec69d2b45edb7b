// The TMA descriptors a launch re-encodes around fresh pointers, shared by the two launch paths
// (_core's PreparedLaunch and _xla's FFI handler) so that both encode exactly the same descriptor.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace aotkernels {

// One operand seen as a 2-D [outer, inner] array (inner = its unit-stride dimension), boxes of
// box_inner x box_outer elements, 128-byte swizzle, zeros out of bounds (the GEMM contract in
// arch_matrix.toml).
struct TensorMapSpec {
  size_t offset;     // of the CUtensorMap in the parameter block
  size_t ptr_index;  // which of the launch's pointer fields is its global address
  int data_type;     // CUtensorMapDataType
  uint64_t inner, outer, row_bytes;
  unsigned box_inner, box_outer;
};

// Encodes `s` around `address` into `params` (the parameter block, at s.offset). Host-only work,
// no GPU call: the descriptor then travels to the kernel inside the parameter struct.
inline CUresult encode_tensor_map(decltype(&cuTensorMapEncodeTiled) encode, const TensorMapSpec& s,
                                  void* address, char* params) {
  CUtensorMap map;  // the type carries the 64-byte alignment the driver wants
  cuuint64_t dims[2] = {s.inner, s.outer};
  cuuint64_t strides[1] = {s.row_bytes};
  cuuint32_t box[2] = {s.box_inner, s.box_outer};
  cuuint32_t element_strides[2] = {1, 1};
  CUresult rc =
      encode(&map, static_cast<CUtensorMapDataType>(s.data_type), 2, address, dims, strides, box,
             element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (rc == CUDA_SUCCESS) std::memcpy(params + s.offset, &map, sizeof(map));
  return rc;
}

}  // namespace aotkernels
