// GEMM family: one kernel template per tensor-core path, instantiated per op x dtype x variant by
// the generated gemm_entries.cu (AK_ENTRY_<PATH>(symbol, op, T, V), V the variant's config
// struct). The build plan only emits an instantiation inside `#if` guards of the targets that
// have its features, so each path's PTX appears only in the images that can run it.
#pragma once

#include "epilogue.cuh"
#include "mma_sync.cuh"
#include "tcgen05.cuh"
#include "wgmma.cuh"
